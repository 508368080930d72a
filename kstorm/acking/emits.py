"""The spout side of at-least-once for a free-form spout (one whose ``next_tuple`` kstorm calls).

A Kafka tuple is replayed by kstorm from its offset (:mod:`kstorm.acking.spout_tracker`); a
free-form spout replays by itself, as in Storm (seed 001): its ``fail(msg_id)`` runs and the
spout decides whether to emit the message again from a later ``next_tuple``. So the driver
only keeps, per tracked emit, the tree still pending after its batch, and turns the trees that
ended into :class:`Notice` s (ack, or fail after a bolt failed it or it timed out), which the
spout's own process delivers (``kstorm/_runtime/spout_notices.py``).

Every emit is its own tree (:func:`kstorm.acking.ids.emit_root_id`): a message id re-emitted
after a failure is a new tree, so a late ack of the old one completes nothing.

Example:
    >>> msg = EmitMsg(b"id", "default", b"values", "instance-1")
    >>> tracker = EmitTracker(timeout_ms=1_000)
    >>> tracker.register(11, msg, now_ms=0)
    >>> tracker.fail(11).action
    'fail'
    >>> tracker.register(12, msg, now_ms=0)
    >>> [n.outcome.value for n in tracker.expire(now_ms=1_000)]
    ['timed_out']
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

from kstorm.acking.messages import Outcome
from kstorm.errors import ConfigError

ORPHAN = "@kstorm"
"""Owner of the tuples kstorm re-emits itself: failed emits of a spout instance that is gone."""
ACK = "ack"
FAIL = "fail"


class EmitMsg(NamedTuple):
    """What the acker carries for one tracked emit (opaque to it), and what a notice names.

    Attributes:
        msg_id: the spout's message id, pickled (any picklable object; unpickled only in the
            spout's process, so equality and hash are the spout's own).
        stream: the stream it was emitted on.
        values: its values, pickled (kstorm re-emits them if the emitting instance is gone).
        owner: the spout instance that emitted it (:data:`ORPHAN`: kstorm re-emitted it).
    """

    msg_id: bytes
    stream: str
    values: bytes
    owner: str

    def message_id(self) -> Any:
        """The spout's message id."""
        return pickle.loads(self.msg_id)


class SpoutEmit(NamedTuple):
    """A tracked spout tuple entering its source stage: its tree's root, message, batch time."""

    root: int
    msg: EmitMsg
    now_ms: int | None


class Notice(NamedTuple):
    """A tree that ended: ``ack`` or ``fail`` for the spout (``outcome`` says how it ended)."""

    action: str
    outcome: Outcome
    msg: EmitMsg


class EmitTracker:
    """The trees of a free-form spout's tracked emits still pending after their batch.

    Args:
        timeout_ms: ``topology.message.timeout.secs`` in milliseconds.
    """

    def __init__(self, *, timeout_ms: int) -> None:
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
            msg = f"topology.message.timeout.secs must be positive, got {timeout_ms!r} ms"
            raise ConfigError(msg)
        self.timeout_ms = timeout_ms
        self._pending: dict[int, tuple[EmitMsg, int]] = {}  # root -> (msg, emitted at), in order

    @property
    def pending_count(self) -> int:
        """Trees not ended."""
        return len(self._pending)

    def register(self, root: int, msg: EmitMsg, now_ms: int) -> None:
        """The tree ``root`` started in a batch at ``now_ms`` and did not end in it."""
        if root not in self._pending:
            self._pending[root] = (msg, now_ms)

    def ack(self, root: int, msg: EmitMsg | None = None) -> Notice | None:
        """The tree ``root`` completed (``msg``: known when it started in this batch)."""
        entry = self._pending.pop(root, None)
        found = entry[0] if entry is not None else msg
        return None if found is None else Notice(ACK, Outcome.ACKED, found)

    def fail(self, root: int, msg: EmitMsg | None = None, *,
             timed_out: bool = False) -> Notice | None:
        """The tree ``root`` failed (or timed out); a tree no longer pending is ignored."""
        entry = self._pending.pop(root, None)
        found = entry[0] if entry is not None else msg
        if found is None:
            return None
        return Notice(FAIL, Outcome.TIMED_OUT if timed_out else Outcome.FAILED, found)

    def expire(self, now_ms: int) -> list[Notice]:
        """Fail every tree pending ``timeout_ms`` or longer (as time-outs), oldest first."""
        cutoff = now_ms - self.timeout_ms
        due = []
        for root, (_, emitted_at) in self._pending.items():
            if emitted_at > cutoff:
                break  # registered in batch order
            due.append(root)
        return [n for n in (self.fail(r, timed_out=True) for r in due) if n is not None]

    def next_timeout_at(self) -> int | None:
        """When the oldest pending tree times out (None: nothing pending)."""
        for _, emitted_at in self._pending.values():
            return emitted_at + self.timeout_ms
        return None

    def snapshot(self) -> dict[str, Any]:
        """Plain data for :meth:`restore`."""
        return {"kind": "emits",
                "pending": [(r, tuple(m), at) for r, (m, at) in self._pending.items()]}

    @classmethod
    def restore(cls, data: dict[str, Any], *, timeout_ms: int) -> EmitTracker:
        """Rebuild from :meth:`snapshot`'s output."""
        tracker = cls(timeout_ms=timeout_ms)
        for root, msg, at in data["pending"]:
            tracker._pending[root] = (EmitMsg(*msg), at)
        return tracker


def emits_batch(spout_id: str, tracker: EmitTracker, now: int,
                pending: Iterable[tuple[int, int, Any]],
                events: Iterable[tuple[str, int, int, Any]], counters: Counter[str]
                ) -> list[Notice]:
    """One batch of a tracked free-form spout: register, settle the ended trees, time out.

    Pure (the test driver runs it too). ``pending``: ``(root, spout task, msg)`` of the trees
    the ackers left open; ``events``: ``(outcome, root, spout task, msg)`` of the trees that
    ended (``msg`` is known when the tree started in this batch). Returns the notices in
    order: what ended in this batch, then what timed out.
    """
    for root, _, msg in pending:
        tracker.register(root, EmitMsg(*msg), now)
    notices = []
    for outcome, root, _, msg in events:
        known = EmitMsg(*msg) if msg is not None else None
        notice = (tracker.ack(root, known) if outcome == Outcome.ACKED.value
                  else tracker.fail(root, known))
        if notice is not None:
            notices.append(notice)
    notices += tracker.expire(now)
    for n in notices:
        counters[f"{spout_id}.{n.outcome.value}"] += 1
    return notices
