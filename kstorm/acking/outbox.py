"""The acker messages one executor sends in a batch, combined per root (map-side combine).

A stage's Spark partition runs many tuples of the same trees; Storm would send one message
per ack. Since acker messages combine associatively (:meth:`AckerMessage.combine`), the
executor keeps one running ``[xor, spout_task, failed]`` per root and sends, at the end of
the batch, one payload per acker task (``acker_for(root, n)``) holding all of its roots.
A tree that is complete within the partition costs one combined entry whose xor is 0.

The spout side of a Kafka spout tuple (the ``init``) also names the tuple's message id
``(topic, partition, offset, attempt)`` and the batch's time, which the acker keeps only
while the tree is pending.

Example:
    >>> from kstorm.acking.messages import AckerMessage
    >>> box = AckerOutbox(n_ackers=2)
    >>> box.init(6, spout_task=0, init_val=5, msg=("t", 0, 9, 0), now_ms=100)
    >>> box.add(AckerMessage.ack(6, 5))
    >>> payload = box.payloads()[0]
    >>> payload["roots"], payload["xors"], payload["tasks"], payload["msgs"]
    ([6], [0], [0], {6: ('t', 0, 9, 0)})
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kstorm.acking.ids import acker_for
from kstorm.acking.messages import AckerMessage

SpoutMsg = tuple[Any, Any, Any, Any]
"""``(topic, partition, offset, attempt)`` of a Kafka spout tuple, or a free-form spout's
``(pickled msg id, stream, pickled values, owner)`` (:class:`kstorm.acking.emits.EmitMsg`)."""
NO_TASK = -1
"""``tasks`` value of a root whose spout task this executor does not know."""


class AckerOutbox:
    """Combined acker messages of one executor, to be sent at the end of its batch.

    Args:
        n_ackers: ``topology.acker.executors``; decides which acker gets each root.
    """

    __slots__ = ("_entries", "_msgs", "n_ackers", "now_ms")

    def __init__(self, n_ackers: int) -> None:
        self.n_ackers = n_ackers
        self._entries: dict[int, list[Any]] = {}  # root -> [xor, spout task, failed]
        self._msgs: dict[int, SpoutMsg] = {}
        self.now_ms: int | None = None

    def init(self, root_id: int, spout_task: int, init_val: int, msg: SpoutMsg,
             now_ms: int | None) -> None:
        """A spout tuple of tree ``root_id`` entered this executor with id ``init_val``."""
        self._msgs[root_id] = msg
        if now_ms is not None:
            self.now_ms = now_ms if self.now_ms is None else max(self.now_ms, now_ms)
        self.add(AckerMessage.init(root_id, spout_task, init_val))

    def add(self, message: AckerMessage) -> None:
        """Fold one message in."""
        entry = self._entries.get(message.root_id)
        if entry is None:
            self._entries[message.root_id] = [message.xor, message.spout_task, message.failed]
            return
        entry[0] ^= message.xor
        if entry[1] is None:
            entry[1] = message.spout_task
        entry[2] = entry[2] or message.failed

    def extend(self, messages: Iterable[AckerMessage]) -> None:
        """Fold several messages in."""
        for message in messages:
            self.add(message)

    def __len__(self) -> int:
        return len(self._entries)

    def payloads(self) -> dict[int, dict[str, Any]]:
        """``acker task -> payload`` (plain lists, picklable); empties the outbox."""
        out: dict[int, dict[str, Any]] = {}
        for root, (xor, task, failed) in self._entries.items():
            acker = acker_for(root, self.n_ackers)
            payload = out.get(acker)
            if payload is None:
                payload = out[acker] = {"roots": [], "xors": [], "tasks": [], "failed": [],
                                        "msgs": {}, "now": self.now_ms}
            payload["roots"].append(root)
            payload["xors"].append(xor)
            payload["tasks"].append(NO_TASK if task is None else task)
            payload["failed"].append(failed)
            msg = self._msgs.get(root)
            if msg is not None:
                payload["msgs"][root] = msg
        self._entries = {}
        self._msgs = {}
        return out
