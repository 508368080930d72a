"""A Kafka partition that delivers its first tuples after windows fired: those tuples are
late (the window fired once), and that is a WARNING naming the bolt and the partition, not
only a count. Before it delivers, it does not hold the watermark back (as Storm, whose
watermark tracks each input stream, not each partition)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kstorm import BaseWindowedBolt, Fields, KafkaSpout, TopologyBuilder
from kstorm.testing import TopologyTestDriver
from kstorm.windowing import Duration
from serdes import JsonSerde


class Counts(BaseWindowedBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("start", "n"))

    def execute(self, window: Any) -> None:
        self.collector.emit([window.get_start_timestamp(), len(window.get())])


def test_a_partition_joining_after_windows_fired_is_a_warning_and_its_tuples_late(
        caplog: pytest.LogCaptureFixture) -> None:
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout("events", value_serde=JsonSerde({"ts": "long"})))
    builder.set_bolt("counts", Counts().with_tumbling_window(Duration.seconds(10))
                     .with_timestamp_field("ts").with_lag(Duration.seconds(1))
                     .with_late_tuple_stream("late")).global_grouping("events")
    with TopologyTestDriver(builder.create_topology()) as driver, \
            caplog.at_level(logging.WARNING, "kstorm"):
        driver.pipe("events", [{"ts": t, "partition": 0} for t in range(0, 40_000, 1_000)])
        assert [row[0] for row in driver.output("counts")][-1] == 20_000  # fired up to 30 s
        driver.pipe("events", [{"ts": t, "partition": 1} for t in (5_000, 15_000, 35_000)])
        assert len(driver.output("counts", stream="late")) == 3  # all below the watermark, 38 s
    warned = [r.getMessage() for r in caplog.records if "first tuples" in r.getMessage()]
    assert len(warned) == 1 and "'counts'" in warned[0] and "events/1" in warned[0]
    assert "3 of them" in warned[0]
