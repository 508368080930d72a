"""Offset bookkeeping of the Kafka spout: batch ends, fair caps, read tasks, JSON form."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstorm._kafka.offsets import (
    OffsetRange,
    fair_share,
    from_json,
    group_ranges,
    plan_end,
    split_ranges,
    to_json,
)
from kstorm.errors import SourceError

A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)


def test_json_form_is_canonical_whatever_the_insertion_order():
    one = to_json({("b", 10): 1, ("b", 2): 2, ("a", 0): 3})
    other = to_json({("a", 0): 3, ("b", 2): 2, ("b", 10): 1})
    assert json.dumps(one) == json.dumps(other) == '{"a": {"0": 3}, "b": {"2": 2, "10": 1}}'
    assert from_json(one) == {("a", 0): 3, ("b", 2): 2, ("b", 10): 1}


def test_malformed_checkpoint_offsets_raise_source_error():
    with pytest.raises(SourceError, match="malformed offsets"):
        from_json({"a": {"zero": 1}})


def test_without_a_cap_the_batch_takes_everything():
    assert plan_end({A0: 3, A1: 0}, {A0: 10, A1: 4}, {}) == {A0: 10, A1: 4}


def test_cap_is_shared_fairly_and_unused_share_moves_on():
    end = plan_end({A0: 0, A1: 0, A2: 0}, {A0: 100, A1: 1, A2: 100}, {}, cap=11)
    assert end == {A0: 5, A1: 1, A2: 5}


def test_a_partition_never_goes_backwards():
    # The broker reports less than the checkpoint (e.g. a stale answer): keep the start.
    assert plan_end({A0: 50}, {A0: 20}, {}) == {A0: 50}


def test_new_partition_joins_with_an_empty_range_at_its_earliest_offset():
    end = plan_end({A0: 0}, {A0: 5, A1: 9}, {A1: 2})
    assert end == {A0: 5, A1: 2}
    assert [(r.topic, r.partition) for r in split_ranges({A0: 0}, end)] == [A0]
    # The next batch reads the new partition from the recorded offset.
    assert plan_end(end, {A0: 5, A1: 9}, {}) == {A0: 5, A1: 9}


def test_available_now_target_bounds_the_batch_and_excludes_later_partitions():
    target = {A0: 8}
    end = plan_end({A0: 0}, {A0: 20, A1: 5}, {A1: 0}, cap=None, target=target)
    assert end == {A0: 8}


def test_ranges_are_split_into_tasks_and_empty_ranges_skipped():
    ranges = split_ranges({A0: 0, A1: 4}, {A0: 5, A1: 4}, max_per_task=2)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 2), (0, 2, 4), (0, 4, 5)]


@given(
    available=st.dictionaries(st.integers(0, 20), st.integers(0, 1000), max_size=12),
    cap=st.integers(0, 5000),
)
def test_fair_share_never_exceeds_cap_or_availability_and_uses_what_it_can(available, cap):
    shares = fair_share({("t", p): n for p, n in available.items()}, cap)
    assert all(0 <= shares[("t", p)] <= n for p, n in available.items())
    assert sum(shares.values()) == min(cap, sum(available.values()))
    # Max-min fairness: a partition that got less than it wanted got at least anyone else - 1.
    starved = [shares[("t", p)] for p, n in available.items() if shares[("t", p)] < n]
    if starved:
        assert max(shares.values()) - min(starved) <= 1


def test_short_ranges_are_packed_into_read_tasks_of_a_minimum_size() -> None:
    def sizes(groups: list[list[OffsetRange]]) -> list[list[int]]:
        return [[r.end - r.start for r in g] for g in groups]

    five = [OffsetRange("t", p, 0, 5_000) for p in range(4)]
    assert sizes(group_ranges(five, 10_000)) == [[5_000, 5_000], [5_000, 5_000]]
    big = [OffsetRange("t", p, 0, 25_000) for p in range(4)]
    assert sizes(group_ranges(big, 10_000)) == [[25_000]] * 4  # long ranges: one task each
    mixed = [OffsetRange("t", 0, 0, 1), OffsetRange("t", 1, 0, 30_000), OffsetRange("t", 2, 0, 3)]
    assert sizes(group_ranges(mixed, 10_000)) == [[1, 30_000], [3]]
    assert group_ranges([], 10_000) == []
    # every range once, in order: a replay of the batch groups the same way
    assert [r for g in group_ranges(mixed, 10_000) for r in g] == mixed
