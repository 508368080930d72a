"""Tuple ids: random signed 64-bit, never 0, the same on replay; acker routing by mod hash."""

import doctest
import importlib
import random
from collections import Counter

import pytest

from kstorm.acking import MAX_ID, MIN_ID, MessageId, TupleIdGenerator, acker_for, seed_for
from kstorm.errors import ConfigError, KstormError


def test_replayed_batch_assigns_the_same_ids():
    first = TupleIdGenerator.for_task(12, partition=3, task="split:1")
    again = TupleIdGenerator.for_task(12, partition=3, task="split:1")
    assert [first.next_id() for _ in range(100)] == [again.next_id() for _ in range(100)]


@pytest.mark.parametrize(
    "other", [(13, 3, "split:1"), (12, 4, "split:1"), (12, 3, "split:2"), (12, 3, 1)]
)
def test_other_batch_partition_or_task_assigns_other_ids(other):
    ids = TupleIdGenerator.for_task(12, 3, "split:1")
    assert TupleIdGenerator.for_task(*other).next_id() != ids.next_id()
    assert seed_for(*other) != seed_for(12, 3, "split:1")


def test_ids_cover_the_signed_64_bit_range_and_never_0():
    ids = TupleIdGenerator(99)
    values = [ids.next_id() for _ in range(20_000)]
    assert all(MIN_ID <= v <= MAX_ID and v != 0 for v in values)
    assert min(values) < -(2**62) and max(values) > 2**62  # both signs, full width
    assert len(set(values)) == len(values)


def test_a_zero_draw_is_skipped():
    ids = TupleIdGenerator(0)
    draws = iter([0, 0, 5])
    ids._rng = type("Rng", (), {"getrandbits": lambda self, n: next(draws)})()
    assert ids.next_id() == 5


def test_acker_for_is_a_floor_mod_spreading_roots_evenly():
    assert [acker_for(r, 3) for r in (0, 1, 2, 3, -1, -3, MIN_ID)] == [0, 1, 2, 0, 2, 0, 1]
    ids = TupleIdGenerator(5)
    counts = Counter(acker_for(ids.next_id(), 4) for _ in range(8_000))
    assert sorted(counts) == [0, 1, 2, 3]
    assert all(1_700 < c < 2_300 for c in counts.values())


@pytest.mark.parametrize("n_ackers", [0, -2, 1.5, True])
def test_acker_for_rejects_a_bad_acker_count(n_ackers):
    with pytest.raises(ConfigError, match=r"topology\.acker\.executors"):
        acker_for(10, n_ackers)


def test_xor_of_ids_stays_in_spark_long_range():
    rng = random.Random(1)
    for _ in range(1_000):
        a, b = rng.randint(MIN_ID, MAX_ID), rng.randint(MIN_ID, MAX_ID)
        assert MIN_ID <= a ^ b <= MAX_ID


@pytest.mark.parametrize(
    ("anchors", "match"),
    [({0: 5}, "non-zero"), ({2**63: 5}, "signed 64-bit"), ({7: 2**64}, "signed 64-bit")],
)
def test_message_id_rejects_values_outside_the_id_space(anchors, match):
    with pytest.raises(KstormError, match=match):
        MessageId(anchors)


@pytest.mark.parametrize(
    "module",
    ["anchoring", "decisions", "ids", "ledger", "messages", "offsets", "retry", "spout_tracker"],
)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(f"kstorm.acking.{module}"))
    assert result.attempted > 0 and result.failed == 0
