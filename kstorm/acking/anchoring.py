"""Anchoring bookkeeping on the emitting side (Storm's output collectors).

Mirrors Storm 2.x ``SpoutOutputCollectorImpl.sendSpoutMsg`` and
``BoltOutputCollectorImpl.boltEmit/ack/fail``:

1. A spout emitting a tracked tuple draws a root id and one tuple id per
   target task, and tells the root's acker ``init(root, task, XOR of the ids)``.
2. A bolt emitting a tuple anchored to input tuples draws one fresh *edge id*
   per anchor that belongs to some tree, XORs it into that anchor's pending
   ack val, and XORs it into the new tuple's id for every root of the anchor.
   No anchors (or anchors in no tree) make an unanchored, untracked tuple.
3. Acking an input tuple sends, for each of its roots, ``its id in that tree
   XOR its ack val``: "I am done, and here are the children anchored to me".
   Since the tuple leaves the tree in the same message that adds its children,
   a tree can never complete early.
4. Failing an input tuple sends a fail for each of its roots.

Each emit or ack is O(number of anchors x roots); nothing here grows with the tree.

Example:
    >>> from kstorm.acking.ids import TupleIdGenerator
    >>> ids = TupleIdGenerator(42)
    >>> root = emit_root(ids, spout_task=1)
    >>> bolt = AnchorTracker(ids)
    >>> word = bolt.receive(root.message_ids[0])
    >>> child_id = bolt.emit([word])
    >>> acks = bolt.ack(word)
    >>> root.init.xor ^ acks[0].xor == child_id.anchors_to_ids[root.root_id]
    True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kstorm.acking.ids import IdSource
from kstorm.acking.messages import AckerMessage, MessageId
from kstorm.errors import KstormError

_UNANCHORED = MessageId()


class TrackedTuple:
    """An input tuple a bolt task is processing (the reliability part of ``TupleImpl``).

    Attributes:
        message_id: Trees the tuple belongs to and its id in each.
        ack_val: XOR of the edge ids of the children anchored to it so far.
        settled: Whether it has been acked or failed.
    """

    __slots__ = ("ack_val", "message_id", "settled")

    def __init__(self, message_id: MessageId, ack_val: int = 0, settled: bool = False) -> None:
        self.message_id = message_id
        self.ack_val = ack_val
        self.settled = settled

    def to_state(self) -> tuple[dict[int, int], int, bool]:
        """Plain data for a checkpoint (a bolt that acks in a later batch)."""
        return dict(self.message_id.anchors_to_ids), self.ack_val, self.settled

    @classmethod
    def from_state(cls, state: tuple[dict[int, int], int, bool]) -> TrackedTuple:
        """Rebuild from :meth:`to_state`'s output."""
        anchors, ack_val, settled = state
        return cls(MessageId(anchors), ack_val, settled)

    def __repr__(self) -> str:
        return f"TrackedTuple({self.message_id!r}, ack_val={self.ack_val}, settled={self.settled})"


@dataclass(frozen=True, slots=True)
class RootEmit:
    """What a spout's tracked emit produces.

    Attributes:
        root_id: Id of the new tuple tree (the spout's ``pending`` key).
        message_ids: Message id of the copy sent to each target task.
        init: Message for the acker ``acker_for(root_id, n)``.
    """

    root_id: int
    message_ids: tuple[MessageId, ...]
    init: AckerMessage


def emit_root(ids: IdSource, spout_task: int, n_targets: int = 1) -> RootEmit:
    """Start a tuple tree for a spout tuple sent to ``n_targets`` tasks (step 1).

    Example:
        >>> from kstorm.acking.ids import TupleIdGenerator
        >>> emit = emit_root(TupleIdGenerator(3), spout_task=0, n_targets=2)
        >>> len(emit.message_ids), emit.init.spout_task
        (2, 0)
    """
    if n_targets < 1:
        msg = f"spout task {spout_task} must emit to at least one task, got {n_targets}"
        raise KstormError(msg)
    root_id = ids.next_id()
    init_val = 0
    message_ids = []
    for _ in range(n_targets):
        tuple_id = ids.next_id()
        init_val ^= tuple_id
        message_ids.append(MessageId({root_id: tuple_id}))
    return RootEmit(root_id, tuple(message_ids), AckerMessage.init(root_id, spout_task, init_val))


class AnchorTracker:
    """Anchoring for one bolt task: emits, acks and fails of its input tuples.

    Args:
        ids: Source of edge ids, e.g. ``TupleIdGenerator.for_task(batch, part, task)``.
        acking_enabled: ``False`` when the topology has no ackers: every emit is
            unanchored and acks/fails send nothing.
    """

    __slots__ = ("_acking", "_ids", "pending")

    def __init__(self, ids: IdSource, *, acking_enabled: bool = True) -> None:
        self._ids = ids
        self._acking = acking_enabled
        self.pending = 0
        """Input tuples received but not yet acked or failed."""

    def receive(self, message_id: MessageId) -> TrackedTuple:
        """Start processing an input tuple that carries ``message_id``."""
        self.pending += 1
        return TrackedTuple(message_id)

    def adopt(self, tup: TrackedTuple) -> TrackedTuple:
        """Count a tuple restored from a checkpoint (:meth:`TrackedTuple.from_state`)."""
        if not tup.settled:
            self.pending += 1
        return tup

    def emit(self, anchors: Iterable[TrackedTuple] = ()) -> MessageId:
        """Message id for ONE new tuple anchored to ``anchors`` (step 2).

        Call once per copy: a tuple sent to several tasks is several tuples.

        Raises:
            KstormError: If an anchor was already acked or failed (Storm would
                silently lose the link and time the tree out).
        """
        if not self._acking:
            return _UNANCHORED
        anchors_to_ids: dict[int, int] = {}
        for anchor in anchors:
            if anchor.settled:
                msg = (
                    f"cannot anchor a new tuple to an input tuple that was already acked "
                    f"or failed (trees {list(anchor.message_id.roots)}); emit before ack"
                )
                raise KstormError(msg)
            roots = anchor.message_id.anchors_to_ids
            if not roots:
                continue
            edge_id = self._ids.next_id()
            anchor.ack_val ^= edge_id
            for root_id in roots:
                anchors_to_ids[root_id] = anchors_to_ids.get(root_id, 0) ^ edge_id
        return MessageId(anchors_to_ids) if anchors_to_ids else _UNANCHORED

    def ack(self, tup: TrackedTuple) -> list[AckerMessage]:
        """Messages that ack ``tup`` in each of its trees (step 3); a second call sends none."""
        if tup.settled:
            return []
        tup.settled = True
        self.pending -= 1
        if not self._acking:
            return []
        ack_val = tup.ack_val
        return [AckerMessage.ack(root, tid ^ ack_val) for root, tid in tup.message_id.items()]

    def fail(self, tup: TrackedTuple) -> list[AckerMessage]:
        """Messages that fail every tree ``tup`` belongs to (step 4); a second call sends none."""
        if tup.settled:
            return []
        tup.settled = True
        self.pending -= 1
        if not self._acking:
            return []
        return [AckerMessage.fail(root) for root in tup.message_id.roots]
