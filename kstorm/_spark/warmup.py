"""Start Spark's Python processes while the JVM is still planning the topology's query.

A Python data source costs, on the way to the first batch, a planner process to create the
data source, another to plan its read, and the worker daemon that runs the reads and the
stages: each is a new Python process importing pyspark, pyarrow and kstorm. Spark keeps
those processes (one daemon per kind, forking a child per call), so running one tiny batch
read of :class:`WarmUpSource` right after the session starts (in a background thread,
while the topology is compiled and the query starts) leaves them ready for the real query.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kstorm.bolt import BaseBasicBolt, BasicOutputCollector
from kstorm.component import OutputFieldsDeclarer
from kstorm.topology import StormTopology, TopologyBuilder
from kstorm.tuple import Fields, Tuple

NAME = "kstorm-warm-up"


class WarmUpSource(DataSource):
    """A batch source of one row per partition, whose reader imports what stages use."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "id int"

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(int(self.options.get("partitions", "1")))


class _Reader(DataSourceReader):
    def __init__(self, partitions: int) -> None:
        self.n = partitions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.n)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        # What the first batch's tasks import; workers are reused, so this is paid once.
        import kstorm._kafka_fetch  # noqa: F401
        import kstorm._spark.stage  # noqa: F401
        import kstorm._spark.windowed  # noqa: F401

        yield (int(partition.value),)


def warm_up(spark: Any) -> None:
    """Run the warm-up read (blocking; call it from a background thread)."""
    spark.dataSource.register(WarmUpSource)
    n = spark.sparkContext.defaultParallelism
    spark.read.format(NAME).option("partitions", str(n)).load().collect()


class Echo(BaseBasicBolt):
    """Emits each tuple's values again."""

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit(tuple_.values)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("n"))


def warm_up_topology() -> StormTopology:
    """A small topology through the runtime's common paths (``kstorm warm-up``)."""
    from kstorm.testing import CaptureSink, ListSpout

    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout([[(i,) for i in range(100)]] * 2, Fields("n")))
    builder.set_bolt("echo", Echo()).shuffle_grouping("numbers")
    builder.set_bolt("sink", CaptureSink()).shuffle_grouping("echo")
    return builder.create_topology()
