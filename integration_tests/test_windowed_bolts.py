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
