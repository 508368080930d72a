"""At least once on Spark, ``ListSpout`` tuples are tracked per tuple (#15 item 3).

A bolt fails some rows on their first attempt and never acks one: exactly those rows are
re-emitted, with their message ids, until each row's effect reached the sink once; the
spout subclass's ``ack``/``fail`` (run on the driver, in this process) hear of each id; an
available-now run ends only once nothing is un-acked. ``topology.max.spout.pending`` holds
the next list batch back until the retries are done.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from acking_topology import AckLoggingListSpout, _first_time  # _first_time: O_EXCL marker

from kstorm import BaseRichBolt, Fields, TopologyBuilder
from kstorm.errors import KstormError
from kstorm.testing import CaptureSink, ListSpout, run_to_completion

pytestmark = pytest.mark.integration

BATCHES = [[(i, f"w{i}") for i in range(b * 5, b * 5 + 5)] for b in range(3)]
FAIL = {1, 6, 7, 13}   # failed on their first attempt
HOLD = 9               # neither acked nor failed on its first attempt: times out


class Noting(ListSpout):
    """A ListSpout whose ``ack``/``fail`` record the ids (the commit phase: this process)."""

    acked: ClassVar[list[str]] = []
    failed: ClassVar[list[str]] = []

    def ack(self, msg_id: Any) -> None:
        Noting.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        Noting.failed.append(msg_id)


class FirstAttempt(BaseRichBolt):
    """Logs ``<message id>`` per execution to ``<dir>/executions.log``; fails the first
    attempt of ids in ``fail``, holds (never acks) the first of ``hold``."""

    def __init__(self, directory: str, fail: set[int], hold: int | None = None) -> None:
        self.directory, self.fail, self.hold = directory, fail, hold

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "msg"))

    def execute(self, tuple_: Any) -> None:
        n, msg_id = tuple_.values[0], tuple_.message_id
        with open(os.path.join(self.directory, "executions.log"), "a") as f:
            f.write(f"{msg_id}\n")
        first = _first_time(self.directory, msg_id)
        if first and n in self.fail:
            self.collector.fail(tuple_)
            return
        if first and n == self.hold:
            return  # its tree times out
        self.collector.emit([n, tuple_.values[1], msg_id], anchors=tuple_)
        self.collector.ack(tuple_)


def _executions(directory: Path) -> list[str]:
    return (directory / "executions.log").read_text().split()


def _msg_id(n: int) -> str:
    return f"{n // 5}:{n % 5}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    Noting.acked, Noting.failed = [], []


def _topology(spout: ListSpout, bolt: FirstAttempt) -> Any:
    b = TopologyBuilder()
    b.set_spout("ids", spout)
    b.set_bolt("work", bolt, 2).shuffle_grouping("ids")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    return b.create_topology()


def test_failed_and_timed_out_list_rows_are_replayed_with_their_ids(spark: Any,
                                                                    tmp_path: Path) -> None:
    spout = Noting(BATCHES, Fields("id", "word"), partitions=2)
    topology = _topology(spout, FirstAttempt(str(tmp_path), FAIL, HOLD))
    result = run_to_completion(topology, {
        "topology.guarantee": "at-least-once", "topology.message.timeout.secs": 2,
        "kstorm.checkpoint.dir": str(tmp_path / "checkpoint")}, name="list-acking")

    every = [_msg_id(n) for n in range(15)]
    again = sorted(_msg_id(n) for n in (*FAIL, HOLD))
    # each row's effect reached the sink exactly once, with the row's own id
    out = sorted(tuple(t.values) for t in result.sinks["out"].tuples)
    assert out == sorted((n, f"w{n}", _msg_id(n)) for n in range(15))
    # exactly the failed and the held rows ran twice
    runs = Counter(_executions(tmp_path))
    assert sorted(m for m, k in runs.items() if k == 2) == again
    assert sorted(runs) == sorted(every) and set(runs.values()) == {1, 2}
    # the spout's own ack/fail ran on the driver with the ids
    assert sorted(Noting.failed) == again
    assert sorted(Noting.acked) == sorted(every)
    counters = result.progress["components"]["ids"]
    assert counters["failed"] == len(FAIL) and counters["timed_out"] == 1
    assert counters["replayed"] == len(FAIL) + 1 and counters["acked"] == 15


def test_max_spout_pending_holds_a_list_batch_back_until_its_retries_ran(
        spark: Any, tmp_path: Path) -> None:
    spout = Noting(BATCHES[:2], Fields("id", "word"))
    topology = _topology(spout, FirstAttempt(str(tmp_path), {1, 3}))
    result = run_to_completion(topology, {
        "topology.guarantee": "at-least-once", "topology.max.spout.pending": 2,
        "kstorm.checkpoint.dir": str(tmp_path / "checkpoint")}, name="list-pending")

    assert sorted(t.values[0] for t in result.sinks["out"].tuples) == list(range(10))
    # batch 0 leaves 0:1 and 0:3 failed (2 un-acked, the cap): the next batch re-emits them
    # alone; list batch 1 comes after
    runs = _executions(tmp_path)
    assert sorted(runs[:5]) == [_msg_id(n) for n in range(5)]
    assert sorted(runs[5:7]) == ["0:1", "0:3"]
    assert sorted(runs[7:]) == [_msg_id(n) for n in range(5, 10)]
    assert sorted(Noting.failed) == ["0:1", "0:3"]


class AlwaysFails(BaseRichBolt):
    """Fails row 0 on every attempt, acks the rest."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id"))

    def execute(self, tuple_: Any) -> None:
        if tuple_.values[0] == 0:
            self.collector.fail(tuple_)
            return
        self.collector.emit([tuple_.values[0]], anchors=tuple_)
        self.collector.ack(tuple_)


def test_a_run_that_cannot_finish_is_stopped_and_says_why(spark: Any, tmp_path: Path) -> None:
    # unlimited retries of a row that always fails: the run never drains; run_to_completion
    # must not return as if it had (nor leave the query running)
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout([[(0,), (1,)]], Fields("id")))
    b.set_bolt("work", AlwaysFails()).shuffle_grouping("ids")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    with pytest.raises(KstormError, match="did not finish within 20 s") as caught:
        run_to_completion(b.create_topology(), {
            "topology.guarantee": "at-least-once",
            "kstorm.checkpoint.dir": str(tmp_path / "checkpoint")},
            name="list-forever", timeout=20)
    assert "max_retries" in caught.value.hint
    assert not [q for q in spark.streams.active if q.name == "list-forever"]


def test_at_most_once_a_list_spouts_ack_runs_for_every_row_once_emitted(
        spark: Any, tmp_path: Path) -> None:
    # seed 003: with no ackers a spout tuple is acked right after emit, whatever follows
    # (here a bolt fails rows 1, 6, 7 and 13: lost, never re-emitted)
    spout = AckLoggingListSpout(BATCHES, Fields("id", "word"), partitions=2)
    spout.ack_dir = str(tmp_path)
    topology = _topology(spout, FirstAttempt(str(tmp_path), FAIL))
    result = run_to_completion(topology, {
        "topology.guarantee": "at-least-once", "topology.acker.executors": 0,
        "kstorm.checkpoint.dir": str(tmp_path / "checkpoint")}, name="list-amo")

    acked = Counter((tmp_path / "acks.log").read_text().split())
    assert acked == Counter(_msg_id(n) for n in range(15))  # each row once
    assert sorted(t.values[0] for t in result.sinks["out"].tuples) == sorted(
        n for n in range(15) if n not in FAIL)
    assert Counter(_executions(tmp_path)) == Counter(_msg_id(n) for n in range(15))
