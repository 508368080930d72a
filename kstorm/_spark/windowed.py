"""Built-in windowed aggregations on Spark (see ``kstorm/windowing/aggregate.py``).

Executors (``mapInArrow`` over the spout's raw rows): flag late rows per input stream, reduce
on-time rows to partials per (key, window end), and send the driver one envelope row per
task holding the partials, the streams' latest timestamps and the late count. Late rows go
to the late-tuple stream's consumers, or are counted.

Driver (commit phase): :class:`WindowCommit` merges the partials into the open windows,
emits the windows the watermark passed to the bolt's consumers (sinks), and persists the
open windows and stream clocks per batch id, so a replayed batch starts from the same state
and closes the same windows.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstorm._runtime.executor import Outgoing, Packed, dumps, pack
from kstorm._ids import DEAD_LETTER_STREAM
from kstorm._runtime.envelope import bad_input
from kstorm._spark.stage import METRICS_DEST, StageContext
from kstorm.windowing.aggregate import (
    AggregateSpec,
    AggregateWindows,
    empty_partials,
    late_mask,
    merge,
    partials,
)

PMAX_COLUMN = "__pmax0"  # latest timestamp of the row's stream before this batch (null: none)
KAFKA_STREAM = ("topic", "partition")


def window_dest(component: str) -> str:
    """Envelope destination of a windowed aggregate's partials (the driver)."""
    return f"__window:{component}"


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
        from kstorm._runtime.envelope import to_arrow
        from kstorm._spark.gc_control import freeze_imports

        freeze_imports()
        stage = self.ctx.plan.stages[self.ctx.stage_index]
        component = stage.head
        spout = stage.raw_spout
        topology = self.ctx.topology
        latest: dict[Any, int] = {}
        pieces: list[pa.Table] = []
        late_rows: list[Packed] = []
        dead: list[Outgoing] = []
        n_skipped = 0
        n_late = n_in = 0
        schema: pa.Schema | None = None
        late_consumers = (topology.consumers(component, self.spec.late_stream)
                          if self.spec.late_stream else [])
        fields = topology.components[spout].streams["default"] if spout else None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            schema = batch.schema
            if "__error" in batch.schema.names:
                if self.ctx.carrier and spout is not None:
                    policy = str(self.ctx.conf.get("kstorm.bad.input.policy", "dead-letter"))
                    records, skipped = bad_input(batch, spout, policy)
                    n_skipped += skipped
                    dead.extend(Outgoing(DEAD_LETTER_STREAM, 0, spout, "default", dumps(v), None)
                                for v in records)
                batch = batch.filter(pc.is_null(batch.column("__error")))
            n_in += batch.num_rows
            streams = stream_ids(batch)
            if PMAX_COLUMN in batch.schema.names:
                for s, p0 in zip(streams, batch.column(PMAX_COLUMN).to_pylist(), strict=True):
                    if p0 is not None and s not in latest:
                        latest[s] = p0
            ts = batch.column(self.spec.ts_field).cast(pa.int64()).to_numpy(
                zero_copy_only=False)
            late = late_mask(ts, streams, latest, self.spec.lag_ms)
            if late.any():
                n_late += int(late.sum())
                late_batch = batch.filter(pa.array(late))
                for values in _late_values(late_batch, fields):
                    late_rows.extend(Packed(c, 0, component, self.spec.late_stream or "",
                                            pack([[values]]), None)
                                     for c, _ in late_consumers)
                batch = batch.filter(pa.array(~late))
            if batch.num_rows:
                pieces.append(partials(pa.Table.from_batches([batch]), self.spec))
        if schema is None:
            return
        if dead or n_skipped:
            counters_dead = {f"{spout}.dead_lettered": len(dead), f"{spout}.skipped": n_skipped}
            dead.append(Outgoing(METRICS_DEST, 0, spout or "", "", pickle.dumps(counters_dead),
                                 None))
        merged = merge(pieces, self.spec) if pieces else empty_partials(self.spec, schema)
        payload = {"partials": merged, "latest": latest, "late": n_late}
        out = [Outgoing(window_dest(component), 0, component, "", pickle.dumps(payload), None)]
        counters = {f"{component}.executed": n_in, f"{component}.late": n_late}
        out.append(Outgoing(METRICS_DEST, 0, component, "", pickle.dumps(counters), None))
        yield to_arrow(out + late_rows + dead)


def _late_values(batch: pa.RecordBatch, fields: Any) -> Iterator[dict[str, Any]]:
    names = [f for f in (fields or batch.schema.names) if not f.startswith("__")]
    columns = {n: batch.column(n).to_pylist() for n in names if n in batch.schema.names}
    for i in range(batch.num_rows):
        yield {n: col[i] for n, col in columns.items()}


class WindowCommit:
    """Driver half of one windowed aggregate: state per batch id under ``state_dir``."""

    def __init__(self, component: str, spec: AggregateSpec, state_dir: Path) -> None:
        self.component = component
        self.spec = spec
        self.dir = state_dir / "windows" / component
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pmax_file = state_dir / "pmax" / f"{component}.json"
        self.pmax_file.parent.mkdir(parents=True, exist_ok=True)

    def _load(self, batch_id: int) -> AggregateWindows:
        windows = AggregateWindows(self.spec)
        previous = [int(p.stem) for p in self.dir.glob("*.pkl") if int(p.stem) < batch_id]
        # (a replayed batch reloads the state of the batch before it, never its own)
        if previous:
            windows.restore((self.dir / f"{max(previous)}.pkl").read_bytes())
        return windows

    def commit(self, batch_id: int, payloads: list[bytes]) -> tuple[list[list[Any]], Any]:
        """Fold batch ``batch_id`` in; returns (closed window tuples, state to persist)."""
        windows = self._load(batch_id)
        parts, late = [], 0
        latest: dict[Any, int] = {}
        for raw in payloads:
            payload = pickle.loads(raw)
            parts.append(payload["partials"])
            late += payload["late"]
            for stream, ts in payload["latest"].items():
                latest[stream] = max(ts, latest.get(stream, ts))
        closed = windows.advance(parts, latest, late)
        return windows.results(closed), windows

    def seed(self, snapshot: bytes) -> None:
        """Start from a state stored by a sink (the checkpoint was lost): as batch -1."""
        windows = AggregateWindows(self.spec)
        windows.restore(snapshot)
        self.persist(-1, windows)

    def persist(self, batch_id: int, windows: AggregateWindows) -> None:
        """Save the state after ``batch_id`` (atomically) and drop states older than 10 batches."""
        _atomic_write(self.dir / f"{batch_id}.pkl", windows.snapshot())
        _atomic_write(self.pmax_file, json.dumps(
            {"batch_id": batch_id, "latest": windows.latest}).encode())
        for p in self.dir.glob("*.pkl"):
            if int(p.stem) < batch_id - 10:
                p.unlink(missing_ok=True)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)

