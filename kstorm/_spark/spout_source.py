"""A free-form spout (``BaseRichSpout.next_tuple``) as a PySpark streaming data source.

Spark keeps one Python process per streaming source for the query's life (the streaming
source runner) and calls the reader's driver methods there. The reader holds the spout
instance in that process, through a :class:`kstorm._runtime.spout_executor.SpoutExecutor`:

- ``latestOffset(start, limit)``: the executor acks what committed, then fills and logs
  batch ``start["seq"]`` (``<checkpoint>/kstorm/spouts/<spout id>/<seq>``, see
  ``kstorm/_runtime/checkpoint.py``) and returns ``{"seq": seq + 1}``, or ``start`` when
  the spout had nothing. Spark writes that end to its offset log only after the batch is
  logged, so any batch Spark (re)runs is in the log.
- ``partitions(start, end)``: the logged batches, split into ``parallelism`` slices carried
  inside the input partitions as Arrow IPC bytes (executors need no access to the log).
  Tracked (at least once, with ackers): each tuple with a message id also carries it, its
  owner, its tree's root id (:func:`kstorm.acking.ids.emit_root_id` of its place in the
  log, the same on a replay) and the batch's planned time, which ``latestOffset`` recorded
  in the end offset (``@acking``) for the commit phase to time trees out with.
- ``read(partition)``: the slice's rows (``__stream``, pickled ``__vals``), turned into
  envelope rows by the spout's source stage right there (``fused``), as Kafka's windowed
  partials are.
- ``commit(end)``: acks through ``end`` (``latestOffset`` already did for every batch but
  the last of an available-now run, after which Spark calls no ``commit``).

The reader is also created (then pickled to executors) by Spark's read planner: it opens
nothing until a driver method runs.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kstorm._runtime.envelope import PLANNED_COLUMN, ROOT_COLUMN
from kstorm._runtime.spout_executor import BatchBounds, SpoutExecutor
from kstorm._runtime.spout_log import SpoutLog
from kstorm._runtime.spout_notices import NoticeBook
from kstorm.acking.ids import emit_root_id
from kstorm.acking.replay import MAX_IDLE_WAIT_S, marks, read_marks
from kstorm.component import TopologyContext
from kstorm.spout import BaseRichSpout
from kstorm.tuple import Fields

FORMAT = "kstorm_spout"
SPEC_OPTION = "kstorm.spout"
ROW_DDL = "__stream string, __vals binary"
log = logging.getLogger("kstorm.spout")


@dataclass(frozen=True)
class SpoutSourceSpec:
    """Everything the source needs, cloudpickled into one option."""

    spout: BaseRichSpout
    spout_id: str
    topology_name: str
    conf: dict[str, Any]
    streams: dict[str, Fields]
    log_dir: str
    bounds: BatchBounds
    ack_on_emit: bool
    parallelism: int = 1
    fused: Any = None  # the spout's source stage (StageRunner), run inside read()
    spout_task: int | None = None  # tracked (at least once): its spout task for the ackers
    notices_dir: str | None = None  # ... and where the commit phase leaves its notices
    max_pending: int | None = None  # ... and topology.max.spout.pending


class SpoutDataSource(DataSource):
    """``spark.readStream.format("kstorm_spout")``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def schema(self) -> str:
        """The rows ``read`` yields (envelope rows when a stage is fused)."""
        return ROW_DDL

    def streamReader(self, schema: StructType) -> SpoutStreamReader:
        """A reader for the spout in the options."""
        return SpoutStreamReader(self.options[SPEC_OPTION])


class SpoutStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans logged batches of a spout's emits (see the module docstring)."""

    def __init__(self, spec: str) -> None:
        self.spec: SpoutSourceSpec = cloudpickle.loads(base64.b64decode(spec))
        self._executor: SpoutExecutor | None = None
        self._available_now = False

    def __getstate__(self) -> dict[str, Any]:  # executors get the spec, never the instance
        return {"spec": self.spec, "_executor": None, "_available_now": False}

    # -- driver (the streaming source runner process) --------------------------------------

    def _spout(self) -> SpoutExecutor:
        if self._executor is None:
            spec = self.spec
            context = TopologyContext(spec.topology_name, spec.spout_id, 0, 1, -1,
                                      dict(spec.streams))
            notices = NoticeBook(spec.notices_dir) if spec.notices_dir is not None else None
            self._executor = SpoutExecutor(spec.spout, spec.spout_id, dict(spec.conf), context,
                                           SpoutLog(spec.log_dir, spec.spout_id), spec.bounds,
                                           ack_on_emit=spec.ack_on_emit, notices=notices,
                                           max_pending=spec.max_pending)
        return self._executor

    def initialOffset(self) -> dict:
        """A new checkpoint starts at batch 0."""
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        """Informational: the batch bounds are the spout's own (``kstorm.spout.*``)."""
        return ReadMaxRows(self.spec.bounds.max_tuples)

    def prepareForTriggerAvailableNow(self) -> None:
        """Available-now: the run ends at the first batch the idle spout leaves empty.

        At least once, also only once no tree is pending (``latestOffset`` waits for their
        time-outs).
        """
        self._available_now = True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Ack what committed, then log the next batch (see the module docstring)."""
        seq = int(start["seq"])
        executor = self._spout()
        while True:
            end = executor.next_batch(seq)
            if end != seq:
                break
            # tracked, available-now: nothing may be left pending when the run ends, so wait
            # for the oldest pending tree's time-out (next_batch then ticks)
            wait = executor.wait_ms()
            if not self._available_now or wait is None:
                return start
            time.sleep(min(wait / 1000, MAX_IDLE_WAIT_S) + 0.001)
        if self.spec.spout_task is None or executor.planned_ms is None:
            return {"seq": end}
        return {"seq": end, **marks(executor.planned_ms, [])}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The logged batches in ``[start, end)``, each split into ``parallelism`` slices."""
        spout_log = SpoutLog(self.spec.log_dir, self.spec.spout_id)
        parts: list[InputPartition] = []
        planned = read_marks(end)[0]
        for seq in range(int(start["seq"]), int(end["seq"])):
            table = _rows(spout_log.table(seq), seq, self.spec.spout_task, planned)
            n = max(1, min(self.spec.parallelism, table.num_rows))
            step = -(-table.num_rows // n)
            for i in range(n):
                parts.append(InputPartition((seq, i, _ipc(table.slice(i * step, step)))))
        return parts

    def commit(self, end: dict) -> None:
        """Spark committed through ``end``: ack its tuples."""
        self._spout().ack_through(int(end["seq"]))

    def stop(self) -> None:
        """The query stopped: close the spout."""
        if self._executor is not None:
            try:
                self._executor.close()
            except Exception:
                log.exception("spout %r: close() raised", self.spec.spout_id)

    # -- executors -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """One slice of a logged batch, through the fused source stage when there is one."""
        _seq, _index, payload = partition.value
        batches = pa.ipc.open_stream(payload).read_all().to_batches()
        if self.spec.fused is not None:
            yield from self.spec.fused(iter(batches))
            return
        yield from batches


def _rows(table: pa.Table, seq: int, spout_task: int | None, planned: int | None
          ) -> pa.Table:
    """A logged batch as the source stage reads it (tracking columns when tracked)."""
    extra = [c for c in ("__msgid", "__owner") if c in table.schema.names]
    if spout_task is None:
        return table.drop_columns(extra)
    if "__owner" not in table.schema.names:  # logged before owners were kept
        table = table.append_column("__owner", pa.array([""] * table.num_rows, pa.string()))
    tracked = pc.is_valid(table.column("__msgid")).to_pylist()
    roots = [emit_root_id(spout_task, seq, i) if t else None for i, t in enumerate(tracked)]
    table = table.append_column(ROOT_COLUMN, pa.array(roots, pa.int64()))
    return table.append_column(PLANNED_COLUMN, pa.array([planned] * table.num_rows,
                                                        pa.int64()))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def read_spout_stream(spark: SparkSession, spec: SpoutSourceSpec, schema: str) -> DataFrame:
    """A streaming DataFrame of ``spec``'s spout; ``schema`` is the fused stage's output."""
    spark.dataSource.register(SpoutDataSource)
    option = base64.b64encode(cloudpickle.dumps(spec)).decode()
    return spark.readStream.format(FORMAT).schema(schema).option(SPEC_OPTION, option).load()
