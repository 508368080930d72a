"""The streaming source behind :class:`kstorm.testing.ListSpout`: one list batch per micro-batch."""

from __future__ import annotations

import base64
import pickle
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

from kstorm._kafka.clocks import CLOCKS_KEY, clock_of, stream_clocks
from kstorm._runtime.envelope import CLOCK_COLUMN, MSGID_COLUMN

NAME = "kstorm_list"


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        spec = pickle.loads(base64.b64decode(options["spec"]))
        self.batches: list[list[list[Any]]] = spec["batches"]
        self.schema: pa.Schema = spec["schema"]
        self.partitions_per_batch: int = spec["partitions"]
        self.pmax_file: str | None = spec.get("pmax_file")
        self.target: int | None = None

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(1)  # one list batch per micro-batch

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = len(self.batches)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self.target if self.target is not None else len(self.batches)
        if not isinstance(limit, ReadAllAvailable):
            end = min(int(start["batch"]) + 1, end)
        if end == int(start["batch"]):
            return start
        return {"batch": end, **stream_clocks(self.pmax_file)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        pmax = clock_of(end.get(CLOCKS_KEY, {}), "0")
        parts = []
        for b in range(int(start["batch"]), int(end["batch"])):
            rows = len(self.batches[b])
            n = max(1, min(self.partitions_per_batch, rows))
            step = -(-rows // n) if rows else 0
            parts += [InputPartition((b, i * step, min(rows, (i + 1) * step), pmax))
                      for i in range(n)]
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        b, lo, hi, pmax = partition.value
        rows = self.batches[b][lo:hi]
        names = [f.name for f in self.schema if not f.name.startswith("__")]
        columns = [pa.array([r[i] for r in rows], type=self.schema.field(n).type)
                   for i, n in enumerate(names)]
        ids = pa.array([f"{b}:{i}" for i in range(lo, hi)], pa.string())
        extra = [pa.array([pmax] * len(rows), pa.int64())] if self.pmax_file else []
        yield pa.RecordBatch.from_arrays([*columns, ids, *extra], schema=self.schema)

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
                    partitions: int, pmax_file: str | None = None) -> DataFrame:
    """A streaming DataFrame over ``batches`` (rows typed by ``schema`` + ``__msgid``)."""
    spark.dataSource.register(ListSource)
    full = schema.append(pa.field(MSGID_COLUMN, pa.string()))
    if pmax_file:
        full = full.append(pa.field(CLOCK_COLUMN, pa.int64()))
    spec = base64.b64encode(pickle.dumps(
        {"batches": batches, "schema": full, "partitions": partitions,
         "pmax_file": pmax_file})).decode()
    return (spark.readStream.format(NAME).schema(from_arrow_schema(full))
            .option("spec", spec).load())
