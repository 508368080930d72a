"""Processing-time sessions of ``WindowedAggregate`` on Spark: the test driver's, at Spark's times.

A ``ListSpout`` of 6 batches (one list batch per micro-batch, continuous trigger every
200 ms) -> a ``WindowedAggregate`` with processing-time sessions (gap 1.5 s, no timestamp
field; 2 tasks) -> a ``CaptureSink``. The run goes on until every tuple was emitted in a
closed session: the last sessions close in batches without input, which the list source
plans once the commit phase says a session is due (``kstorm/_kafka/clocks.py``). Where the
session boundaries fall depends on when Spark ran each batch, so the expectation is not
written down: it is the test driver's output for the same batches at the same times, each
batch's ``batchTimestampMs`` read back from Spark's offset log (the time the commit phase
stamps the batch with, the same on a replay).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kstorm import Fields, TopologyBuilder
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import CaptureSink, ListSpout
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate

pytestmark = [pytest.mark.integration]

GAP_MS = 1_500
BATCHES = [
    [["0", "a", 1], ["1", "b", 2], ["2", "a", 3]],
    [["3", "a", 4], ["4", "c", 5]],
    [["5", "b", 6]],
    [["6", "a", 7], ["7", "c", 8], ["8", "c", 8]],
    [["9", "d", 9]],
    [["10", "a", 10], ["11", "b", 11]],
]


def _topology() -> Any:
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(BATCHES, Fields("id", "key", "value")))
    b.set_bolt("sessions", WindowedAggregate(
        key="key", n=Agg.count(), total=Agg.sum("value"), kinds=Agg.count_distinct("value"))
               .with_session_window(Duration.millis(GAP_MS)), 2
               ).fields_grouping("events", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("sessions")
    return b.create_topology()


def _offset_log(checkpoint: Path) -> list[tuple[int, int, int]]:
    """Each batch's (timestamp ms, first list batch, end list batch) from Spark's offset log."""
    out, begin = [], 0
    ids = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    for batch_id in ids:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        end = int(json.loads(lines[2])["batch"])
        out.append((int(json.loads(lines[1])["batchTimestampMs"]), begin, end))
        begin = end
    return out


def test_processing_time_sessions_on_spark_equal_the_drivers_at_the_same_times(
        spark: Any, tmp_path: Path) -> None:
    from kstorm.submit import submit_topology

    checkpoint = tmp_path / "checkpoint"
    topology = _topology()
    total = sum(len(b) for b in BATCHES)
    handle = submit_topology(f"apt-{uuid.uuid4().hex[:6]}", {
        "kstorm.checkpoint.dir": str(checkpoint), "kstorm.trigger": "continuous",
        "kstorm.trigger.interval.ms": 200, "kstorm.capture.emitted": True,
        "kstorm.spark.release.planners": False}, topology)
    sink = handle.sinks["out"]
    deadline = time.monotonic() + 120
    try:
        while sum(t.values[3] for ts in list(sink.batches.values()) for t in ts) < total:
            assert handle.is_active, "the topology stopped"
            assert time.monotonic() < deadline, f"not every session closed: {sink.batches}"
            time.sleep(0.1)
    finally:
        handle.stop()
    on_spark = {b: [list(t.values) for t in ts] for b, ts in sink.batches.items() if ts}

    log = _offset_log(checkpoint)
    on_driver = {}
    with TopologyTestDriver(_topology(), start_time_ms=log[0][0]) as driver:
        for batch_id, (at, begin, end) in enumerate(log):
            driver.advance_time(at - driver.now_ms, run=False)
            before = len(driver.output("out"))
            driver.run_batch({"events": [row for b in range(begin, end)
                                         for row in BATCHES[b]]})
            if len(driver.output("out")) > before:
                on_driver[batch_id] = sorted(driver.output("out")[before:])

    assert {b: sorted(ts) for b, ts in on_spark.items()} == on_driver
    assert sum(row[3] for rows in on_spark.values() for row in rows) == total
    idle = [b for b, (_, begin, end) in enumerate(log) if begin == end]
    assert idle and max(on_spark) in idle, log  # the last sessions closed without input
    for batch_id, rows in on_spark.items():  # closed once the batch's time passed the end
        assert all(row[2] < log[batch_id][0] for row in rows)
    print(f"\nbatches (time, list batches): {[(t - log[0][0], b, e) for t, b, e in log]}\n"
          f"sessions by batch: {on_driver}")
