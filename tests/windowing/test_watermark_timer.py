"""``with_watermark_interval`` is a timer: Storm's *Windowing* guide -- "Watermark events
are periodically (default every sec) emitted" -- so after the last tuples, the windows that
are due fire within one interval of batch time, without waiting for another tuple."""

from __future__ import annotations

from typing import Any

from kstorm import BaseWindowedBolt, Fields, TopologyBuilder
from kstorm.testing import ListSpout, TopologyTestDriver
from kstorm.windowing import Duration


class Sums(BaseWindowedBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("end", "n"))

    def execute(self, window: Any) -> None:
        self.collector.emit([window.get_end_timestamp(), len(window.get())])


def test_due_windows_fire_within_one_interval_after_the_last_tuple() -> None:
    b = TopologyBuilder()
    b.set_spout("events", ListSpout([], Fields("ts")))
    b.set_bolt("sums", Sums().with_tumbling_window(Duration.seconds(10))
               .with_timestamp_field("ts").with_watermark_interval(Duration.seconds(1))
               ).global_grouping("events")
    with TopologyTestDriver(b.create_topology(), start_time_ms=0) as driver:
        driver.pipe("events", [[t] for t in range(0, 25_000, 1_000)])
        assert driver.output("sums") == []  # the interval has not passed yet
        driver.advance_time(1_000)  # no new tuple: the watermark timer fires
        assert [end for end, _ in driver.output("sums")][-1] == 20_000
