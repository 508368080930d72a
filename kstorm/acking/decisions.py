"""What the spout runtime does when a spout tuple's tree ends.

A :class:`SpoutTracker` turns acker events into :class:`SpoutDecision` s;
:func:`dispatch` runs the user's spout callbacks for them, as Storm's spout
executor does: ``ack(msg_id)`` when the tree was fully processed, ``fail(msg_id)``
when it failed or timed out (whether or not it will be replayed).

Example:
    >>> class Printing:
    ...     def ack(self, msg_id): print("ack", msg_id)
    ...     def fail(self, msg_id): print("fail", msg_id)
    >>> dispatch([SpoutDecision("m1", SpoutAction.ACK, Outcome.ACKED, 0)], Printing())
    ack m1
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

from kstorm.acking.messages import Outcome


class SpoutAction(StrEnum):
    """What the spout runtime must do about a message whose tree ended."""

    ACK = "ack"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


class SpoutDecision(NamedTuple):
    """Decision about one message.

    Attributes:
        msg_id: The spout's message id.
        action: Ack it, replay it at ``retry_at_ms``, or dead-letter it.
        outcome: How its tree ended this time.
        num_fails: Failures (including time-outs) of this message so far.
        retry_at_ms: Earliest replay time for ``RETRY``, else ``None``.
    """

    msg_id: Hashable
    action: SpoutAction
    outcome: Outcome
    num_fails: int
    retry_at_ms: int | None = None


class ReliableSpout(Protocol):
    """A spout's ``ack``/``fail`` callbacks (Storm's ``ISpout``)."""

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out."""


def dispatch(decisions: Iterable[SpoutDecision], spout: ReliableSpout) -> None:
    """Call ``spout.ack`` for acked messages and ``spout.fail`` for the others."""
    for decision in decisions:
        if decision.action is SpoutAction.ACK:
            spout.ack(decision.msg_id)
        else:
            spout.fail(decision.msg_id)
