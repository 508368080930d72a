"""The values that travel between spouts, bolts and ackers.

* :class:`MessageId` rides on every tuple: for each spout tuple tree the tuple
  belongs to, the tuple's id within that tree (Storm's ``anchorsToIds``).
* :class:`AckerMessage` goes from a spout or bolt to the acker owning a root
  (Storm's ``__ack_init``, ``__ack_ack`` and ``__ack_fail`` streams, folded into
  one row shape so that messages for the same root can be combined before they
  reach the acker).
* :class:`AckerEvent` goes from an acker back to the spout task that owns a
  root: the tree was fully processed, failed, or timed out.

Example:
    >>> AckerMessage.init(10, spout_task=1, init_val=10).combine(AckerMessage.ack(10, 10))
    AckerMessage(root_id=10, xor=0, spout_task=1, failed=False)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from kstorm.acking.ids import MAX_ID, MIN_ID, check_id
from kstorm.errors import KstormError


@dataclass(frozen=True, slots=True)
class MessageId:
    """Which tuple trees a tuple belongs to, and its id inside each of them.

    Args:
        anchors_to_ids: ``root_id -> id``; the id is the XOR of the edge ids that
            link the tuple to its anchors in that tree. Empty means unanchored
            (not tracked).

    Example:
        >>> MessageId({7: 3}).roots
        (7,)
        >>> MessageId().is_anchored
        False
    """

    anchors_to_ids: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checked = {}
        for root_id, tuple_id in self.anchors_to_ids.items():
            check_id(root_id, "root id")
            if isinstance(tuple_id, bool) or not isinstance(tuple_id, int):
                msg = f"id of a tuple in tree {root_id} must be an int, got {tuple_id!r}"
                raise KstormError(msg)
            if not MIN_ID <= tuple_id <= MAX_ID:
                msg = f"id of a tuple in tree {root_id} must be signed 64-bit, got {tuple_id}"
                raise KstormError(msg)
            checked[root_id] = tuple_id
        object.__setattr__(self, "anchors_to_ids", checked)

    @property
    def roots(self) -> tuple[int, ...]:
        """Ids of the spout tuple trees this tuple belongs to."""
        return tuple(self.anchors_to_ids)

    @property
    def is_anchored(self) -> bool:
        """Whether acking or failing this tuple affects any spout tuple."""
        return bool(self.anchors_to_ids)

    def items(self) -> Iterator[tuple[int, int]]:
        """Iterate ``(root_id, tuple id in that tree)`` pairs."""
        return iter(self.anchors_to_ids.items())

    def __hash__(self) -> int:
        return hash(frozenset(self.anchors_to_ids.items()))


class AckerMessage(NamedTuple):
    """One update for the acker that owns ``root_id``; plain row-shaped data.

    Messages for the same root combine associatively and commutatively
    (:meth:`combine`), so a batch of them can be pre-aggregated per root, in any
    order, before reaching the acker: XOR the vals, keep the known spout task,
    OR the failed flags.

    Attributes:
        root_id: Id of the spout tuple tree.
        xor: Value to XOR into the tree's ack val.
        spout_task: Task that emitted the spout tuple (only the init message knows).
        failed: Whether a tuple of the tree was failed.
    """

    root_id: int
    xor: int
    spout_task: int | None = None
    failed: bool = False

    @classmethod
    def init(cls, root_id: int, spout_task: int, init_val: int) -> AckerMessage:
        """Spout emitted a tracked tuple: start tracking ``root_id`` for ``spout_task``."""
        if isinstance(spout_task, bool) or not isinstance(spout_task, int) or spout_task < 0:
            msg = f"spout task of tree {root_id} must be an int >= 0, got {spout_task!r}"
            raise KstormError(msg)
        return cls(root_id, init_val, spout_task, False)

    @classmethod
    def ack(cls, root_id: int, xor: int) -> AckerMessage:
        """A tuple of the tree was acked: XOR its id and its new children's ids."""
        return cls(root_id, xor, None, False)

    @classmethod
    def fail(cls, root_id: int) -> AckerMessage:
        """A tuple of the tree was failed: the whole tree fails."""
        return cls(root_id, 0, None, True)

    def combine(self, other: AckerMessage) -> AckerMessage:
        """Fold two messages for the same root into one with the same effect."""
        if other.root_id != self.root_id:
            msg = f"cannot combine acker messages of trees {self.root_id} and {other.root_id}"
            raise KstormError(msg)
        task = self.spout_task if self.spout_task is not None else other.spout_task
        return AckerMessage(self.root_id, self.xor ^ other.xor, task, self.failed or other.failed)


class Outcome(StrEnum):
    """How a spout tuple tree ended."""

    ACKED = "acked"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


class AckerEvent(NamedTuple):
    """Acker -> spout task: the tree ``root_id`` ended with ``outcome``.

    Attributes:
        spout_task: Task that emitted the spout tuple; route the event there.
        root_id: Id of the spout tuple tree.
        outcome: Acked (fully processed), failed, or timed out.
        elapsed_ms: Time since the acker first heard of the tree.
    """

    spout_task: int
    root_id: int
    outcome: Outcome
    elapsed_ms: int
