"""User windowed bolts (seed 004) on a real SparkSession, fed by ListSpout."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from windowed_bolts import WindowIds

from kstorm import Fields, TopologyBuilder, submit_topology
from kstorm.testing import CaptureSink, ListSpout, run_to_completion
from kstorm.windowing import Count, Duration

pytestmark = pytest.mark.integration


def at(h: int, m: int, s: int) -> int:
    return (h * 3600 + m * 60 + s) * 1000


def clock(ms: int) -> str:
    return str(dt.timedelta(milliseconds=ms))


SEED_BATCHES = [
    [("e1", at(6, 0, 3)), ("e2", at(6, 0, 5)), ("e3", at(6, 0, 7)), ("e4", at(6, 0, 18)),
     ("e5", at(6, 0, 26)), ("e6", at(6, 0, 36))],
    [("e7", at(8, 0, 25)), ("e8", at(8, 0, 26)), ("e9", at(8, 0, 27)), ("e10", at(8, 0, 39))],
]


def test_seed_004_worked_example_with_a_user_windowed_bolt(spark, tmp_path):
    # the rows of a batch cross two partitions and an exchange: the bolt still takes them in
    # the order they were emitted (Storm's arrival order), so the guide's windows come out
    batches = SEED_BATCHES
    bolt = (WindowIds().with_window(Duration.seconds(20), Duration.seconds(10))
            .with_timestamp_field("ts").with_lag(Duration.seconds(5)))
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(batches, Fields("id", "ts"), partitions=2))
    b.set_bolt("windows", bolt).shuffle_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("windows")
    result = run_to_completion(b.create_topology(), {"kstorm.checkpoint.dir": str(tmp_path)})

    got = {bid: [(clock(s), clock(e), ids) for s, e, ids, _ in (t.values for t in tuples)]
           for bid, tuples in result.sinks["out"].batches.items() if tuples}
    assert got == {
        # w1 = 6:00:31: e1..e5 evaluated, e6 held back
        0: [("5:59:50", "6:00:10", "e1,e2,e3"),
            ("6:00:00", "6:00:20", "e1,e2,e3,e4"),
            ("6:00:10", "6:00:30", "e4,e5")],
        # w2 = 8:00:34: e5 and e6 from the earlier batch, e7..e9; e10 held back
        1: [("6:00:20", "6:00:40", "e5,e6"),
            ("6:00:30", "6:00:50", "e6"),
            ("8:00:10", "8:00:30", "e7,e8,e9")],
    }
    assert result.progress["components"]["windows"]["windows"] == 6
    assert result.progress["components"]["windows"].get("late", 0) == 0


# tumbling 10 s, lag 2 s. Late: e, f (below watermark 18 s of batch 0), i (below 38 s);
# d is 1 s behind b, which came before it: within the lag, not late.
LATE_BATCHES = [
    [("a", 1_000), ("c", 17_000), ("b", 20_000), ("d", 19_000)],
    [("e", 5_000), ("f", 17_500), ("g", 18_500), ("h", 40_000)],
    [("i", 30_000), ("j", 39_000), ("k", 60_000), ("n", None)],
]
LATE_WINDOWS = [[0, 10_000, "a"], [10_000, 20_000, "c,g,d,b"], [30_000, 40_000, "j,h"]]


def late_topology(late_stream: str | None):
    bolt = (WindowIds().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
            .with_lag(Duration.seconds(2)))
    if late_stream:
        bolt = bolt.with_late_tuple_stream(late_stream)
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(LATE_BATCHES, Fields("id", "ts"), partitions=2))
    b.set_bolt("w", bolt, 2).global_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")
    if late_stream:
        b.set_bolt("late", CaptureSink()).shuffle_grouping("w", stream=late_stream)
    return b.create_topology()


def test_late_tuples_go_to_the_late_stream_once_and_to_no_window(spark, tmp_path):
    result = run_to_completion(late_topology("too-late"),
                               {"kstorm.checkpoint.dir": str(tmp_path)})
    assert [v[:3] for v in result.sinks["out"].values] == LATE_WINDOWS
    late = [t.values[0] for t in result.sinks["late"].tuples]
    assert result.sinks["late"].tuples[0].fields == Fields("late_tuple")
    # each late tuple once, as the original tuple: its values, source and message id
    assert sorted((t.values[0], t.source_component, t.message_id) for t in late) == [
        ("e", "events", "1:0"), ("f", "events", "1:1"), ("i", "events", "2:0")]
    assert result.progress["components"]["w"]["late"] == 3
    # run_to_completion collects what the bolt emitted, per stream
    assert [v[:3] for v in result.emitted["w"]["default"]] == LATE_WINDOWS
    assert sorted(v[0].values[0] for v in result.emitted["w"]["too-late"]) == ["e", "f", "i"]
    # the tuple without a timestamp is a dead letter naming the bolt, not a crash
    [dead] = result.dead_letters
    assert dead["component"] == "w" and dead["error_type"] == "FieldError"
    assert "'ts'" in dead["message"] and "'n'" in dead["values"]


def test_without_a_late_stream_late_tuples_are_counted(spark, tmp_path):
    result = run_to_completion(late_topology(None), {"kstorm.checkpoint.dir": str(tmp_path)})
    assert [v[:3] for v in result.sinks["out"].values] == LATE_WINDOWS
    assert result.progress["components"]["w"]["late"] == 3
    assert "w" not in result.emitted or set(result.emitted["w"]) == {"default"}


def run_until(name, topology, conf, done, timeout=240.0):
    """Run ``topology`` with the continuous trigger until ``done(handle)``; then stop it."""
    handle = submit_topology(name, {"kstorm.trigger": "continuous", **conf}, topology)
    try:
        deadline = time.monotonic() + timeout
        while not done(handle):
            assert handle.is_active, "the topology stopped"
            assert time.monotonic() < deadline, f"not done in {timeout}s: {handle.progress}"
            time.sleep(0.2)
        return handle
    finally:
        handle.stop()


def test_processing_time_window_closes_on_an_idle_stream(spark, tmp_path):
    bolt = WindowIds().with_tumbling_window(Duration.seconds(2))
    b = TopologyBuilder()
    b.set_spout("events", ListSpout([[("p1", 0), ("p2", 0)], [("p3", 0)]], Fields("id", "ts")))
    b.set_bolt("w", bolt).shuffle_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")

    def fired(handle):
        ids = [i for v in handle.sinks["out"].values for i in v[2].split(",")]
        return sorted(ids) == ["p1", "p2", "p3"]

    handle = run_until("pt-idle", b.create_topology(),
                       {"kstorm.checkpoint.dir": str(tmp_path),
                        "kstorm.trigger.interval.ms": 300}, fired)
    out = handle.sinks["out"]
    # windows are the batch-time buckets of 2 s, each tuple in exactly one
    assert all(e - s == 2000 and e % 2000 == 0 for s, e, _, _ in out.values)
    # the list had two batches (ids 0 and 1); the last window closed in a later batch that
    # had no input: processing time moved on by Spark's no-data batches and a timer
    assert max(bid for bid, tuples in out.batches.items() if tuples) >= 2


def test_event_time_idle_timeout_lets_the_watermark_move_on(spark, tmp_path):
    # "slow" sends one tuple and goes silent; without an idle timeout the watermark would
    # stay at its 1 s forever and no window after it could close
    bolt = (WindowIds().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
            .with_idle_timeout(Duration.seconds(1)))
    b = TopologyBuilder()
    b.set_spout("slow", ListSpout([[("s1", 1_000)]], Fields("id", "ts")))
    b.set_spout("fast", ListSpout([[("f1", 2_000)], [("f2", 12_000)], [("f3", 22_000)],
                                   [("f4", 32_000)]], Fields("id", "ts")))
    b.set_bolt("w", bolt).global_grouping("slow").global_grouping("fast")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")

    def fired(handle):
        return len(handle.sinks["out"].values) >= 3

    handle = run_until("et-idle", b.create_topology(),
                       {"kstorm.checkpoint.dir": str(tmp_path),
                        "kstorm.trigger.interval.ms": 500}, fired)
    assert [v[:3] for v in handle.sinks["out"].values] == [
        [0, 10_000, "s1,f1"], [10_000, 20_000, "f2"], [20_000, 30_000, "f3"]]


def test_persistent_window_larger_than_memory_evaluates_on_spark(spark, tmp_path):
    # windows of 120 tuples spread over 3 micro-batches, at most 25 tuples in memory
    batches = [[(f"{b}-{i:02d}", b * 100 + i) for i in range(40)] for b in range(7)]
    bolt = (WindowIds(streamed=True).with_tumbling_window(Count(120)).with_persistence()
            .with_max_events_in_memory(25))
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(batches, Fields("id", "ts")))
    b.set_bolt("w", bolt).shuffle_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")
    result = run_to_completion(b.create_topology(), {"kstorm.checkpoint.dir": str(tmp_path)})
    # processing time: one batch's tuples share a timestamp; ties go by message id ("b:i")
    ids = [row[0] for batch in batches for row in batch]
    assert [(v[2].split(","), v[3]) for v in result.sinks["out"].values] == [
        (ids[:120], 120), (ids[120:240], 120)]


def test_the_watermark_interval_is_a_timer_on_a_quiet_stream(spark, tmp_path):
    # Storm's Windowing guide: "Watermark events are periodically (default every sec)
    # emitted". One batch of events, then silence: the windows that are due fire one
    # interval later on a timer, not when a next tuple comes (none does).
    bolt = (WindowIds().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
            .with_watermark_interval(Duration.seconds(2)))
    b = TopologyBuilder()
    b.set_spout("events", ListSpout([[("a", 1_000), ("b", 12_000), ("c", 25_000)]],
                                    Fields("id", "ts")))
    b.set_bolt("w", bolt).global_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")

    def fired(handle):
        return len(handle.sinks["out"].values) >= 2

    handle = run_until("wm-timer", b.create_topology(),
                       {"kstorm.checkpoint.dir": str(tmp_path),
                        "kstorm.trigger.interval.ms": 500}, fired)
    assert [v[:3] for v in handle.sinks["out"].values] == [
        [0, 10_000, "a"], [10_000, 20_000, "b"]]
