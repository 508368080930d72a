"""The small topology ``kstorm warm-up`` runs: through the runtime's common paths."""

from __future__ import annotations

from typing import Any

from kstorm.bolt import BaseBasicBolt, BaseStatefulBolt, BasicOutputCollector, OutputCollector
from kstorm.component import OutputFieldsDeclarer
from kstorm.testing import CaptureSink, ListSpout
from kstorm.topology import StormTopology, TopologyBuilder
from kstorm.tuple import Fields, Tuple


class Echo(BaseBasicBolt):
    """Emits each tuple's values again."""

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit(tuple_.values)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("n"))


class Count(BaseStatefulBolt):
    """Counts each value in its state and emits the new count."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def prepare(self, conf: dict[str, Any], context: Any, collector: OutputCollector) -> None:
        self.collector = collector

    def execute(self, tuple_: Tuple) -> None:
        n = tuple_.get_value_by_field("n")
        count = self.state.get(n, 0) + 1
        self.state.put(n, count)
        self.collector.emit([n, count], anchors=tuple_)
        self.collector.ack(tuple_)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("n", "count"))


def warm_up_topology() -> StormTopology:
    """A small topology through the runtime's common paths (``kstorm warm-up``).

    Its stateful bolt runs Spark's transformWithState and state store, so their JVM classes
    (~650: the state store, RocksDB, Avro, protobuf) are in the class cache too.
    """
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout([[(i,) for i in range(100)]] * 2, Fields("n")))
    builder.set_bolt("echo", Echo()).shuffle_grouping("numbers")
    builder.set_bolt("sink", CaptureSink()).shuffle_grouping("echo")
    builder.set_bolt("count", Count()).fields_grouping("echo", Fields("n"))
    builder.set_bolt("counts", CaptureSink()).shuffle_grouping("count")
    return builder.create_topology()
