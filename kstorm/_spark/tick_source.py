"""Tick tuples as a PySpark streaming data source (``kstorm/_runtime/ticks.py``).

Its offset is each ticking bolt's tick number (whole periods since the epoch, by the
clock when Spark plans the batch). When one moves on, Spark runs a batch, with or without
other input, and the batch reads one envelope row per task of each bolt whose number
moved: its tick tuple, addressed to the task, so the bolt's stage exchanges it to the
partition that task's tuples go to. Spark writes the offsets to its offset log before the
batch runs, so a replay carries the same ticks. An available-now run ticks for what was
due when it started.
"""

from __future__ import annotations

import base64
import pickle
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kstorm._runtime.envelope import ENVELOPE_DDL, to_arrow
from kstorm._runtime.ticks import counts, due, tick_rows
from kstorm.topology import StormTopology

NAME = "kstorm_ticks"


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        spec = pickle.loads(base64.b64decode(options["spec"]))
        self.tasks: dict[str, int] = spec["tasks"]
        self.periods: dict[str, float] = spec["periods"]
        self.target: dict[str, int] | None = None

    def _now(self) -> dict[str, int]:
        return counts(self.periods, int(time.time() * 1000))

    def initialOffset(self) -> dict:
        return self._now()  # the first tick one period on

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(1)  # informational: ticks are due or not

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._now()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        now = self.target if self.target is not None else self._now()
        # a bolt that started ticking after the checkpoint did: from now on
        end = {c: max(int(start.get(c, n)), n) for c, n in now.items()}
        return end if due(start, end) or set(end) != set(start) else start

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ticking = due({c: int(n) for c, n in start.items()}, {c: int(n) for c, n in end.items()})
        return [InputPartition(ticking)] if ticking else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ticking = [c for c in partition.value if c in self.periods]
        yield to_arrow(tick_rows(self.tasks, self.periods, ticking))

    def commit(self, end: dict) -> None:
        pass


class TickSource(DataSource):
    """``spark.readStream.format("kstorm_ticks")``: the topology's tick tuples."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return ENVELOPE_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _Reader(dict(self.options))


def read_ticks(spark: SparkSession, topology: StormTopology,
               periods: dict[str, float]) -> DataFrame:
    """Envelope rows: the tick tuples of the bolts in ``periods`` (bolt -> seconds)."""
    spark.dataSource.register(TickSource)
    tasks = {c: topology.components[c].parallelism for c in periods}
    spec = base64.b64encode(pickle.dumps({"tasks": tasks, "periods": dict(periods)},
                                         protocol=5)).decode()
    return spark.readStream.format(NAME).schema(ENVELOPE_DDL).option("spec", spec).load()
