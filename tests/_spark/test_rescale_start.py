"""A rescaling start of the spark provider, on the driver (kstorm/_spark/state_rescale.py).

Spark's state reader is replaced by the entries it would return; what is checked is the
order of the steps on the checkpoint's files: what a refusal leaves (nothing changed), what
a move leaves (the record, the old checkpoint renamed), and what the next start after a
kill does with them.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from kstorm import BaseBasicBolt, BaseStatefulBolt, Fields, TopologyBuilder
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.plan import compile_plan
from kstorm._spark import state_rescale
from kstorm._spark.compiler import tws_task_keys
from kstorm.errors import StateError
from kstorm.grouping import stable_hash_one
from kstorm.sink import CommitRecord
from kstorm.state.rescale import new_group, split_value, tag_value
from kstorm.testing import ListSpout


class Count(BaseStatefulBolt):
    def execute(self, tuple_: Any) -> None:  # pragma: no cover - not run here
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))


class Split(BaseBasicBolt):
    def execute(self, tuple_: Any, collector: Any) -> None:  # pragma: no cover - not run here
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


def _topology(n: int, grouping: str = "fields") -> Any:
    builder = TopologyBuilder()
    builder.set_spout("lines", ListSpout([["a"]], Fields("line")))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    count = builder.set_bolt("count", Count(), n)
    if grouping == "fields":
        count.fields_grouping("split", Fields("word"))
    else:
        count.global_grouping("split")
    return builder.create_topology()


WORDS = [f"w{i}" for i in range(30)]


def _checkpoint(tmp_path: Path, n: int, batches: int, planned: int | None = None) -> Path:
    """A checkpoint of ``count`` with ``n`` tasks that committed ``batches`` batches."""
    cp = tmp_path / "cp"
    layout = CheckpointLayout(cp)
    layout.set_task_keys({"count": {"kind": "balanced", "partitions": 2,
                                    "keys": tws_task_keys(n, 2)}})
    layout.set_txid_base(0)
    for b in range(planned if planned is not None else batches):
        layout.write(cp / "offsets" / str(b), b"v1\n{}\n")
    for b in range(batches):
        layout.write(cp / "commits" / str(b), b'v1\n{"nextBatchWatermarkMs":0}')
    return cp


def _entries(n: int) -> dict[str, list[tuple[int, bytes, bytes]]]:
    """What Spark's reader gives for ``count`` over ``n`` tasks: word -> its index."""
    keys = tws_task_keys(n, 2)
    return {"count": [(keys[stable_hash_one(w) % n], w.encode(),
                       tag_value(new_group(None, stable_hash_one(w)), pickle.dumps(i)))
                      for i, w in enumerate(WORDS)]}


def _start(cp: Path, n: int, txid: int, reads: list[int], grouping: str = "fields",
           was: int = 2) -> state_rescale.Rescaling | None:
    topology = _topology(n, grouping)
    follows: list[int] = []

    def read(spark: Any, source: Path, batch: int, heads: Any, keys: Any) -> Any:
        reads.append(batch)
        return _entries(was)

    state_rescale._read_maps = read  # type: ignore[assignment]
    moved = state_rescale.rescale("t", cp, topology, compile_plan(topology), False,
                                  {"store": CommitRecord(txid, {})}, lambda: None,
                                  lambda: (cp.mkdir(exist_ok=True), follows.append(1)))
    return moved


@pytest.fixture(autouse=True)
def _reader() -> Any:
    real = state_rescale._read_maps
    yield
    state_rescale._read_maps = real  # type: ignore[assignment]


def _counts(moved: state_rescale.Rescaling, n: int) -> dict[str, int]:
    out = {}
    for task, entries in enumerate(moved.initial_state["count"]):
        for k, v in entries.items():
            group, payload = split_value(v)
            assert int(group) % n == task
            out[k.decode()] = pickle.loads(payload)
    return out


def test_a_move_reads_the_last_batch_records_it_then_renames_the_checkpoint(
        tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, 2, 4)
    reads: list[int] = []
    moved = _start(cp, 3, 3, reads)
    assert moved is not None and moved.txid == 3 and moved.moved == {"count": (2, 3)}
    assert reads == [3]
    assert _counts(moved, 3) == {w: i for i, w in enumerate(WORDS)}
    assert (tmp_path / "cp.rescaled-at-3" / "commits" / "3").exists()
    assert not (cp / "commits").exists()  # a new checkpoint
    assert state_rescale.record_path(cp).exists()


def test_the_same_parallelism_or_no_batch_is_no_move(tmp_path: Path) -> None:
    assert _start(_checkpoint(tmp_path, 2, 4), 2, 3, []) is None
    assert _start(_checkpoint(tmp_path / "x", 2, 0), 3, 3, []) is None


def test_a_refused_move_changes_nothing(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, 2, 4, planned=5)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(StateError, match="global grouping"):
        _start(cp, 3, 4, [], grouping="global")
    with pytest.raises(StateError, match="sinks are at txid 9"):
        _start(cp, 3, 9, [])
    topology = _topology(3)
    with pytest.raises(StateError, match=r"'count' now runs 3 task\(s\), but the checkpoint "
                       r"holds its state for 2 task\(s\).* no sink records offsets") as err:
        state_rescale.rescale("t", cp, topology, compile_plan(topology), False, {},
                              lambda: None, lambda: None)
    assert "keep the bolt's parallelism at 2" in (err.value.hint or "")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_batch_the_sinks_committed_before_spark_is_completed_then_moved(
        tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, 2, 4, planned=5)
    reads: list[int] = []
    moved = _start(cp, 3, 4, reads)
    assert moved is not None and moved.txid == 4 and reads == [4]
    assert (tmp_path / "cp.rescaled-at-4" / "commits" / "4").exists()


def test_a_start_after_a_kill_in_the_new_first_batch_moves_the_recorded_state_again(
        tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, 2, 4)
    reads: list[int] = []
    assert _start(cp, 4, 3, reads) is not None
    CheckpointLayout(cp).write(cp / "offsets" / "0", b"v1\n{}\n")  # killed in batch 0
    again = _start(cp, 3, 3, reads)  # the sinks did not commit it: moved again, to 3
    assert again is not None and again.moved == {"count": (2, 3)}
    assert reads == [3]  # from the record, not from the renamed checkpoint
    assert _counts(again, 3) == {w: i for i, w in enumerate(WORDS)}
    assert not (cp / "offsets").exists()
    assert list(tmp_path.glob("cp.unfinished-*"))


def test_a_new_first_batch_the_sinks_committed_is_completed_and_kept(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, 2, 4)
    assert _start(cp, 4, 3, []) is not None
    layout = CheckpointLayout(cp)
    layout.set_task_keys({"count": {"kind": "balanced", "partitions": 2,
                                    "keys": tws_task_keys(4, 2)}})
    layout.set_txid_base(4)
    layout.write(cp / "offsets" / "0", b"v1\n{}\n")
    assert _start(cp, 4, 4, []) is None  # the sinks committed txid 4 = its batch 0
    assert (cp / "commits" / "0").exists()
    assert not state_rescale.record_path(cp).exists()


class _Reader:
    """``spark.read`` answering as Spark's state-metadata and statestore readers would."""

    def __init__(self, ops: dict[int, list[tuple[int, bytes, bytes]]]) -> None:
        self.ops, self.opts = ops, {}

    @property
    def read(self) -> _Reader:
        return self

    def format(self, name: str) -> _Reader:
        self.opts = {"format": name}
        return self

    def option(self, key: str, value: Any) -> _Reader:
        self.opts[key] = value
        return self

    def load(self, path: str) -> _Reader:
        return self

    def select(self, *columns: str) -> _Reader:
        return self

    def collect(self) -> list[Any]:
        if self.opts["format"] == "state-metadata":
            props = '{"stateVariables":[{"stateName":"kv"}]}'
            return [{"operatorId": op, "operatorProperties": props} for op in self.ops]
        return [((g,), (k,), (v,)) for g, k, v in self.ops[self.opts["operatorId"]]]


def test_each_stateful_bolt_s_operator_is_the_one_holding_its_task_keys(tmp_path: Path) -> None:
    from kstorm._spark.compiler import recorded_task_keys

    builder = TopologyBuilder()
    builder.set_spout("lines", ListSpout([["a"]], Fields("line")))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("again", Count(), 2).fields_grouping("count", Fields("word"))
    topology = builder.create_topology()
    layout = CheckpointLayout(tmp_path / "cp")
    keys = recorded_task_keys(layout, compile_plan(topology), topology, 2)
    assert not set(keys["count"]) & set(keys["again"])  # two bolts, two sets of keys
    record = layout.task_keys()
    ops = {0: [(keys["again"][1], b"x", b"2")], 1: [(keys["count"][0], b"y", b"1")]}
    found = state_rescale._read_maps(_Reader(ops), tmp_path, 0, ["count", "again"], record)
    assert found == {"count": ops[1], "again": ops[0]}
    empty = {0: [], 1: ops[1]}  # "again" holds nothing yet
    assert state_rescale._read_maps(_Reader(empty), tmp_path, 0, ["count", "again"],
                                    record) == {"count": ops[1], "again": []}
    same = {h: {**e, "keys": keys["count"]} for h, e in record.items()}  # an older record
    with pytest.raises(StateError, match="cannot tell"):
        state_rescale._read_maps(_Reader(ops), tmp_path, 0, ["count", "again"], same)
