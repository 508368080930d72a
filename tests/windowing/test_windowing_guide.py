"""Seed 004's worked example, tuple for tuple, plus the window views' contract."""

import pytest

from kstorm.windowing import (
    Count,
    Duration,
    StaleWindowError,
    TupleWindow,
    UnsupportedOperationError,
    WatermarkTracker,
    WindowConfig,
    WindowedBoltConfigMixin,
    WindowManager,
)


def at(hh: int, mm: int, ss: int) -> int:
    """A time of day in ms."""
    return ((hh * 60 + mm) * 60 + ss) * 1000


class SlidingBolt(WindowedBoltConfigMixin):
    pass


def seed_bolt_config():
    # Window length = 20s, sliding interval = 10s, watermark every 1s, max lag = 5s.
    return (SlidingBolt().with_window(Duration.seconds(20), Duration.seconds(10))
            .with_timestamp_field("ts").with_watermark_interval(Duration.seconds(1))
            .with_lag(Duration.seconds(5)).window_config)


def described(windows):
    return [(w.get_start_timestamp(), w.get_end_timestamp(), [e["id"] for e in w.get()])
            for w in windows]


def test_seed_004_worked_example():
    config = seed_bolt_config()
    manager = WindowManager(config)
    tracker = WatermarkTracker(config.lag, interval=config.watermark_interval,
                               streams=["spout:default"])
    clock = at(9, 0, 0)
    tracker.poll(clock)

    def receive(name, ts):
        tup = {"id": name, "ts": ts}
        tracker.track("spout:default", config.extractor(tup), clock)
        assert manager.add(tup, config.extractor(tup)), f"{name} must not be late"

    first = [("e1", at(6, 0, 3)), ("e2", at(6, 0, 5)), ("e3", at(6, 0, 7)),
             ("e4", at(6, 0, 18)), ("e5", at(6, 0, 26)), ("e6", at(6, 0, 36))]
    for name, ts in first:  # received between 9:00:00 and 9:00:01
        clock += 100
        receive(name, ts)
    clock = at(9, 0, 1)
    w1 = tracker.poll(clock)
    assert w1 == at(6, 0, 31)  # latest 6:00:36 - 5s lag

    assert described(manager.on_watermark(w1)) == [
        (at(5, 59, 50), at(6, 0, 10), ["e1", "e2", "e3"]),
        (at(6, 0, 0), at(6, 0, 20), ["e1", "e2", "e3", "e4"]),
        (at(6, 0, 10), at(6, 0, 30), ["e4", "e5"]),
    ]  # e6 (6:00:36) is held back: the watermark 6:00:31 is older

    second = [("e7", at(8, 0, 25)), ("e8", at(8, 0, 26)), ("e9", at(8, 0, 27)),
              ("e10", at(8, 0, 39))]
    for name, ts in second:  # received between 9:00:01 and 9:00:02
        clock += 100
        receive(name, ts)
    assert tracker.poll(clock) is None  # not due before 9:00:02
    clock = at(9, 0, 2)
    w2 = tracker.poll(clock)
    assert w2 == at(8, 0, 34)  # latest 8:00:39 - 5s lag

    windows = manager.on_watermark(w2)
    assert described(windows) == [
        (at(6, 0, 20), at(6, 0, 40), ["e5", "e6"]),
        (at(6, 0, 30), at(6, 0, 50), ["e6"]),
        (at(8, 0, 10), at(8, 0, 30), ["e7", "e8", "e9"]),
    ]  # e10 (8:00:39) is beyond the watermark 8:00:34
    assert manager.size == 4  # e7, e8, e9 in the last window, e10 pending
    assert manager.late_count == 0


def test_seed_example_new_and_expired_tuples():
    manager = WindowManager(seed_bolt_config())
    ids = lambda ts: [t["id"] for t in ts]  # noqa: E731
    for i, s in enumerate([3, 5, 7, 18, 26, 36], 1):
        manager.add({"id": f"e{i}", "ts": at(6, 0, s)}, at(6, 0, s))
    got = [(ids(w.get_new()), ids(w.get_expired())) for w in manager.on_watermark(at(6, 0, 31))]
    assert got == [(["e1", "e2", "e3"], []), (["e4"], []), (["e5"], ["e1", "e2", "e3"])]
    for i, s in enumerate([25, 26, 27, 39], 7):
        manager.add({"id": f"e{i}", "ts": at(8, 0, s)}, at(8, 0, s))
    got = [(ids(w.get_new()), ids(w.get_expired())) for w in manager.on_watermark(at(8, 0, 34))]
    # e6 expires with the empty 6:00:40-6:01:00 window; the next window reports it
    assert got == [(["e6"], ["e4"]), ([], ["e5"]), (["e7", "e8", "e9"], ["e6"])]


def test_a_tuple_behind_the_watermark_is_late():
    # Seed: lag 5s, t1 at 06:00:05; a tuple at 05:59:59 after the window moved past t1 is late.
    config = WindowConfig(Duration.seconds(5), tumbling=True, timestamp_field="ts",
                          lag=Duration.seconds(5))
    manager, tracker = WindowManager(config), WatermarkTracker(config.lag)
    assert manager.add("t1", at(6, 0, 5))
    tracker.track("s", at(6, 0, 5))
    assert manager.add("early-but-in-lag", at(6, 0, 1))  # no watermark yet: in time
    manager.on_watermark(tracker.emit())  # 06:00:00
    assert not manager.add("t0", at(5, 59, 59))
    assert manager.late_count == 1


def test_window_views_expire_when_the_manager_moves_on():
    manager = WindowManager(WindowConfig(Count(2), Count(1)))
    manager.add("a", 1)
    (window,) = manager.on_processing_time(2)
    assert list(window) == ["a"] and len(window) == 1
    manager.add("b", 3)
    assert window.get() == ["a"]  # adding does not invalidate it
    manager.on_processing_time(4)
    with pytest.raises(StaleWindowError, match="copy window.get"):
        window.get()


def test_persistent_windows_only_iterate():
    manager = WindowManager(WindowConfig(Count(2), Count(2), persistent=True))
    for i in range(4):
        manager.add(i, i)
    windows = manager.on_processing_time(10)
    assert [list(w.get_iter()) for w in windows] == [[0, 1], [2, 3]]
    with pytest.raises(UnsupportedOperationError, match="persistent"):
        windows[0].get_new()
    with pytest.raises(UnsupportedOperationError, match="persistent"):
        windows[0].get_expired()


def test_count_windows_have_no_start_timestamp():
    manager = WindowManager(WindowConfig(Count(3), Duration.millis(10)))
    manager.add("x", 4)
    (window,) = manager.on_processing_time(11)
    assert window.get_start_timestamp() is None and window.get_end_timestamp() == 10


def test_standalone_window_for_bolt_unit_tests():
    window = TupleWindow.of([1, 2, 3], new=[3], expired=[0], start_ts=0, end_ts=5)
    assert (window.get(), window.get_new(), window.get_expired()) == ([1, 2, 3], [3], [0])
    with pytest.raises(ValueError, match="new"):
        TupleWindow.of([1, 2], new=[1])


def test_time_driver_must_match_the_time_mode():
    with pytest.raises(UnsupportedOperationError, match="on_processing_time"):
        WindowManager(WindowConfig(Count(2))).on_watermark(5)
    with pytest.raises(UnsupportedOperationError, match="on_watermark"):
        WindowManager(WindowConfig(Count(2), timestamp_field="ts")).on_processing_time(5)


def test_processing_time_windows_close_on_an_idle_stream():
    manager = WindowManager(WindowConfig(Duration.seconds(10), tumbling=True))
    manager.add("a", 1_000)
    manager.add("b", 9_000)
    assert manager.on_processing_time(10_000) == []  # 10 000 is still inside (0, 10 000]
    (window,) = manager.on_processing_time(10_001)
    assert window.get() == ["a", "b"] and window.get_end_timestamp() == 10_000
    assert manager.on_processing_time(60_000) == []  # nothing more: empty windows are skipped


def test_processing_time_never_goes_back():
    manager = WindowManager(WindowConfig(Duration.millis(10), tumbling=True))
    manager.add("a", 100)
    manager.add("b", 50)  # a clock stepping back: taken as 100
    assert manager.on_processing_time(95) == []  # (90, 100] is still open
    assert [w.get() for w in manager.on_processing_time(101)] == [["a", "b"]]
