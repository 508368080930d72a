"""Offset bookkeeping of the Kafka spout: pure functions, no Kafka client, no Spark.

A batch of the spout is a map ``(topic, partition) -> next offset`` (end exclusive). Spark
stores it in its offset log as JSON ``{topic: {"partition": offset}}`` *before* the batch
runs, so a replay of the batch reads the identical records (seed 002: "the same batch for the
same txid"). These functions decide the end of the next batch from the start, the confirmed
end offsets of the partitions and the read limit, and split a batch into read tasks.

Example:
    >>> start = {("t", 0): 0, ("t", 1): 0}
    >>> plan_end(start, latest={("t", 0): 10, ("t", 1): 2}, earliest={}, cap=6)
    {('t', 0): 4, ('t', 1): 2}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kstorm._kafka.clocks import MARK_PREFIX
from kstorm.errors import SourceError

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """The records ``[start, end)`` of one topic-partition: one read task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """Number of offsets in the range."""
        return self.end - self.start


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Canonical JSON form: topics and partitions sorted, so equal maps serialize equally.

    Example:
        >>> to_json({("b", 10): 5, ("b", 2): 1, ("a", 0): 0})
        {'a': {'0': 0}, 'b': {'2': 1, '10': 5}}
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json(data: Mapping[str, Any]) -> Offsets:
    """Parse the JSON form back; raises :class:`SourceError` on a malformed offset.

    Example:
        >>> from_json({"a": {"0": 3}})
        {('a', 0): 3}
    """
    try:
        return {
            (str(topic), int(partition)): int(offset)
            for topic, partitions in data.items()
            if not topic.startswith(MARK_PREFIX)
            for partition, offset in partitions.items()
        }
    except (AttributeError, TypeError, ValueError) as exc:
        msg = (
            f"kafka spout: malformed offsets in the checkpoint: expected "
            f'{{topic: {{"partition": offset}}}}, got {data!r}'
        )
        raise SourceError(msg) from exc


def fair_share(available: Mapping[TopicPartition, int], cap: int) -> Offsets:
    """Split ``cap`` records over partitions, max-min fair and deterministic.

    Every partition gets an equal share; a partition with less available gives its unused
    share to the others. A remainder goes to partitions in sorted order.

    Example:
        >>> fair_share({("t", 0): 100, ("t", 1): 2, ("t", 2): 100}, cap=10)
        {('t', 0): 4, ('t', 1): 2, ('t', 2): 4}
    """
    wanting = sorted((n, tp) for tp, n in available.items() if n > 0)
    shares: Offsets = {tp: 0 for tp in available}
    budget = max(0, cap)
    while wanting and budget > 0:
        each, rest = divmod(budget, len(wanting))
        smallest, _ = wanting[0]
        if smallest <= each:  # the smallest fits entirely: serve it and share again
            _, tp = wanting.pop(0)
            shares[tp] = smallest
            budget -= smallest
            continue
        for i, (_, tp) in enumerate(sorted(wanting, key=lambda item: item[1])):
            shares[tp] = each + (1 if i < rest else 0)
        budget = 0
    return shares


def plan_end(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
    cap: int | None = None,
    target: Mapping[TopicPartition, int] | None = None,
) -> Offsets:
    """The end offsets of the next batch.

    Args:
        start: where the batch starts (the previous batch's end).
        latest: confirmed end offsets of the partitions (missing: nothing new).
        earliest: first offsets of partitions not yet in ``start``; such a partition joins
            with an empty range at its earliest offset, so its first records are read by the
            next batch from an offset fixed in the offset log (deterministic replay).
        cap: at most this many records in the batch (``None``: all available).
        target: for ``Trigger.AvailableNow``: never go past these offsets, and add no
            partition outside them.

    Example:
        >>> plan_end({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {("t", 1): 0})
        {('t', 0): 9, ('t', 1): 0}
    """
    limit: dict[TopicPartition, int] = {}
    for tp, begin in start.items():
        upper = latest.get(tp, begin)
        if target is not None:
            upper = min(upper, target.get(tp, begin))
        limit[tp] = max(0, upper - begin)
    take = limit if cap is None else fair_share(limit, cap)
    end = {tp: begin + take[tp] for tp, begin in start.items()}
    for tp, first in earliest.items():
        if tp not in end and (target is None or tp in target):
            end[tp] = first
    return end


def split_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    max_per_task: int | None = None,
) -> list[OffsetRange]:
    """The non-empty ranges of a batch, each at most ``max_per_task`` offsets long.

    A partition missing from ``start`` contributes nothing (it joined with an empty range).

    Example:
        >>> [(r.start, r.end) for r in split_ranges({("t", 0): 0}, {("t", 0): 5}, 2)]
        [(0, 2), (2, 4), (4, 5)]
    """
    ranges: list[OffsetRange] = []
    for (topic, partition), stop in sorted(end.items()):
        begin = start.get((topic, partition), stop)
        step = max_per_task or max(stop - begin, 1)
        for lo in range(begin, stop, step):
            ranges.append(OffsetRange(topic, partition, lo, min(lo + step, stop)))
    return ranges


def group_ranges(ranges: Sequence[OffsetRange], min_offsets: int) -> list[list[OffsetRange]]:
    """``ranges`` in order, packed into groups of at least ``min_offsets`` offsets.

    A group closes once it holds ``min_offsets`` offsets or more, so a range as long as that
    is a group of its own; the last group may hold fewer. The grouping depends only on the
    ranges, so a replayed batch groups the same way.

    Example:
        >>> rs = [OffsetRange("t", p, 0, 5) for p in range(4)]
        >>> [[r.partition for r in g] for g in group_ranges(rs, 10)]
        [[0, 1], [2, 3]]
    """
    groups: list[list[OffsetRange]] = []
    size = min_offsets
    for r in ranges:
        if size >= min_offsets:
            groups.append([])
            size = 0
        groups[-1].append(r)
        size += r.end - r.start
    return groups
