"""WatermarkTracker: min over streams minus lag, emitted on advance, interval, idle streams."""

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm.errors import ConfigError
from kstorm.windowing import Duration, WatermarkTracker


def test_watermark_is_min_of_latest_per_stream_minus_lag():
    tracker = WatermarkTracker(Duration.seconds(1))
    tracker.track(("split", "default"), 5_000)
    tracker.track(("count", "default"), 9_000)
    tracker.track(("split", "default"), 3_000)  # older than that stream's latest: ignored
    assert tracker.current() == 4_000
    assert tracker.emit() == 4_000
    assert tracker.watermark == 4_000


def test_emitted_only_when_it_advances():
    tracker = WatermarkTracker()
    tracker.track("p0", 10)
    assert tracker.emit() == 10
    assert tracker.emit() is None
    tracker.track("p1", 5)  # a new, slower stream would pull it back: not emitted
    assert tracker.current() == 5 and tracker.emit() is None
    tracker.track("p1", 20)
    assert tracker.emit() is None  # min(10, 20) = 10: not an advance
    tracker.track("p0", 30)
    assert tracker.emit() == 20


def test_declared_streams_hold_the_watermark_until_they_deliver():
    tracker = WatermarkTracker(streams=["p0", "p1"])
    tracker.track("p0", 100)
    assert tracker.emit() is None
    tracker.track("p1", 50)
    assert tracker.emit() == 50


def test_poll_honours_the_watermark_interval():
    tracker = WatermarkTracker(interval=Duration.seconds(1))
    tracker.track("p0", 10, now_ms=0)
    assert tracker.poll(999) is None
    assert tracker.poll(1_000) == 10
    tracker.track("p0", 20, now_ms=1_100)
    assert tracker.poll(1_500) is None
    assert tracker.poll(2_000) == 20


def test_an_idle_stream_stops_holding_the_watermark_back():
    tracker = WatermarkTracker(streams=["p0", "p1"], idle_timeout=Duration.seconds(30))
    tracker.track("p0", 1_000, now_ms=0)
    assert tracker.emit(now_ms=10_000) is None  # p1 never delivered, not idle yet
    tracker.track("p0", 5_000, now_ms=29_000)
    assert tracker.emit(now_ms=30_000) == 5_000  # p1 silent for 30 s: ignored
    tracker.track("p1", 2_000, now_ms=31_000)  # p1 is back, behind: holds it again
    assert tracker.current(now_ms=31_000) == 2_000
    assert tracker.emit(now_ms=31_000) is None  # never goes back
    tracker.track("p1", 9_000, now_ms=32_000)
    tracker.track("p0", 7_000, now_ms=32_000)
    assert tracker.emit(now_ms=32_000) == 7_000


def test_all_streams_idle_keeps_the_watermark():
    tracker = WatermarkTracker(idle_timeout=Duration.seconds(1))
    tracker.track("p0", 500, now_ms=0)
    assert tracker.emit(now_ms=10) == 500
    assert tracker.current(now_ms=5_000) is None and tracker.emit(now_ms=5_000) is None
    assert tracker.watermark == 500


def test_without_idle_timeout_a_silent_stream_holds_forever():
    tracker = WatermarkTracker(streams=["p0", "p1"])
    tracker.track("p0", 1_000, now_ms=0)
    assert tracker.emit(now_ms=10**9) is None


def test_invalid_arguments():
    with pytest.raises(ConfigError, match="lag"):
        WatermarkTracker(-1)
    with pytest.raises(ConfigError, match="interval"):
        WatermarkTracker(interval=0)
    with pytest.raises(ConfigError, match="idle timeout"):
        WatermarkTracker(idle_timeout=Duration.millis(0))


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 1_000),
                              st.integers(0, 50), st.booleans()), max_size=60),
       lag=st.integers(0, 100), cut=st.integers(0, 60))
def test_matches_definition_and_survives_snapshot(ops, lag, cut):
    """Emitted watermarks strictly increase and equal min(latest) - lag when emitted."""
    one = WatermarkTracker(lag, streams=["a", "b"], idle_timeout=200)
    two = WatermarkTracker(lag, streams=["a", "b"], idle_timeout=200)
    now, latest, seen_at, last = 0, {}, {}, None
    for i, (stream, ts, dt, emit) in enumerate(ops):
        if i == cut:
            two.restore(pickle.loads(pickle.dumps(one.snapshot())))
        now += dt
        one.track(stream, ts, now)
        if i >= cut:
            two.track(stream, ts, now)
        latest[stream] = max(ts, latest.get(stream, ts))
        seen_at[stream] = now
        if emit:
            got = one.emit(now)
            assert i < cut or two.emit(now) == got
            if got is not None:
                assert last is None or got > last
                last = got
                active = [s for s in latest if now - seen_at[s] < 200]
                assert got == min(latest[s] for s in active) - lag


def test_a_windowed_bolt_honours_its_watermark_interval_in_batch_time():
    from kstorm._runtime.window_task import Collect, WindowedTask
    from kstorm.tuple import Fields, Tuple
    from kstorm.windowing import WindowConfig

    fields = Fields("id", "ts")

    def run(interval):
        config = WindowConfig(Duration.seconds(10), tumbling=True, timestamp_field="ts",
                              watermark_interval=interval)
        fired, snap = [], None
        for i, now in enumerate(range(0, 8_000, 1_000)):  # a batch per second, ts 10 s apart
            task = WindowedTask("w", config)
            task.restore(snap)
            out = Collect()
            task.process([Tuple([str(i), 10_000 * (i + 1)], fields, "s",
                                message_id=("t", 0, i))], now, out)
            fired.append([end for _, end in out.bounds])
            snap = pickle.loads(pickle.dumps(task.snapshot()))
        return fired

    every_batch = run(None)
    assert every_batch == [[10_000], [20_000], [30_000], [40_000], [50_000], [60_000],
                           [70_000], [80_000]]
    # at most once per 3 s of batch time: the watermark advances at 3 s and 6 s only
    assert run(Duration.seconds(3)) == [[], [], [], [10_000, 20_000, 30_000, 40_000], [], [],
                                        [50_000, 60_000, 70_000], []]


def test_the_aggregate_refuses_a_watermark_interval():
    from kstorm.windowing.aggregate import Agg, WindowedAggregate

    agg = (WindowedAggregate(key="k", n=Agg.count()).with_tumbling_window(Duration.seconds(10))
           .with_timestamp_field("ts").with_watermark_interval(Duration.seconds(2)))
    with pytest.raises(ConfigError, match="trigger interval"):
        agg.spec()
