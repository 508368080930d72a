"""Built-in windowed aggregations on Spark (see ``kstorm/windowing/aggregate.py``).

Executors (``mapInArrow`` over the spout's raw rows): flag late rows per input stream, reduce
on-time rows to partials per (key, window end), and send the driver one envelope row per
task holding the partials, the streams' latest timestamps and the late count. Late rows go
to the late-tuple stream's consumers, or are counted.

Driver (commit phase): :class:`WindowCommit` merges the partials into the open windows,
emits the windows the watermark passed to the bolt's consumers (sinks), and persists the
open windows and stream clocks per batch id, so a replayed batch starts from the same state
and closes the same windows. Processing-time sessions take the batch's time from Spark's
offset log (``batchTimestampMs``, the same on a replay); when one of their open sessions is
due to close, the clocks file says when, and the spout's source plans a batch without
input then (``kstorm/_kafka/clocks.py``, ``due_mark``).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstorm._kafka.clocks import NEW_STREAM
from kstorm._runtime.aggregate_task import read_rows
from kstorm._runtime.batch_loop import fold_partials
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.envelope import (
    CLOCK_COLUMN,
    DEAD_LETTER,
    METRICS,
    Outgoing,
    Packed,
    dumps,
    to_arrow,
    window_dest,
)
from kstorm._spark.speedups.gc_control import freeze_imports
from kstorm._spark.stage import StageContext, arrivals
from kstorm.windowing.aggregate import (
    AggregateSpec,
    AggregateWindows,
    empty_partials,
    merge,
)

KAFKA_STREAM = ("topic", "partition")


def stream_ids(batch: pa.RecordBatch) -> np.ndarray:
    """The input stream of each row: ``topic/partition`` for Kafka, one stream otherwise."""
    names = batch.schema.names
    if all(c in names for c in KAFKA_STREAM):
        topic, part = batch.column("topic"), batch.column("partition")
        if batch.num_rows and len(pc.unique(topic)) == 1 and len(pc.unique(part)) == 1:
            # one read task reads one partition: skip building a string per row
            return np.full(batch.num_rows, f"{topic[0].as_py()}/{part[0].as_py()}", dtype=object)
        topics = batch.column("topic").to_pylist()
        parts = batch.column("partition").to_pylist()
        return np.array([f"{t}/{p}" for t, p in zip(topics, parts, strict=True)], dtype=object)
    return np.full(batch.num_rows, "0", dtype=object)


class WindowStageRunner:
    """``mapInArrow`` function of a windowed-aggregate stage."""

    def __init__(self, ctx: StageContext, spec: AggregateSpec) -> None:
        self.ctx = ctx
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        ctx = self.ctx
        component = ctx.stage.head
        spout = ctx.stage.raw_spout
        topology = ctx.topology
        latest: dict[Any, int] = {}
        pieces: list[pa.Table] = []
        late_rows: list[Packed] = []
        dead: list[Outgoing] = []
        skipped: dict[str, int] = {}
        n_late = n_in = 0
        schema: pa.Schema | None = None
        late_consumers = ([c for c, _ in topology.consumers(component, self.spec.late_stream)]
                          if self.spec.late_stream else [])
        fields = topology.components[spout].streams["default"] if spout else None

        def dead_letter(source: str, values: list[Any]) -> None:
            dead.append(Outgoing(DEAD_LETTER, 0, source, "default", dumps(values), None))

        def skip(source: str, n: int) -> None:
            skipped[source] = skipped.get(source, 0) + n

        for batch, _ in arrivals(ctx, batches, dead_letter, skip):
            schema = batch.schema
            if batch.num_rows == 0:
                continue
            n_in += batch.num_rows
            streams = stream_ids(batch)
            if CLOCK_COLUMN in batch.schema.names:
                for s, p0 in zip(streams, batch.column(CLOCK_COLUMN).to_pylist(), strict=True):
                    if p0 is not None and s not in latest:
                        latest[s] = p0
            late, rows, part = read_rows(batch, streams, latest, self.spec, component,
                                         late_consumers, fields)
            n_late += len(late)
            late_rows += rows
            if part is not None:
                pieces.append(part)
        if schema is None:
            return
        if dead or skipped:
            counters_dead = {f"{spout}.dead_lettered": len(dead),
                             **{f"{s}.skipped": n for s, n in skipped.items()}}
            dead.append(Outgoing(METRICS, 0, spout or "", "", pickle.dumps(counters_dead),
                                 None))
        merged = merge(pieces, self.spec) if pieces else empty_partials(self.spec, schema)
        payload = {"partials": merged, "latest": latest, "late": n_late}
        out = [Outgoing(window_dest(component), 0, component, "", pickle.dumps(payload), None)]
        counters = {f"{component}.executed": n_in, f"{component}.late": n_late}
        out.append(Outgoing(METRICS, 0, component, "", pickle.dumps(counters), None))
        yield to_arrow(out + late_rows + dead)


class WindowCommit:
    """Driver half of one windowed aggregate: its state per batch id in the checkpoint."""

    SUFFIX = ".pkl"

    def __init__(self, component: str, spec: AggregateSpec, layout: CheckpointLayout) -> None:
        self.component = component
        self.spec = spec
        self.layout = layout
        self.dir = layout.window_dir(component)

    def _load(self, batch_id: int) -> AggregateWindows:
        windows = AggregateWindows(self.spec)
        # (a replayed batch reloads the state of the batch before it, never its own)
        previous = self.layout.latest_before(self.dir, self.SUFFIX, batch_id)
        if previous is not None:
            windows.restore(previous.read_bytes())
        return windows

    def commit(self, batch_id: int, payloads: list[bytes], now: int | None = None
               ) -> tuple[list[list[Any]], Any]:
        """Fold batch ``batch_id`` in; returns (closed window tuples, state to persist).

        ``now``: the batch's timestamp in Spark's offset log (processing-time sessions).
        """
        closed, windows = self.commit_closed(batch_id, payloads, now)
        return windows.results(closed), windows

    def commit_closed(self, batch_id: int, payloads: list[bytes], now: int | None = None
                      ) -> tuple[pa.Table, AggregateWindows]:
        """As :meth:`commit`, the closed windows as Arrow (``windows.results(closed)``)."""
        windows = self._load(batch_id)
        return (fold_partials(windows, (pickle.loads(raw) for raw in payloads), now),
                windows)

    def seed(self, snapshot: bytes) -> None:
        """Start from a state stored by a sink (the checkpoint was lost): as batch -1."""
        windows = AggregateWindows(self.spec)
        windows.restore(snapshot)
        self.persist(-1, windows)

    def persist(self, batch_id: int, windows: AggregateWindows) -> None:
        """Save the state after ``batch_id`` and the clocks the next batch's plan records."""
        self.layout.write(self.dir / f"{batch_id}{self.SUFFIX}", windows.snapshot())
        clocks = dict(windows.latest)
        if windows.new_stream_clock() is not None:
            clocks[NEW_STREAM] = windows.new_stream_clock()
        due = windows.next_close()  # processing time: when a batch must close a session
        self.layout.write(self.layout.clocks_path(self.component), json.dumps(
            {"batch_id": batch_id, "latest": clocks,
             **({} if due is None else {"due": due})}).encode())
        self.layout.retain(self.dir, self.SUFFIX, batch_id)
