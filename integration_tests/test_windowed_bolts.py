"""User windowed bolts (seed 004) on a real SparkSession, fed by ListSpout."""

from __future__ import annotations

import datetime as dt

import pytest
from windowed_bolts import WindowIds

from kstorm import Fields, TopologyBuilder
from kstorm.testing import CaptureSink, ListSpout, run_to_completion
from kstorm.windowing import Duration

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
    # rows of a batch arrive in any order: the bolt must still see them in timestamp order
    batches = [list(reversed(SEED_BATCHES[0])), SEED_BATCHES[1][::2] + SEED_BATCHES[1][1::2]]
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


# tumbling 10 s, lag 2 s. Late: e, f (below watermark 18 s of batch 0), i (below 38 s).
LATE_BATCHES = [
    [("a", 1_000), ("b", 20_000), ("c", 17_000), ("d", 19_000)],
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
    # the tuple without a timestamp is a dead letter naming the bolt, not a crash
    [dead] = result.dead_letters
    assert dead["component"] == "w" and dead["error_type"] == "FieldError"
    assert "'ts'" in dead["message"] and "'n'" in dead["values"]


def test_without_a_late_stream_late_tuples_are_counted(spark, tmp_path):
    result = run_to_completion(late_topology(None), {"kstorm.checkpoint.dir": str(tmp_path)})
    assert [v[:3] for v in result.sinks["out"].values] == LATE_WINDOWS
    assert result.progress["components"]["w"]["late"] == 3
    assert "w" not in result.emitted or set(result.emitted["w"]) == {"default"}
