"""The Kafka offset a consumer group may commit under at-least-once.

A partition's committable offset is its lowest *outstanding* offset (emitted and
not yet acked: in flight, or waiting for a retry), or, when none is
outstanding, one past the highest offset emitted. Committing it never skips an
un-acked record, so after a crash every un-acked record is read again.

Per-operation cost is O(log n) amortized (a heap with lazy deletion).

Example:
    >>> offsets = OffsetTracker()
    >>> for o in (5, 6, 7):
    ...     offsets.emitted(("t", 0), o)
    >>> offsets.done(("t", 0), 6)
    >>> offsets.committable(("t", 0))
    5
    >>> offsets.done(("t", 0), 5)
    >>> offsets.committable(("t", 0))
    7
"""

from __future__ import annotations

import heapq
from typing import Any, NamedTuple

from kstorm.errors import KstormError

TopicPartition = tuple[str, int]


class KafkaMessageId(NamedTuple):
    """Message id of a Kafka spout tuple: where the record came from."""

    topic: str
    partition: int
    offset: int

    @property
    def topic_partition(self) -> TopicPartition:
        """``(topic, partition)``."""
        return (self.topic, self.partition)


LIST_TOPIC = "@list"
"""The topic of ``ListSpout`` rows in the Kafka id space (``@``: never a Kafka topic name).

A list spout's row ``i`` of batch ``b`` (message id ``"b:i"``) is tracked as offset ``i`` of
partition ``b``: its retries, root ids, acker messages and book are a Kafka record's.
"""


def list_message_id(batch: int, row: int) -> str:
    """The message id of a ``ListSpout``'s row ``row`` of batch ``batch``.

    Example:
        >>> list_message_id(2, 5), list_position("2:5")
        ('2:5', KafkaMessageId(topic='@list', partition=2, offset=5))
    """
    return f"{batch}:{row}"


def list_position(msg_id: str) -> KafkaMessageId:
    """Where a ``ListSpout`` row's message id ``"b:i"`` sits in the Kafka id space."""
    batch, _, row = msg_id.partition(":")
    return KafkaMessageId(LIST_TOPIC, int(batch), int(row))


def spout_message_id(msg_id: KafkaMessageId) -> Any:
    """The message id a spout's ``ack``/``fail`` receive: ``"b:i"`` for a list row."""
    if msg_id.topic == LIST_TOPIC:
        return list_message_id(msg_id.partition, msg_id.offset)
    return msg_id


class _PartitionOffsets:
    __slots__ = ("heap", "next_offset", "outstanding")

    def __init__(self) -> None:
        self.outstanding: set[int] = set()
        self.heap: list[int] = []
        self.next_offset = 0

    def lowest(self) -> int:
        heap, outstanding = self.heap, self.outstanding
        while heap and heap[0] not in outstanding:
            heapq.heappop(heap)
        return heap[0] if heap else self.next_offset


class OffsetTracker:
    """Outstanding offsets per topic-partition."""

    __slots__ = ("_partitions",)

    def __init__(self) -> None:
        self._partitions: dict[TopicPartition, _PartitionOffsets] = {}

    def emitted(self, tp: TopicPartition, offset: int) -> None:
        """Record that ``offset`` of ``tp`` was emitted (a replay of an outstanding one is a no-op).

        Raises:
            KstormError: If ``offset`` is below the committable offset and not
                outstanding: it was already acked, so committing could skip it.
        """
        part = self._partitions.get(tp)
        if part is None:
            part = self._partitions[tp] = _PartitionOffsets()
            part.next_offset = offset
        if offset in part.outstanding:
            return
        if offset < part.lowest():
            msg = (
                f"offset {offset} of {tp[0]}[{tp[1]}] was emitted again after it was acked "
                f"(committable offset is {part.lowest()}); restore the spout tracker from "
                f"the snapshot of the batch being replayed"
            )
            raise KstormError(msg)
        part.outstanding.add(offset)
        heapq.heappush(part.heap, offset)
        part.next_offset = max(part.next_offset, offset + 1)

    def done(self, tp: TopicPartition, offset: int) -> None:
        """``offset`` of ``tp`` was acked (or dead-lettered); unknown offsets are ignored."""
        part = self._partitions.get(tp)
        if part is not None:
            part.outstanding.discard(offset)

    def is_outstanding(self, tp: TopicPartition, offset: int) -> bool:
        """Whether ``offset`` of ``tp`` was emitted and not yet acked."""
        part = self._partitions.get(tp)
        return part is not None and offset in part.outstanding

    def committable(self, tp: TopicPartition) -> int | None:
        """Offset the group may commit for ``tp`` (``None`` if nothing was emitted there)."""
        part = self._partitions.get(tp)
        return None if part is None else part.lowest()

    def lowest_outstanding(self) -> dict[TopicPartition, int]:
        """Per partition with un-acked offsets: the lowest of them."""
        out = {}
        for tp, part in self._partitions.items():
            if part.outstanding:
                out[tp] = part.lowest()
        return out

    def committable_offsets(self) -> dict[TopicPartition, int]:
        """Committable offset of every partition seen."""
        return {tp: part.lowest() for tp, part in self._partitions.items()}

    def snapshot(self) -> dict[TopicPartition, tuple[int, list[int]]]:
        """Plain data: ``tp -> (next offset, sorted outstanding offsets)``."""
        return {
            tp: (part.next_offset, sorted(part.outstanding))
            for tp, part in self._partitions.items()
        }

    @classmethod
    def restore(cls, data: dict[TopicPartition, tuple[int, list[int]]]) -> OffsetTracker:
        """Rebuild from :meth:`snapshot`'s output."""
        tracker = cls()
        for tp, (next_offset, outstanding) in data.items():
            part = tracker._partitions[tp] = _PartitionOffsets()
            part.next_offset = next_offset
            part.outstanding = set(outstanding)
            part.heap = sorted(outstanding)
        return tracker
