"""The commit phase's steps run in one order, whichever orchestration brings its side."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

from kstorm import TopologyBuilder
from kstorm._runtime.batch_loop import ClosedWindows
from kstorm._runtime.commit_phase import (
    BatchCommit,
    CommitStage,
    batch_commit,
    run_commit_phase,
)
from kstorm._runtime.envelope import DEAD_LETTER, EMPTY, METRICS, Outgoing, to_arrow
from kstorm._runtime.plan import compile_plan
from kstorm.bolt import BaseBasicBolt
from kstorm.config import TopologyConfig
from kstorm.testing import ListSpout
from kstorm.transactional.attempt import TransactionAttempt
from kstorm.tuple import Fields


class _Echo(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields(["w"]))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.values[0]])


class _Side:
    """Records each step (a fake: the real sides run in tests/test_testdriver.py, on Spark)."""

    def __init__(self, overlap: bool = False) -> None:
        self.overlap = overlap
        self.steps: list[str] = []
        self.seen: dict[str, Any] = {}

    def read_offsets(self, batch: BatchCommit) -> None:
        self.steps.append("offsets")

    def settle_trees(self, batch: BatchCommit, events: pa.Table) -> Any:
        self.steps.append("trees")
        return None

    def close_windows(self, batch: BatchCommit) -> list[ClosedWindows]:
        self.steps.append("windows")
        return []

    def commit_sinks(self, batch: BatchCommit) -> int:
        self.steps.append("sinks")
        self.seen["metrics"] = list(batch.metrics)
        return 3

    def write_dead_letters(self, batch: BatchCommit) -> None:
        self.steps.append("dead letters")
        self.seen["dead"] = batch.dead.num_rows

    def commit_states(self, batch: BatchCommit) -> None:
        self.steps.append("states")

    def persist(self, batch: BatchCommit) -> None:
        self.steps.append("persist")

    def record(self, batch: BatchCommit) -> None:
        self.steps.append("record")
        self.seen["delivered"] = batch.delivered

    def commit_later(self, batch: BatchCommit) -> None:
        self.steps.append("later")
        self.seen["later"] = batch


def _stage() -> CommitStage:
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([[["a"]]], fields=Fields(["w"])))
    builder.set_bolt("echo", _Echo()).shuffle_grouping("words")
    topology = builder.create_topology()
    return CommitStage(topology, compile_plan(topology), "t", {}, TopologyConfig.from_conf({}))


def _row(dest: str, value: Any) -> Outgoing:
    return Outgoing(dest, 0, "echo", "default", pickle.dumps(value), None)


def _rows() -> pa.Table:
    rows = [_row(METRICS, {"echo.executed": 2}),
            _row(DEAD_LETTER, ["echo", "default", "ValueError", "bad", "x", None, None, None,
                               None])]
    return pa.Table.from_batches([to_arrow(rows)])


def test_the_steps_run_in_their_order() -> None:
    side = _Side()
    batch = batch_commit(_rows(), 4, TransactionAttempt(5, 0))
    run_commit_phase(side, _stage(), batch)
    assert side.steps == ["offsets", "trees", "windows", "sinks", "dead letters", "states",
                          "persist", "record"]
    assert side.seen == {"metrics": [{"echo.executed": 2}], "dead": 1, "delivered": 3}
    assert batch.txid == 5


def test_overlapped_the_sinks_and_the_record_come_later() -> None:
    side = _Side(overlap=True)
    run_commit_phase(side, _stage(), batch_commit(_rows(), 0, TransactionAttempt(1, 0)))
    assert side.steps == ["offsets", "trees", "windows", "dead letters", "persist", "later"]


@pytest.mark.parametrize("given_up", [False, True])
def test_a_given_up_batch_keeps_only_dead_letters_and_metrics(given_up: bool) -> None:
    rows = [_row("echo-sink", ["a"]), _row(METRICS, {"echo.executed": 1})]
    batch = batch_commit(pa.Table.from_batches([to_arrow(rows)]), 0, TransactionAttempt(1, 0),
                         given_up=given_up)
    assert ("echo-sink" in batch.by_dest) is not given_up
    assert METRICS in batch.by_dest
    assert batch.dead is EMPTY or batch.dead.num_rows == 0
