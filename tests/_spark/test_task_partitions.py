"""Each task of a fields- or shuffle-by-task-exchanged stage gets a Spark partition of its own.

Spark's hash partitioning puts a row in ``pmod(murmur3(key, 42), n)``; on the task index
itself that sent both tasks of a 2-task bolt to partition 1. kstorm partitions on a key per
task that lands in the task's own partition (``compiler.task_partition_keys``), and groups a
stateful or windowed stage on such keys, recorded with the checkpoint
(``compiler.recorded_task_keys``); the acker stage (at least once) likewise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kstorm import BaseStatefulBolt, Fields, TopologyBuilder
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.plan import compile_plan
from kstorm._spark.compiler import (
    PASS_THROUGH,
    _murmur3_int,
    pass_through_keys,
    recorded_task_keys,
    task_partition_keys,
    tws_task_keys,
)
from kstorm._spark.stage import task_of_key
from kstorm.errors import StateError
from kstorm.testing import CaptureSink, ListSpout


def test_murmur3_is_sparks_hash_of_an_int() -> None:
    # values of Spark 4.3's F.hash(F.lit(v)) and pmod(hash(t), 2 / 4) for t in 0..7
    assert _murmur3_int(123456789) == -598405280
    assert _murmur3_int(-7) == -1618159745
    assert [_murmur3_int(t) % 2 for t in range(8)] == [1, 1, 0, 1, 0, 0, 1, 1]
    assert [_murmur3_int(t) % 4 for t in range(8)] == [3, 3, 2, 3, 2, 2, 1, 3]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16, 64])
def test_every_task_has_a_partition_of_its_own(n: int) -> None:
    keys = task_partition_keys(n)
    assert [_murmur3_int(k) % n for k in keys] == list(range(n))


# -- stateful and windowed stages: groupBy(task key).transformWithState ------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16])
@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 8])
def test_stateful_task_keys_spread_tasks_evenly_and_give_the_task_back(n: int,
                                                                       partitions: int) -> None:
    keys = tws_task_keys(n, partitions)
    assert [task_of_key(k, n) for k in keys] == list(range(n))
    assert [_murmur3_int(k) % partitions for k in keys] == [t % partitions for t in range(n)]


def _plan(parallelism: int) -> tuple[object, object]:
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("word")))
    b.set_bolt("count", Count(), parallelism).fields_grouping("lines", Fields("word"))
    b.set_bolt("out", CaptureSink()).global_grouping("count")
    topology = b.create_topology()
    return topology, compile_plan(topology)


class Count(BaseStatefulBolt):
    def init_state(self, state: object) -> None:
        self.state = state

    def declare_output_fields(self, d: object) -> None:
        d.declare(Fields("word"))  # type: ignore[attr-defined]

    def execute(self, t: object) -> None:
        pass


def test_a_new_checkpoint_records_balanced_keys_and_keeps_them(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan(2)
    assert recorded_task_keys(layout, plan, topology, 2) == {"count": [2, 1]}
    assert layout.task_keys()["count"] == {"kind": "balanced", "partitions": 2, "keys": [2, 1],
                                           "inputs": {"lines:default":
                                                      "fields grouping of lines:default on "
                                                      "['word']"}}
    # Spark keeps the state under these keys: a later session with other partitions keeps them
    assert recorded_task_keys(layout, plan, topology, 4) == {"count": [2, 1]}


def test_a_checkpoint_that_ran_before_keys_were_recorded_keeps_the_task_index(
        tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    (layout.checkpoint / "offsets").mkdir(parents=True)
    (layout.checkpoint / "offsets" / "0").write_text("v1")  # Spark planned batch 0 before
    topology, plan = _plan(2)
    assert recorded_task_keys(layout, plan, topology, 2) == {"count": [0, 1]}
    assert layout.task_keys()["count"]["kind"] == "task"
    topology3, plan3 = _plan(3)  # another provider's bolt: a new parallelism, same kind of key
    assert recorded_task_keys(layout, plan3, topology3, 2, spark_state=False) == {
        "count": [0, 1, 2]}


def _ran_a_batch(layout: CheckpointLayout) -> None:
    (layout.checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (layout.checkpoint / "offsets" / "0").write_text("v1")


def test_a_changed_parallelism_with_state_in_the_checkpoint_is_refused(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan(2)
    recorded_task_keys(layout, plan, topology, 2)
    _ran_a_batch(layout)
    topology3, plan3 = _plan(3)
    with pytest.raises(StateError, match=r"'count' now runs 3 task\(s\).* for 2 task") as err:
        recorded_task_keys(layout, plan3, topology3, 2)
    assert "keep the bolt's parallelism at 2" in (err.value.hint or "")
    assert "new checkpoint directory" in (err.value.hint or "")
    assert "rescales (spark or redis provider)" in (err.value.hint or "")
    assert layout.task_keys()["count"]["keys"] == tws_task_keys(2, 2)  # the record is kept


def test_a_legacy_checkpoint_with_a_changed_parallelism_is_refused_once_recorded(
        tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    _ran_a_batch(layout)
    topology, plan = _plan(2)
    recorded_task_keys(layout, plan, topology, 2)  # recorded as the task index
    topology3, plan3 = _plan(3)
    with pytest.raises(StateError, match="now runs 3"):
        recorded_task_keys(layout, plan3, topology3, 2)


def test_a_changed_parallelism_before_any_batch_gets_keys_for_the_checkpoints_partitions(
        tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan(2)
    recorded_task_keys(layout, plan, topology, 2)
    topology4, plan4 = _plan(4)  # no batch planned yet: no state to lose
    assert recorded_task_keys(layout, plan4, topology4, 8) == {"count": tws_task_keys(4, 2)}
    assert layout.task_keys()["count"]["partitions"] == 2


def test_another_providers_changed_parallelism_gets_new_keys(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan(2)
    recorded_task_keys(layout, plan, topology, 2)
    _ran_a_batch(layout)
    topology4, plan4 = _plan(4)  # the provider holds the state and checks its parallelism
    assert recorded_task_keys(layout, plan4, topology4, 2, spark_state=False) == {
        "count": tws_task_keys(4, 2)}


def test_recorded_keys_that_do_not_give_one_key_per_task_are_refused(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    layout.set_task_keys({"count": {"kind": "balanced", "partitions": 2, "keys": [1, 1]}})
    topology, plan = _plan(2)
    with pytest.raises(StateError, match="not one per task"):
        recorded_task_keys(layout, plan, topology, 2)


@pytest.mark.parametrize("text", ["{not json", '{"count": {"kind": "balanced"}}', "[1, 2]",
                                  '{"count": {"kind": "balanced", "partitions": 2, '
                                  '"keys": ["x", 1]}}'])
def test_a_task_keys_file_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path,
                                                                    text: str) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    layout.root.mkdir(parents=True)
    layout.task_keys_path.write_text(text)
    topology, plan = _plan(2)
    with pytest.raises(StateError, match="task_keys.json cannot be read") as err:
        recorded_task_keys(layout, plan, topology, 2)
    assert "new checkpoint directory" in (err.value.hint or "")


@pytest.mark.parametrize("partitions", range(1, 9))
def test_pass_through_keys_are_negative_one_per_partition(partitions: int) -> None:
    keys = pass_through_keys(partitions)
    assert all(k < 0 for k in keys)
    assert [_murmur3_int(k) % partitions for k in keys] == list(range(partitions))


def test_a_new_checkpoint_spreads_its_ackers_and_records_them(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan(2)
    keys = recorded_task_keys(layout, plan, topology, 2, ackers=2)
    assert keys["__acker"] == tws_task_keys(2, 2)
    assert keys[PASS_THROUGH] == pass_through_keys(2)
    assert layout.task_keys()["__acker"] == {"kind": "balanced", "partitions": 2,
                                             "keys": tws_task_keys(2, 2)}
    _ran_a_batch(layout)  # the record is kept whatever the session's partitions
    assert recorded_task_keys(layout, plan, topology, 8, ackers=2) == keys


def test_ackers_of_a_checkpoint_that_ran_without_their_record_keep_the_task_index(
        tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan(2)
    recorded_task_keys(layout, plan, topology, 2)  # a run that recorded no acker keys
    _ran_a_batch(layout)
    keys = recorded_task_keys(layout, plan, topology, 2, ackers=2)
    assert keys["__acker"] == [0, 1]
    assert keys["count"] == tws_task_keys(2, 2)


def test_a_changed_acker_count_gets_new_keys_of_the_same_kind(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan(2)
    recorded_task_keys(layout, plan, topology, 2, ackers=1)
    _ran_a_batch(layout)  # pending trees of the old ackers time out and replay: no error
    assert recorded_task_keys(layout, plan, topology, 2, ackers=3)["__acker"] == \
        tws_task_keys(3, 2)


def _ran_then(tmp_path: Path, before: tuple[object, object], after: tuple[object, object]
              ) -> Callable[[], dict[str, list[int]]]:
    """A checkpoint that ran ``before``'s topology, and its keys for ``after``'s, to call."""
    layout = CheckpointLayout(tmp_path / "cp")
    recorded_task_keys(layout, before[1], before[0], 2)  # type: ignore[arg-type]
    _ran_a_batch(layout)
    return lambda: recorded_task_keys(layout, after[1], after[0], 2)  # type: ignore[arg-type]


def _plan_named(*names: str) -> tuple[object, object]:
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("word")))
    last = "lines"
    for name in names:
        b.set_bolt(name, Count(), 2).fields_grouping(last, Fields("word"))
        last = name
    b.set_bolt("out", CaptureSink()).global_grouping(last)
    topology = b.create_topology()
    return topology, compile_plan(topology)


@pytest.mark.parametrize(("before", "after", "said"), [
    (("count",), ("count", "again"), "['again'] not in the checkpoint"),
    (("count", "again"), ("count",), "['again'] in the checkpoint but not in the topology"),
    (("count",), ("counter",), "['counter'] not in the checkpoint; ['count'] in the"),
])
def test_stateful_bolts_added_removed_or_renamed_after_a_run_are_refused(
        tmp_path: Path, before: tuple[str, ...], after: tuple[str, ...], said: str) -> None:
    rerun = _ran_then(tmp_path, _plan_named(*before), _plan_named(*after))
    with pytest.raises(StateError, match="stateful and windowed bolts changed") as err:
        rerun()
    assert said in str(err.value)
    assert "new checkpoint directory" in (err.value.hint or "")


def test_stateful_bolts_may_change_before_the_first_batch(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    topology, plan = _plan_named("count")
    recorded_task_keys(layout, plan, topology, 2)
    topology, plan = _plan_named("count", "again")
    assert set(recorded_task_keys(layout, plan, topology, 2)) == {"count", "again"}


def _plan_grouped(grouping: str, *fields: str) -> tuple[object, object]:
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x", "y")]], Fields("word", "lang")))
    declarer = b.set_bolt("count", Count(), 2)
    if grouping == "fields":
        declarer.fields_grouping("lines", Fields(*fields))
    else:
        getattr(declarer, f"{grouping}_grouping")("lines")
    b.set_bolt("out", CaptureSink()).global_grouping("count")
    topology = b.create_topology()
    return topology, compile_plan(topology)


@pytest.mark.parametrize(("before", "after"), [
    (("fields", "word"), ("fields", "word", "lang")),
    (("fields", "word"), ("shuffle",)),
    (("global",), ("fields", "word")),
])
def test_a_stateful_bolts_keyed_grouping_changed_after_a_run_is_refused(
        tmp_path: Path, before: tuple[str, ...], after: tuple[str, ...]) -> None:
    rerun = _ran_then(tmp_path, _plan_grouped(*before), _plan_grouped(*after))
    with pytest.raises(StateError, match="input lines:default as a .* it is now a") as err:
        rerun()
    assert "keep the grouping" in (err.value.hint or "")


@pytest.mark.parametrize(("before", "after"), [
    (("shuffle",), ("fields", "word")),  # its state was per task, whatever the key
    (("fields", "word"), ("fields", "word")),
])
def test_groupings_that_keep_keys_with_their_state_are_accepted(
        tmp_path: Path, before: tuple[str, ...], after: tuple[str, ...]) -> None:
    assert _ran_then(tmp_path, _plan_grouped(*before), _plan_grouped(*after))() == {
        "count": [2, 1]}


def test_a_record_without_inputs_gets_them_and_is_checked_from_then_on(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    layout.set_task_keys({"count": {"kind": "balanced", "partitions": 2, "keys": [2, 1]}})
    _ran_a_batch(layout)
    topology, plan = _plan_grouped("fields", "word")
    recorded_task_keys(layout, plan, topology, 2)  # recorded before groupings were
    assert "lines:default" in layout.task_keys()["count"]["inputs"]
    topology, plan = _plan_grouped("fields", "lang")
    with pytest.raises(StateError, match="now a fields grouping of lines:default on"):
        recorded_task_keys(layout, plan, topology, 2)


def _state_schema(layout: CheckpointLayout, key_column: str) -> None:
    """A state schema file as Spark writes it for an operator grouped on ``key_column``."""
    folder = layout.checkpoint / "state" / "0" / "_stateSchema" / "default"
    folder.mkdir(parents=True)
    (folder / "0_schema").write_text(
        '{"type":"struct","fields":[{"name":"key","type":{"type":"struct","fields":[{"name":"'
        + key_column + '","type":"integer","nullable":true,"metadata":{}}]}}]}')


def test_a_lost_record_of_keys_the_state_is_kept_under_is_an_error(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    _ran_a_batch(layout)
    _state_schema(layout, "__task_key")  # Spark's state groups on recorded keys
    topology, plan = _plan(2)
    with pytest.raises(StateError, match="task_keys.json is missing") as err:
        recorded_task_keys(layout, plan, topology, 2)
    assert "restore the file" in (err.value.hint or "")
    assert layout.task_keys() is None  # nothing guessed, nothing written


def test_a_checkpoint_whose_state_groups_on_the_task_index_is_an_old_one(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path / "cp")
    _ran_a_batch(layout)
    _state_schema(layout, "__task")
    topology, plan = _plan(2)
    assert recorded_task_keys(layout, plan, topology, 2) == {"count": [0, 1]}
