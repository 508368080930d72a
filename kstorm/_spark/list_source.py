"""The streaming source behind :class:`kstorm.testing.ListSpout`: one list batch per micro-batch.

At least once (a tracked spout) it plans as the Kafka source does (``kafka_source.py``), its
rows in the Kafka id space (row ``i`` of batch ``b`` is offset ``i`` of partition ``b``): the
commit phase's book gives the due retries, recorded in the end offset (``@acking``) and read
back as one task per retried batch, and an available-now run waits while rows are un-acked.
"""

from __future__ import annotations

import base64
import pickle
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kstorm._kafka.clocks import CLOCKS_KEY, clock_of, due_mark, stream_clocks
from kstorm._runtime.envelope import ATTEMPT_COLUMN, CLOCK_COLUMN, MSGID_COLUMN, PLANNED_COLUMN
from kstorm.acking.offsets import list_message_id
from kstorm.acking.replay import SpoutBook, next_batch, read_marks
from kstorm.acking.replay import marks as acking_marks

NAME = "kstorm_list"


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        spec = pickle.loads(base64.b64decode(options["spec"]))
        self.batches: list[list[list[Any]]] = spec["batches"]
        self.schema: pa.Schema = spec["schema"]
        self.partitions_per_batch: int = spec["partitions"]
        self.pmax_file: str | None = spec.get("pmax_file")
        # At least once: the commit phase's book path and topology.max.spout.pending.
        self.acking: dict[str, Any] | None = spec.get("acking")
        # At most once: the spout whose ack(msg_id) runs as each row is emitted (seed 003).
        self.acked_on_emit: Any = spec.get("acked_on_emit")
        self.target: int | None = None

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(1)  # one list batch per micro-batch

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = len(self.batches)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["batch"])
        last = self.target if self.target is not None else len(self.batches)

        def new_end(new_cap: int | None) -> tuple[int, bool]:
            # (max.spout.pending: a whole list batch joins while fewer tuples are un-acked)
            end = last if isinstance(limit, ReadAllAvailable) else min(begin + 1, last)
            end = begin if new_cap is not None and new_cap <= 0 else max(begin, end)
            return end, end != begin

        if self.acking is None:
            end, moved = new_end(None)
            if not moved:
                return self._due(start, begin)
            return {"batch": end, **stream_clocks(self.pmax_file)}
        # tracked (at least once), as a Kafka spout: due retries and time-outs make a batch,
        # and an available-now run waits for them (kstorm/acking/replay.py)
        found = next_batch(SpoutBook.load(self.acking["book"]), self.acking.get("max_pending"),
                           new_end, waits=self.target is not None,
                           clock_ms=lambda: int(time.time() * 1000), sleep=time.sleep)
        if found is None:
            return self._due(start, begin)
        now, plan, end = found
        return {"batch": end, **stream_clocks(self.pmax_file), **acking_marks(now, plan.retries)}

    def _due(self, start: dict, begin: int) -> dict:
        """A batch without input if a processing-time session is due (as a Kafka spout's)."""
        due = (due_mark(self.pmax_file, int(time.time() * 1000)) if self.target is None
               else {})
        return {"batch": begin, **stream_clocks(self.pmax_file), **due} if due else start

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Each new batch split in ``partitions`` row ranges, then one task per batch retried.

        A partition is ``(batch, rows, attempts, clock, planned)``: ``attempts`` None for
        first emits, else each row's (the retries recorded in ``end``).
        """
        pmax = clock_of(end.get(CLOCKS_KEY, {}), "0")
        now, retries = read_marks(end)
        parts = []
        for b in range(int(start["batch"]), int(end["batch"])):
            rows = len(self.batches[b])
            n = max(1, min(self.partitions_per_batch, rows))
            step = -(-rows // n) if rows else 0
            parts += [InputPartition((b, range(i * step, min(rows, (i + 1) * step)), None,
                                      pmax, now)) for i in range(n)]
        by_batch: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for _, b, i, attempt in retries:
            by_batch[b].append((i, attempt))
        for b, found in sorted(by_batch.items()):
            found.sort()
            parts.append(InputPartition((b, [i for i, _ in found], [a for _, a in found],
                                         pmax, now)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        b, indices, attempts, pmax, now = partition.value
        rows = [self.batches[b][i] for i in indices]
        names = [f.name for f in self.schema if not f.name.startswith("__")]
        columns = [pa.array([r[i] for r in rows], type=self.schema.field(n).type)
                   for i, n in enumerate(names)]
        columns.append(pa.array([list_message_id(b, i) for i in indices], pa.string()))
        if self.pmax_file:
            columns.append(pa.array([pmax] * len(rows), pa.int64()))
        if self.acking is not None:
            columns.append(pa.array(attempts or [0] * len(rows), pa.int32()))
            columns.append(pa.array([now] * len(rows), pa.int64()))
        yield pa.RecordBatch.from_arrays(columns, schema=self.schema)
        if self.acked_on_emit is not None:  # at most once: acked right after emit
            for i in indices:
                self.acked_on_emit.ack(list_message_id(b, i))

    def commit(self, end: dict) -> None:
        pass


class ListSource(DataSource):
    """A replayable source over an in-memory list of batches (testing only)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> Any:
        spec = pickle.loads(base64.b64decode(self.options["spec"]))
        return from_arrow_schema(spec["schema"])

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _Reader(dict(self.options))


def read_list_spout(spark: SparkSession, batches: list[list[list[Any]]], schema: pa.Schema,
                    partitions: int, pmax_file: str | None = None,
                    acking: dict[str, Any] | None = None, *,
                    acked_on_emit: Any = None) -> DataFrame:
    """A streaming DataFrame over ``batches`` (rows typed by ``schema`` + ``__msgid``).

    ``acking`` (at least once, a tracked spout): its book's path and
    ``topology.max.spout.pending``; rows then also carry their attempt and planned time.
    ``acked_on_emit`` (at most once, a spout with its own ``ack``): its ``ack("b:i")`` runs
    in the read task as each row is handed on, as a ``KafkaSpout`` subclass's does.
    """
    spark.dataSource.register(ListSource)
    full = schema.append(pa.field(MSGID_COLUMN, pa.string()))
    if pmax_file:
        full = full.append(pa.field(CLOCK_COLUMN, pa.int64()))
    if acking is not None:
        full = (full.append(pa.field(ATTEMPT_COLUMN, pa.int32()))
                .append(pa.field(PLANNED_COLUMN, pa.int64())))
    spec = base64.b64encode(pickle.dumps(
        {"batches": batches, "schema": full, "partitions": partitions,
         "pmax_file": pmax_file, "acking": acking, "acked_on_emit": acked_on_emit})).decode()
    return (spark.readStream.format(NAME).schema(from_arrow_schema(full))
            .option("spec", spec).load())
