"""The small topology ``kstorm warm-up`` runs: through the runtime's common paths."""

from __future__ import annotations

from kstorm.bolt import BaseBasicBolt, BasicOutputCollector
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


def warm_up_topology() -> StormTopology:
    """A small topology through the runtime's common paths (``kstorm warm-up``)."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout([[(i,) for i in range(100)]] * 2, Fields("n")))
    builder.set_bolt("echo", Echo()).shuffle_grouping("numbers")
    builder.set_bolt("sink", CaptureSink()).shuffle_grouping("echo")
    return builder.create_topology()
