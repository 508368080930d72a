"""Free-form spouts (``BaseRichSpout.next_tuple``) on real Spark: batches, acks, errors."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from spouts import (
    Explode,
    FlakySpout,
    NumberSpout,
    Record,
    WrongAritySpout,
    acked,
    recorded_batches,
)

from kstorm import Fields, TopologyBuilder
from kstorm._runtime.checkpoint import KEEP_BATCHES
from kstorm.errors import KstormError
from kstorm.testing import CaptureSink, run_to_completion

pytestmark = pytest.mark.integration


def conf(tmp_path: Path, **extra: object) -> dict[str, object]:
    return {"kstorm.checkpoint.dir": str(tmp_path / "cp"), "kstorm.spark.master": "local[2]",
            "kstorm.shuffle.partitions": 2, **extra}


def test_generator_spout_every_tuple_once_and_acked(spark, tmp_path: Path) -> None:
    n = 230
    b = TopologyBuilder()
    b.set_spout("numbers", NumberSpout(n, str(tmp_path), per_call=5, odd_stream=True), 2)
    b.set_bolt("record", Record(str(tmp_path)), 2).fields_grouping("numbers", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("record")
    b.set_bolt("odd", CaptureSink()).shuffle_grouping("numbers", "odd")
    result = run_to_completion(b.create_topology(),
                               conf(tmp_path, **{"kstorm.spout.max.batch.tuples": 50}))
    out = result.sinks["out"]
    assert sorted(v[0] for v in out.values) == list(range(n))  # each once, none lost
    assert all(key == m % 7 for m, key in out.values)
    assert sorted(v[0] for v in result.sinks["odd"].values) == list(range(1, n, 2))
    assert len(out.batches) >= n // 50  # bounded batches (a call emits at most 5 more)
    assert Counter(acked(tmp_path)) == Counter(range(n))  # every tracked tuple acked once
    # the fields grouping: each bolt task of a batch saw whole keys, both tasks had work
    keys_of_task: dict[int, set[int]] = {0: set(), 1: set()}
    for _, _, task, numbers in recorded_batches(tmp_path):
        keys_of_task[task].update(m % 7 for m in numbers)
    assert keys_of_task[0] and keys_of_task[1] and not keys_of_task[0] & keys_of_task[1]
    logs = sorted(p.name for p in (tmp_path / "cp" / "kstorm" / "spouts" / "numbers").iterdir())
    kept = [int(p) for p in logs if p.isdigit()]  # old logs pruned: the last KEEP_BATCHES
    assert "acked" in logs and kept and len(kept) <= KEEP_BATCHES + 1


def test_next_tuple_raising_ends_the_batch_and_the_run_goes_on(spark, tmp_path: Path) -> None:
    b = TopologyBuilder()
    b.set_spout("flaky", FlakySpout(40, str(tmp_path), fail_calls={10, 25, 26}))
    b.set_bolt("record", Record(str(tmp_path))).shuffle_grouping("flaky")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("record")
    result = run_to_completion(b.create_topology(), conf(tmp_path))
    assert sorted(v[0] for v in result.sinks["out"].values) == list(range(40))
    assert sorted(set(acked(tmp_path))) == list(range(40))
    # the failing calls cut batches: numbers 0..9 are one batch, the next starts at 10
    first = min(result.sinks["out"].batches)
    assert [t.values[0] for t in result.sinks["out"].batches[first]] == list(range(10))


def test_next_tuple_always_raising_fails_the_query(spark, tmp_path: Path) -> None:
    b = TopologyBuilder()
    b.set_spout("down", FlakySpout(10, str(tmp_path), always_fail=True))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("down")
    with pytest.raises(KstormError) as info:
        run_to_completion(b.create_topology(), conf(tmp_path), timeout=120)
    text = str(info.value)
    assert "spout 'down'" in text and "raised 3 times in a row" in text
    assert "upstream API unavailable" in text


def test_wrong_arity_names_spout_and_stream(spark, tmp_path: Path) -> None:
    b = TopologyBuilder()
    b.set_spout("bad", WrongAritySpout())
    b.set_bolt("out", CaptureSink()).shuffle_grouping("bad")
    with pytest.raises(KstormError) as info:
        run_to_completion(b.create_topology(), conf(tmp_path), timeout=120)
    text = str(info.value)
    assert "spout 'bad' emitted 2 values on stream 'default'" in text
    assert "['n']" in text


@pytest.mark.parametrize(("guarantee", "acked_ids"), [
    ("exactly-once", set(range(5))),    # batch 0 committed; batch 1 (5..9) failed
    ("at-least-once", set(range(5))),   # the same: acks come with the batch's commit
    ("at-most-once", set(range(10))),   # acked once logged, before batch 1 ran
])
def test_acks_follow_the_guarantee(spark, tmp_path: Path, guarantee: str,
                                   acked_ids: set[int]) -> None:
    b = TopologyBuilder()
    b.set_spout("numbers", NumberSpout(20, str(tmp_path), per_call=1))
    b.set_bolt("explode", Explode(7)).shuffle_grouping("numbers")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("explode")
    settings = conf(tmp_path, **{"kstorm.spout.max.batch.tuples": 5,
                                 "kstorm.bolt.error.policy": "fail",
                                 "topology.guarantee": guarantee})
    with pytest.raises(KstormError) as info:
        run_to_completion(b.create_topology(), settings, timeout=120)
    assert "cannot take 7" in str(info.value.__cause__)
    assert set(acked(tmp_path)) == acked_ids
