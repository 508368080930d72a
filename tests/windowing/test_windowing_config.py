"""Window lengths, WindowConfig validation and the Storm-named builder methods."""

import pickle

import pytest

from kstorm import Fields, Tuple
from kstorm.errors import ConfigError, FieldError
from kstorm.windowing import (
    Count,
    Duration,
    FieldTimestampExtractor,
    WindowConfig,
    WindowedBoltConfigMixin,
)


class Bolt(WindowedBoltConfigMixin):
    pass


def ts_of(item):  # module level: picklable like a user's extractor
    return item["t"]


# -- Count / Duration ------------------------------------------------------------------------

def test_duration_units_convert_to_millis():
    assert Duration.millis(250).millis == 250
    assert Duration.seconds(2).millis == 2_000
    assert Duration.minutes(3).millis == 180_000
    assert Duration.hours(1).millis == 3_600_000
    assert Duration.days(1).millis == 86_400_000
    assert Duration.seconds(60) == Duration.minutes(1)
    assert Duration.millis(0).millis == 0  # a zero lag is fine


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True, None])
def test_count_must_be_a_positive_whole_number(bad):
    with pytest.raises(ConfigError) as err:
        Count(bad)
    assert "Count" in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("make", [
    lambda: Duration.millis(-1), lambda: Duration.seconds(-5), lambda: Duration.seconds(1.5),
    lambda: Duration.minutes("1"), lambda: Duration.hours(True), lambda: Duration.days(None),
])
def test_duration_rejects_negative_or_non_integer_values(make):
    with pytest.raises(ConfigError, match="Duration"):
        make()


def test_values_are_frozen_hashable_and_picklable():
    c, d = Count(3), Duration.seconds(2)
    with pytest.raises(AttributeError):
        c.n = 4
    assert {c: 1, d: 2}[Count(3)] == 1
    assert pickle.loads(pickle.dumps((c, d))) == (c, d)


# -- WindowConfig ----------------------------------------------------------------------------

def test_defaults_follow_storm():
    cfg = WindowConfig(Count(10))
    assert cfg.sliding_interval == Count(1)  # withWindow(length) slides on every tuple
    assert cfg.lag == Duration.millis(0)
    assert cfg.watermark_interval is None  # once per micro-batch unless set
    assert not cfg.is_event_time and cfg.extractor is None
    assert not cfg.tumbling and not cfg.persistent


def test_tumbling_slides_by_its_length():
    assert WindowConfig(Duration.seconds(5), tumbling=True).sliding_interval == Duration.seconds(5)
    with pytest.raises(ConfigError, match="tumbling"):
        WindowConfig(Count(5), Count(2), tumbling=True)


@pytest.mark.parametrize("kwargs, message", [
    ({"window_length": Duration.millis(0)}, "window length must be positive"),
    ({"window_length": 10}, "window length must be a Count or a Duration"),
    ({"window_length": Count(2), "sliding_interval": Duration.millis(0)},
     "sliding interval must be positive"),
    ({"window_length": Count(2), "late_tuple_stream": "late"}, "timestamp field"),
    ({"window_length": Count(2), "timestamp_field": "ts", "timestamp_extractor": ts_of},
     "not both"),
    ({"window_length": Count(2), "timestamp_extractor": 42}, "callable"),
    ({"window_length": Count(2), "lag": 5}, "lag must be a Duration"),
    ({"window_length": Count(2), "watermark_interval": Duration.millis(0)}, "watermark"),
    ({"window_length": Count(2), "watermark_interval": Duration.seconds(1)}, "needs event time"),
    ({"window_length": Count(2), "max_events_in_memory": 0}, "max_events_in_memory"),
    ({"window_length": Count(2), "timestamp_field": ""}, "timestamp_field"),
])
def test_invalid_configurations_name_the_problem(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        WindowConfig(**kwargs)


def test_late_tuple_stream_is_accepted_with_event_time():
    cfg = WindowConfig(Count(2), timestamp_field="ts", late_tuple_stream="late")
    assert cfg.is_event_time and cfg.late_tuple_stream == "late"


def test_config_with_a_module_level_extractor_pickles():
    cfg = WindowConfig(Duration.seconds(1), timestamp_extractor=ts_of, lag=Duration.seconds(1))
    again = pickle.loads(pickle.dumps(cfg))
    assert again == cfg and again.extractor({"t": 7}) == 7


def test_timestamp_field_reads_kstorm_tuples_mappings_and_attributes():
    extract = WindowConfig(Count(1), timestamp_field="ts").extractor
    assert isinstance(extract, FieldTimestampExtractor)
    tup = Tuple(["w", 1234], Fields("word", "ts"), "spout")
    assert extract(tup) == 1234
    assert extract({"ts": 5}) == 5
    with pytest.raises(FieldError, match="'ts'"):
        extract({"other": 1})
    with pytest.raises(FieldError, match="expected an int timestamp"):
        extract({"ts": "yesterday"})


# -- builder mixin ---------------------------------------------------------------------------

@pytest.mark.parametrize("build, length, sliding", [
    (lambda b: b.with_window(Count(30), Count(10)), Count(30), Count(10)),
    (lambda b: b.with_window(Count(30)), Count(30), Count(1)),
    (lambda b: b.with_window(Count(30), Duration.seconds(5)), Count(30), Duration.seconds(5)),
    (lambda b: b.with_window(Duration.seconds(10), Duration.seconds(5)), Duration.seconds(10),
     Duration.seconds(5)),
    (lambda b: b.with_window(Duration.seconds(10)), Duration.seconds(10), Count(1)),
    (lambda b: b.with_window(Duration.seconds(10), Count(3)), Duration.seconds(10), Count(3)),
    (lambda b: b.with_tumbling_window(Count(7)), Count(7), Count(7)),
    (lambda b: b.with_tumbling_window(Duration.seconds(5)), Duration.seconds(5),
     Duration.seconds(5)),
])
def test_every_storm_window_shape_can_be_declared(build, length, sliding):
    bolt = Bolt()
    assert build(bolt) is bolt
    cfg = bolt.window_config
    assert (cfg.window_length, cfg.sliding_interval) == (length, sliding)


def test_builder_methods_chain_and_fill_the_config():
    bolt = (Bolt().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
            .with_lag(Duration.seconds(5)).with_watermark_interval(Duration.millis(200))
            .with_late_tuple_stream("late").with_message_id_field("offset")
            .with_persistence().with_max_events_in_memory(25_000))
    cfg = bolt.window_config
    assert cfg.tumbling and cfg.timestamp_field == "ts" and cfg.lag == Duration.seconds(5)
    assert cfg.watermark_interval == Duration.millis(200) and cfg.late_tuple_stream == "late"
    assert cfg.message_id_field == "offset" and cfg.persistent
    assert cfg.max_events_in_memory == 25_000
    assert pickle.loads(pickle.dumps(bolt)).window_config == cfg


def test_builder_fails_early_on_bad_arguments():
    with pytest.raises(ConfigError, match="positive"):
        Bolt().with_window(Duration.millis(0))
    with pytest.raises(ConfigError, match="Count or a Duration"):
        Bolt().with_tumbling_window(5)
    with pytest.raises(ConfigError, match="Duration"):
        Bolt().with_lag(5)
    with pytest.raises(ConfigError, match="already configured"):
        Bolt().with_timestamp_field("ts").with_timestamp_extractor(ts_of)
    with pytest.raises(ConfigError, match="max events"):
        Bolt().with_max_events_in_memory(0)


def test_missing_window_or_late_stream_without_timestamps_is_reported_by_window_config():
    with pytest.raises(ConfigError, match="has no window"):
        _ = Bolt().window_config
    with pytest.raises(ConfigError, match="timestamp field"):
        _ = Bolt().with_window(Count(3)).with_late_tuple_stream("late").window_config


def test_storm_nested_count_and_duration_names():
    # Storm's signatures: withWindow(BaseWindowedBolt.Count windowLength, ...)
    from kstorm import BaseWindowedBolt

    bolt = BaseWindowedBolt().with_window(BaseWindowedBolt.Count(30), BaseWindowedBolt.Count(10))
    assert bolt.window_config.window_length == Count(30)
    assert bolt.window_config.sliding_interval == Count(10)
    assert BaseWindowedBolt.Duration.seconds(10) == Duration.seconds(10)
    assert BaseWindowedBolt.Count.of(3) == Count(3)
    # Storm's public ``value`` field: tuples of a Count, milliseconds of a Duration
    assert Count(30).value == 30 and Duration.seconds(10).value == 10_000
