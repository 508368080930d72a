"""The commit phase: what runs on the driver for each batch, in batch order (``foreachBatch``).

For batch ``batch_id`` (txid = the checkpoint's txid base + ``batch_id``):

1. Collect the batch's rows addressed to the driver (one Arrow table), split by destination.
2. Read the batch's end offsets from Spark's offset log (written before the batch ran, so a
   replay carries the same offsets): one typed :class:`BatchOffsets`.
3. Fold the stages' metrics into the topology's progress.
   3b. At least once: the ackers' events -> the spouts' ack/fail, retries, time-outs and
   dead letters (``kstorm/_runtime/reliability.py``).
4. Write dead letters (undecodable records, tuples whose bolt raised, spout tuples out of
   retries) with their reasons.
5. Fold the batch's partials into each windowed aggregate; the windows the watermark
   passed become tuples for the aggregate's sinks.
6. Commit each sink, in topology order, with a :class:`SinkBatch`: the txid, its tuples,
   the Kafka end offsets and the runtime's state after the batch (windowed aggregates' open
   windows, windowed bolt snapshots, at least once the lowest un-acked offsets). Sinks make
   this step idempotent per txid (``kstorm/sink.py``); a sink that fails is aborted.
7. Persist each windowed aggregate's state under the batch id (a replay of this batch
   reloads the state of the batch before, so it closes the same windows).
   7b. At least once: persist the spouts' trackers under the batch id and write the books
   their sources plan the next batch with (retries, committable group offsets).
8. Captured emissions: kept for ``kstorm.testing`` (``kstorm.capture.emitted``), logged on
   ``kstorm.debug`` (``topology.debug``).

Spark writes the batch to its commit log only after this function returns; a crash before
that replays the same batch id with the same offsets, and the sinks skip or recompute it.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from kstorm._runtime.deadletter import DeadLetterWriter, as_record
from kstorm._runtime.envelope import (
    ACKER_EVENTS,
    CAPTURE,
    DEAD_LETTER,
    EMPTY,
    METRICS,
    STATE_PREFIX,
    split_by_dest,
    unpack_metas,
    unpack_values,
    window_dest,
)
from kstorm._runtime.plan import source_kind
from kstorm._runtime.progress import Progress
from kstorm._runtime.reliability import SpoutReliability
from kstorm._spark.gc_control import paused
from kstorm._spark.offset_log import read_batch
from kstorm._spark.windowed_bolt import state_key
from kstorm.config import TopologyConfig
from kstorm.errors import KstormError, SinkError
from kstorm.sink import BaseSink, SinkBatch, commit_sink
from kstorm.topology import StormTopology
from kstorm.tuple import Tuple

log = logging.getLogger("kstorm.commit")
debug_log = logging.getLogger("kstorm.debug")

UNACKED_STATE = "acking:lowest-unacked"  # sink state entry: where tracked spouts resume


def window_state_key(component: str) -> str:
    """Name of a windowed aggregate's open windows in the sinks' stored state."""
    return f"window:{component}"


class CommitPhase:
    """The ``foreachBatch`` function of a running topology."""

    def __init__(self, topology: StormTopology, name: str, checkpoint: Path,
                 settings: TopologyConfig, sinks: dict[str, BaseSink], txid_base: int,
                 progress: Progress, dead_letters: DeadLetterWriter,
                 windows: dict[str, Any] | None = None,
                 reliability: SpoutReliability | None = None) -> None:
        self.topology = topology
        self.name = name
        self.checkpoint = checkpoint
        self.settings = settings
        self.sinks = sinks
        self.txid_base = txid_base
        self.progress = progress
        self.dead_letters = dead_letters
        self.windows = windows or {}
        self.reliability = reliability
        self.captured: list[tuple[str, str, list[Any]]] = []
        self.failure: BaseException | None = None  # what stopped the topology, if it failed here
        self._spouts = [s.id for s in topology.spouts()]
        self._kafka = {s.id for s in topology.spouts() if source_kind(s.component) == "kafka"}

    def __call__(self, frame: Any, batch_id: int) -> None:
        try:
            self.commit(frame.toArrow(), batch_id)
        except BaseException as exc:
            self.failure = exc
            raise

    def commit(self, table: pa.Table, batch_id: int) -> None:
        """Steps 1-8 of the module docstring for the driver rows ``table`` of ``batch_id``."""
        started = time.monotonic()
        # Step 1: the rows addressed to the driver.
        by_dest = split_by_dest(table)
        # Step 2: the batch's source offsets.
        offsets = read_batch(self.checkpoint, batch_id, self._spouts, kafka_spouts=self._kafka)
        txid = self.txid_base + batch_id
        # Step 3: metrics.
        for payload in by_dest.pop(METRICS, EMPTY).column("__vals").to_pylist():
            self.progress.add_counters(pickle.loads(payload))
        # Step 3b: at least once, the spout side of the trees that ended or timed out.
        reliable = None
        if self.reliability is not None:
            events = by_dest.pop(ACKER_EVENTS, EMPTY)
            reliable = self.reliability.commit(
                offsets, list(zip(events.column("__task").to_pylist(),
                                  events.column("__vals").to_pylist(), strict=True)))
            self.progress.add_counters(reliable.counters)
            self.progress.set_gauges(reliable.gauges)
        # Step 4: dead letters.
        dead = by_dest.pop(DEAD_LETTER, EMPTY)
        self.dead_letters.write(batch_id, [as_record(pickle.loads(v))
                                           for v in dead.column("__vals").to_pylist()]
                                + (reliable.dead_letters if reliable is not None else []))
        # Step 5: windowed aggregates fold the batch in and emit the windows that closed.
        extra: dict[str, list[Tuple]] = defaultdict(list)
        persist = []
        for component, windows in self.windows.items():
            rows = by_dest.pop(window_dest(component), EMPTY)
            results, state = windows.commit(batch_id, rows.column("__vals").to_pylist())
            persist.append((windows, state))
            fields = self.topology.components[component].streams["default"]
            for consumer, _ in self.topology.consumers(component, "default"):
                extra[consumer].extend(Tuple(v, fields, component) for v in results)
            self.progress.add_counters({f"{component}.windows": len(results)})
        # Step 6: sinks, in topology order.
        captured = by_dest.pop(CAPTURE, EMPTY)
        state = {window_state_key(w.component): snap.snapshot() for w, snap in persist}
        state.update(_windowed_bolt_state(by_dest))
        if self.reliability is not None and reliable is not None:
            state[UNACKED_STATE] = self.reliability.resume_state(batch_id, reliable)
        ends = offsets.kafka_ends()
        for sink_id, sink in self.sinks.items():
            rows = by_dest.pop(sink_id, EMPTY)
            batch = SinkBatch(txid, batch_id, self._tuples(rows) + extra.get(sink_id, []),
                              ends, state)
            self._commit_sink(sink_id, sink, batch)
        # Step 7: the windows' state after this batch (a replay restarts from the previous).
        for windows, snap in persist:
            windows.persist(batch_id, snap)
        # Step 7b: the spouts' trackers and books after this batch.
        if self.reliability is not None and reliable is not None:
            self.reliability.persist(batch_id, reliable)
        # Step 8: captured emissions.
        self._captured(batch_id, captured)
        for dest in by_dest:
            log.error("batch %s: %d rows for unknown destination %r", batch_id,
                      by_dest[dest].num_rows, dest)
        self.progress.batch_committed(batch_id, offsets.summary(), time.monotonic() - started)

    def _commit_sink(self, sink_id: str, sink: BaseSink, batch: SinkBatch) -> None:
        try:
            commit_sink(sink, batch)
        except Exception as exc:
            try:
                sink.abort(batch)
            except Exception:  # the commit's failure is what the user must see
                log.exception("sink %r: abort of txid %s raised", sink_id, batch.txid)
            if isinstance(exc, KstormError):
                raise
            msg = f"sink {sink_id!r} failed to commit txid {batch.txid}: " \
                  f"{type(exc).__name__}: {exc}"
            raise SinkError(msg) from exc

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

    def _captured(self, batch_id: int, captured: pa.Table) -> None:
        if captured.num_rows == 0:
            return
        keep = self.settings.capture_emitted
        show = self.settings.debug and debug_log.isEnabledFor(logging.INFO)
        for src, stream, vals in zip(captured.column("__src").to_pylist(),
                                     captured.column("__stream").to_pylist(),
                                     captured.column("__vals").to_pylist(), strict=True):
            values = pickle.loads(vals)
            if keep:
                self.captured.append((src, stream, values))
            if show:
                debug_log.info("batch %s: %s emitted on %s: %r", batch_id, src, stream, values)

    def close(self) -> None:
        """Close the sinks (opened by the runner before the query starts) and the DLQ producer."""
        for sink in self.sinks.values():
            sink.close()
        self.dead_letters.close()


def _windowed_bolt_state(by_dest: dict[str, pa.Table]) -> dict[str, bytes]:
    """Snapshots windowed bolt tasks sent this batch (stored with the sinks' offsets)."""
    state: dict[str, bytes] = {}
    for dest in [d for d in by_dest if d.startswith(STATE_PREFIX)]:
        rows = by_dest.pop(dest)
        component = dest[len(STATE_PREFIX):]
        for task, blob in zip(rows.column("__task").to_pylist(),
                              rows.column("__vals").to_pylist(), strict=True):
            state[state_key(component, task)] = blob
    return state
