"""A windowed bolt declared as Storm's *Windowing* guide declares one, checked when built.

Storm's ``WindowedBoltExecutor`` throws ``IllegalArgumentException`` for a bolt without a
window, for a late tuple stream without a timestamp field ("It must be defined ... in
conjunction with the withTimestampField, otherwise IllegalArgumentException will be
thrown"), and for a timestamp field the tuples lack. kstorm refuses each at
``create_topology``, naming the bolt, before any tuple flows.
"""

from typing import Any

import pytest

from kstorm import BaseWindowedBolt, Fields, TopologyBuilder, Values
from kstorm.errors import ConfigError
from kstorm.testing import ListSpout, TopologyTestDriver
from kstorm.windowing import Count, Duration, TimestampExtractor


class Sizes(BaseWindowedBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, window: Any) -> None:
        self.collector.emit(Values(len(window.get())))


def topology_of(bolt: BaseWindowedBolt) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("spout", ListSpout([], Fields("id", "ts")))
    builder.set_bolt("sizes", bolt).shuffle_grouping("spout")
    return builder.create_topology()


def test_a_late_tuple_stream_without_a_timestamp_field_is_refused_at_build():
    bolt = Sizes().with_tumbling_window(Count(2)).with_late_tuple_stream("late")
    with pytest.raises(ConfigError, match="'sizes'.*late tuple stream 'late'") as err:
        topology_of(bolt)
    assert isinstance(err.value, ValueError)  # Storm's IllegalArgumentException
    assert "with_timestamp_field" in str(err.value)


def test_a_windowed_bolt_without_a_window_is_refused_at_build():
    with pytest.raises(ConfigError, match="'sizes'.*has no window"):
        topology_of(Sizes())


def test_a_watermark_interval_on_processing_time_is_refused_at_build():
    bolt = Sizes().with_tumbling_window(Count(2)).with_watermark_interval(Duration.seconds(1))
    with pytest.raises(ConfigError, match="'sizes'.*needs event time"):
        topology_of(bolt)


def test_a_timestamp_field_the_input_does_not_declare_is_refused_at_build():
    bolt = Sizes().with_tumbling_window(Duration.seconds(5)).with_timestamp_field("time")
    with pytest.raises(ConfigError) as err:
        topology_of(bolt)
    message = str(err.value)
    assert "'sizes'" in message and "'time'" in message and "spout:default" in message
    assert "['id', 'ts']" in message


def test_a_message_id_field_the_input_does_not_declare_is_refused_at_build():
    bolt = Sizes().with_tumbling_window(Count(2)).with_message_id_field("offset")
    with pytest.raises(ConfigError, match="'sizes'.*message id field 'offset'"):
        topology_of(bolt)


def test_a_well_declared_event_time_window_builds_and_runs():
    bolt = (Sizes().with_tumbling_window(Duration.seconds(5)).with_timestamp_field("ts")
            .with_late_tuple_stream("late"))
    with TopologyTestDriver(topology_of(bolt), {}, start_time_ms=0) as driver:
        driver.pipe("spout", [[1, 1_000], [2, 2_000], [3, 7_000]])
        driver.pipe("spout", [[4, 4_000]])  # behind the watermark (7 s): late
        assert driver.output("sizes") == [[2]]
        assert [t[0].values for t in driver.output("sizes", "late")] == [[4, 4_000]]



class NestedTimestamp(TimestampExtractor):
    """Storm: ``class ... implements TimestampExtractor`` (a nested field's timestamp)."""

    def extract_timestamp(self, tuple_: Any) -> int:
        return tuple_.get_value_by_field("event")["ts"]


def test_a_storm_style_timestamp_extractor_subclass_drives_event_time():
    builder = TopologyBuilder()
    builder.set_spout("spout", ListSpout([], Fields("id", "event")))
    builder.set_bolt("sizes", Sizes().with_tumbling_window(Duration.seconds(5))
                     .with_timestamp_extractor(NestedTimestamp())).shuffle_grouping("spout")
    with TopologyTestDriver(builder.create_topology(), {}, start_time_ms=0) as driver:
        driver.pipe("spout", [[1, {"ts": 1_000}], [2, {"ts": 4_000}], [3, {"ts": 6_000}]])
        assert driver.output("sizes") == [[2]]  # (0, 5 s]; 6 s is the watermark


def test_a_timestamp_extractor_must_implement_extract_timestamp():
    class Incomplete(TimestampExtractor):
        pass

    with pytest.raises(TypeError, match="extract_timestamp"):
        Incomplete()  # type: ignore[abstract]
