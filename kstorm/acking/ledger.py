"""The acker: a constant-size XOR ledger per spout tuple tree (Storm's ``Acker``).

For every root id the acker keeps one :class:`AckerEntry`: the spout task to
notify, the *ack val* (XOR of every tuple id created and/or acked in the tree),
when the acker first heard of the tree, and whether a tuple failed. The entry
has the same size whether the tree has ten tuples or a million.

Processing one :class:`AckerMessage` for ``root_id``:

1. Merge it into the entry (create the entry if this is the first message;
   an ack may arrive before the spout's init).
2. If the spout task is still unknown, wait for the init.
3. If a tuple failed, drop the entry and report ``FAILED`` to the spout task.
4. If the ack val is 0, drop the entry and report ``ACKED``: every tuple id
   was XORed in twice, once when created and once when acked.

Entries and messages are commutative monoids (XOR, first known task, OR of
failed, min of first-seen time), so the ledger can also run as a keyed reduce
over root ids: combine a batch's messages per root, :meth:`AckerEntry.merge`
them into the stored entry, then :func:`settle` it.

Example:
    >>> ledger = AckerLedger()
    >>> ledger.ack(10, 0b0110, now_ms=0) is None  # ack before init: waits
    True
    >>> ledger.init(10, spout_task=1, init_val=0b0110, now_ms=5)
    AckerEvent(spout_task=1, root_id=10, outcome=<Outcome.ACKED: 'acked'>, elapsed_ms=5)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from kstorm.acking.messages import AckerEvent, AckerMessage, Outcome

SnapshotRow = tuple[int, int | None, int, int, bool]
"""``(root_id, spout_task, ack_val, created_at_ms, failed)``."""


class AckerEntry(NamedTuple):
    """State of one pending tree; also the partial state of a keyed reduce.

    A NamedTuple rather than a dataclass: it is created on every ack, is a row
    for Spark as it stands, and is ~70 bytes.

    Attributes:
        spout_task: Task to notify; ``None`` until the spout's init arrives.
        ack_val: XOR of the ids created and/or acked so far.
        created_at_ms: When the acker first heard of the tree.
        failed: Whether a tuple of the tree was failed.
    """

    spout_task: int | None
    ack_val: int
    created_at_ms: int
    failed: bool

    @classmethod
    def of(cls, message: AckerMessage, now_ms: int) -> AckerEntry:
        """The partial state holding one message received at ``now_ms``."""
        return cls(message.spout_task, message.xor, now_ms, message.failed)

    def merge(self, other: AckerEntry) -> AckerEntry:
        """Combine two partial states of the same tree (order does not matter)."""
        return AckerEntry(
            self.spout_task if self.spout_task is not None else other.spout_task,
            self.ack_val ^ other.ack_val,
            min(self.created_at_ms, other.created_at_ms),
            self.failed or other.failed,
        )


def settle(root_id: int, entry: AckerEntry, now_ms: int) -> AckerEvent | None:
    """Steps 2-4: the event to send if the tree ``root_id`` has ended, else ``None``.

    A failure wins over a zero ack val (Storm only reaches both when a tuple is
    acked *and* failed, which :class:`AnchorTracker` prevents).
    """
    if entry.spout_task is None:
        return None
    if entry.failed:
        outcome = Outcome.FAILED
    elif entry.ack_val == 0:
        outcome = Outcome.ACKED
    else:
        return None
    return AckerEvent(entry.spout_task, root_id, outcome, now_ms - entry.created_at_ms)


class AckerLedger:
    """The pending trees of one acker task, keyed by root id.

    Time is passed in (``now_ms``); nothing here reads a clock. Expiry assumes
    ``now_ms`` does not go backwards between calls; if it does, entries are only
    expired later, never earlier.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, AckerEntry] = {}

    def init(self, root_id: int, spout_task: int, init_val: int, now_ms: int) -> AckerEvent | None:
        """The spout emitted ``root_id``: XOR in ``init_val`` and remember the spout task."""
        return self.apply(AckerMessage.init(root_id, spout_task, init_val), now_ms)

    def ack(self, root_id: int, xor_val: int, now_ms: int) -> AckerEvent | None:
        """A tuple of ``root_id`` was acked: XOR in ``xor_val``."""
        return self.apply(AckerMessage.ack(root_id, xor_val), now_ms)

    def fail(self, root_id: int, now_ms: int) -> AckerEvent | None:
        """A tuple of ``root_id`` was failed."""
        return self.apply(AckerMessage.fail(root_id), now_ms)

    def apply(self, message: AckerMessage, now_ms: int) -> AckerEvent | None:
        """Process one message (steps 1-4); O(1)."""
        return self.merge_entry(message.root_id, AckerEntry.of(message, now_ms), now_ms)

    def apply_all(self, messages: Iterable[AckerMessage], now_ms: int) -> list[AckerEvent]:
        """Process messages in order; return the events they caused."""
        events = []
        for message in messages:
            event = self.apply(message, now_ms)
            if event is not None:
                events.append(event)
        return events

    def merge_entry(self, root_id: int, partial: AckerEntry, now_ms: int) -> AckerEvent | None:
        """Merge a partial state (e.g. a pre-combined batch of messages) into ``root_id``."""
        current = self._entries.get(root_id)
        entry = partial if current is None else current.merge(partial)
        event = settle(root_id, entry, now_ms)
        if event is None:
            self._entries[root_id] = entry
        elif current is not None:
            del self._entries[root_id]
        return event

    def merge(self, partials: Mapping[int, AckerEntry], now_ms: int) -> list[AckerEvent]:
        """Merge per-root partial states (the reduce side of a keyed aggregation)."""
        events = []
        for root_id, partial in partials.items():
            event = self.merge_entry(root_id, partial, now_ms)
            if event is not None:
                events.append(event)
        return events

    def expire(self, now_ms: int, timeout_ms: int) -> list[AckerEvent]:
        """Drop trees first seen ``timeout_ms`` or longer ago.

        Returns:
            ``TIMED_OUT`` events for the dropped trees whose spout task is known.
            Trees never initialised (acks for a tree that already ended, or whose
            init was lost) are dropped silently, as Storm's acker does.
        """
        cutoff = now_ms - timeout_ms
        expired = []
        for root_id, entry in self._entries.items():
            if entry.created_at_ms > cutoff:
                break  # entries are in first-seen order
            expired.append(root_id)
        events = []
        for root_id in expired:
            entry = self._entries.pop(root_id)
            if entry.spout_task is not None:
                elapsed = now_ms - entry.created_at_ms
                events.append(AckerEvent(entry.spout_task, root_id, Outcome.TIMED_OUT, elapsed))
        return events

    def get(self, root_id: int) -> AckerEntry | None:
        """The pending entry for ``root_id``, or ``None`` if not pending."""
        return self._entries.get(root_id)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, root_id: object) -> bool:
        return root_id in self._entries

    def snapshot(self) -> list[SnapshotRow]:
        """Plain rows ``(root_id, spout_task, ack_val, created_at_ms, failed)``, in order."""
        return [(root_id, *entry) for root_id, entry in self._entries.items()]

    @classmethod
    def restore(cls, rows: Iterable[SnapshotRow]) -> AckerLedger:
        """Rebuild a ledger from :meth:`snapshot` rows."""
        ledger = cls()
        for root_id, spout_task, ack_val, created_at_ms, failed in rows:
            ledger._entries[root_id] = AckerEntry(spout_task, ack_val, created_at_ms, failed)
        return ledger


def combine_messages(messages: Iterable[AckerMessage], now_ms: int) -> dict[int, AckerEntry]:
    """Pre-aggregate messages per root (the map side of a keyed reduce).

    Example:
        >>> msgs = [AckerMessage.init(4, 0, 9), AckerMessage.ack(4, 9)]
        >>> combine_messages(msgs, now_ms=1)[4].ack_val
        0
    """
    partials: dict[int, AckerEntry] = {}
    for message in messages:
        entry = AckerEntry.of(message, now_ms)
        current = partials.get(message.root_id)
        partials[message.root_id] = entry if current is None else current.merge(entry)
    return partials
