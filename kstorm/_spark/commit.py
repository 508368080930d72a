"""The commit phase: what runs on the driver for each batch, in batch order (``foreachBatch``).

For batch ``batch_id`` (Storm's txid):

1. Collect the batch's rows addressed to the driver (one Arrow table).
2. Read the batch's source end offsets from the checkpoint's offset log (written by Spark
   before the batch ran, so a replay carries the same offsets).
3. Fold the stages' metrics into the topology's progress.
   3b. At least once: the ackers' events -> the spouts' ack/fail, retries, time-outs and
   dead letters (``kstorm/_reliability.py``).
4. Write dead letters (undecodable records, tuples whose bolt raised, spout tuples out of
   retries) with their reasons.
5. Fold the batch's partials into each windowed aggregate; the windows the watermark
   passed become tuples for the aggregate's sinks.
6. Commit each sink, in topology order, with its tuples, the batch id and the offsets.
   Sinks make this step idempotent per batch id (see ``kstorm/sink.py``).
   Stateful sinks also store the snapshots windowed bolt tasks sent (message id field).
7. Persist each windowed aggregate's state under the batch id (a replay of this batch
   reloads the state of the batch before, so it closes the same windows).
   7b. At least once: persist the spouts' trackers under the batch id and write the books
   their sources plan the next batch with (retries, committable group offsets).
8. Record captured emissions (testing).

Spark writes the batch to its commit log only after this function returns; a crash before
that replays the same batch id with the same offsets, and the sinks skip or recompute it.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kstorm._kafka.clocks import without_clocks
from kstorm._runtime.deadletter import DeadLetterWriter, as_record
from kstorm._runtime.executor import CAPTURE_DEST, unpack_metas, unpack_values
from kstorm._ids import DEAD_LETTER_STREAM
from kstorm._runtime.progress import Progress
from kstorm._runtime.reliability import SpoutReliability, batch_marks
from kstorm._spark.acker import ACKER_EVENTS
from kstorm._spark.gc_control import paused
from kstorm._spark.stage import METRICS_DEST
from kstorm._spark.windowed import window_dest
from kstorm._spark.windowed_bolt import STATE_DEST, state_key
from kstorm.sink import BaseSink
from kstorm.topology import StormTopology
from kstorm.tuple import Tuple

log = logging.getLogger("kstorm.commit")

UNACKED_STATE = "acking:lowest-unacked"  # sink state entry: where tracked spouts resume


def batch_offsets(checkpoint: Path, batch_id: int, spouts: list[str]) -> dict[str, Any]:
    """End offsets of ``batch_id`` per spout, from Spark's offset log.

    The log's source lines follow the order of the sources in the query plan, which is the
    order the compiler reads the spouts in (``spouts``).
    """
    path = checkpoint / "offsets" / str(batch_id)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    sources = [json.loads(line) if line.strip() not in ("", "-") else None for line in lines[2:]]
    return {spout: without_clocks(offsets) for spout, offsets in zip(spouts, sources, strict=False)
            if offsets is not None}


class CommitPhase:
    """The ``foreachBatch`` function of a running topology."""

    def __init__(self, topology: StormTopology, name: str, checkpoint: Path,
                 sinks: dict[str, BaseSink], conf: dict[str, Any], progress: Progress,
                 dead_letters: DeadLetterWriter, windows: dict[str, Any] | None = None,
                 reliability: SpoutReliability | None = None) -> None:
        self.topology = topology
        self.name = name
        self.checkpoint = checkpoint
        self.sinks = sinks
        self.conf = conf
        self.progress = progress
        self.dead_letters = dead_letters
        self.windows = windows or {}
        self.reliability = reliability
        self.captured: list[tuple[str, str, list[Any]]] = []
        self._spouts = [s.id for s in topology.spouts()]

    def __call__(self, frame: Any, batch_id: int) -> None:
        started = time.monotonic()
        # Step 1: the rows addressed to the driver.
        table: pa.Table = frame.toArrow()
        by_dest = _split(table)
        # Step 2: the batch's source offsets.
        offsets = batch_offsets(self.checkpoint, batch_id, self._spouts)
        # Step 3: metrics.
        for payload in by_dest.pop(METRICS_DEST, _EMPTY).column("__vals").to_pylist():
            self.progress.add_counters(pickle.loads(payload))
        # Step 3b: at least once, the spout side of the trees that ended or timed out.
        reliable = None
        if self.reliability is not None:
            events = by_dest.pop(ACKER_EVENTS, _EMPTY)
            ends, batch_ms = batch_marks(self.checkpoint, batch_id, self._spouts)
            reliable = self.reliability.commit(
                batch_id, ends, batch_ms,
                list(zip(events.column("__task").to_pylist(),
                         events.column("__vals").to_pylist(), strict=True)))
            self.progress.add_counters(reliable.counters)
            self.progress.set_gauges(reliable.gauges)
        # Step 4: dead letters.
        dead = by_dest.pop(DEAD_LETTER_STREAM, _EMPTY)
        self.dead_letters.write(batch_id, [as_record(pickle.loads(v))
                                           for v in dead.column("__vals").to_pylist()]
                                + (reliable.dead_letters if reliable is not None else []))
        # Step 5: windowed aggregates fold the batch in and emit the windows that closed.
        extra: dict[str, list[Tuple]] = defaultdict(list)
        persist = []
        for component, windows in self.windows.items():
            rows = by_dest.pop(window_dest(component), _EMPTY)
            results, state = windows.commit(batch_id, rows.column("__vals").to_pylist())
            persist.append((windows, state))
            fields = self.topology.components[component].streams["default"]
            for consumer, _ in self.topology.consumers(component, "default"):
                extra[consumer].extend(Tuple(v, fields, component) for v in results)
            self.progress.add_counters({f"{component}.windows": len(results)})
        # Step 6: sinks, in topology order.
        captured = by_dest.pop(CAPTURE_DEST, _EMPTY)
        state = {f"window:{w.component}": snap.snapshot() for w, snap in persist}
        state.update(_windowed_bolt_state(by_dest))
        if self.reliability is not None and reliable is not None:
            state[UNACKED_STATE] = self.reliability.resume_state(batch_id, reliable)
        for sink_id, sink in self.sinks.items():
            rows = by_dest.pop(sink_id, _EMPTY)
            tuples = self._tuples(rows) + extra.get(sink_id, [])
            if sink.stores_state:
                sink.commit(batch_id, tuples, offsets, state=state)
            else:
                sink.commit(batch_id, tuples, offsets)
        # Step 7: the windows' state after this batch (a replay restarts from the previous).
        for windows, state in persist:
            windows.persist(batch_id, state)
        # Step 7b: the spouts' trackers and books after this batch.
        if self.reliability is not None and reliable is not None:
            self.reliability.persist(batch_id, reliable)
        # Step 8: captured emissions (testing).
        for src, stream, vals in zip(captured.column("__src").to_pylist(),
                                     captured.column("__stream").to_pylist(),
                                     captured.column("__vals").to_pylist(), strict=True):
            self.captured.append((src, stream, pickle.loads(vals)))
        for dest in by_dest:
            log.error("batch %s: %d rows for unknown destination %r", batch_id,
                      by_dest[dest].num_rows, dest)
        self.progress.batch_committed(batch_id, offsets, time.monotonic() - started)

    def _tuples(self, rows: pa.Table) -> list[Tuple]:
        comps = self.topology.components
        out = []
        with paused():  # many objects, all kept: collections would only walk the heap
            for src, stream, vals, meta in zip(rows.column("__src").to_pylist(),
                                               rows.column("__stream").to_pylist(),
                                               rows.column("__vals").to_pylist(),
                                               rows.column("__meta").to_pylist(), strict=True):
                fields = comps[src].streams[stream]
                values = unpack_values(vals)
                for v, m in zip(values, unpack_metas(meta, len(values)), strict=True):
                    t = Tuple._received(v, fields, src, stream)
                    t._ids = m
                    out.append(t)
        return out

    def close(self) -> None:
        """Close the sinks (opened by the runner before the query starts) and the DLQ producer."""
        for sink in self.sinks.values():
            sink.close()
        self.dead_letters.close()


def _windowed_bolt_state(by_dest: dict[str, pa.Table]) -> dict[str, bytes]:
    """Snapshots windowed bolt tasks sent this batch (stored with the sinks' offsets)."""
    state: dict[str, bytes] = {}
    for dest in [d for d in by_dest if d.startswith(STATE_DEST)]:
        rows = by_dest.pop(dest)
        component = dest[len(STATE_DEST):]
        for task, blob in zip(rows.column("__task").to_pylist(),
                              rows.column("__vals").to_pylist(), strict=True):
            state[state_key(component, task)] = blob
    return state


_EMPTY = pa.table({"__dest": pa.array([], pa.string()), "__task": pa.array([], pa.int32()),
                   "__src": pa.array([], pa.string()), "__stream": pa.array([], pa.string()),
                   "__vals": pa.array([], pa.binary()), "__meta": pa.array([], pa.binary())})


def _split(table: pa.Table) -> dict[str, pa.Table]:
    if table.num_rows == 0:
        return {}
    dests = pc.unique(table.column("__dest")).to_pylist()
    if len(dests) == 1:
        return {dests[0]: table}
    out: dict[str, pa.Table] = defaultdict(lambda: _EMPTY)
    for dest in dests:
        out[dest] = table.filter(pc.equal(table.column("__dest"), dest))
    return dict(out)
