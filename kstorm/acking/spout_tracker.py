"""The spout task's side of reliability: pending tuples, timeouts and retries.

Lifecycle of a tracked spout tuple (Storm's spout executor plus
storm-kafka-client's retry service):

1. ``emit(msg_id, root_id, now)``: the tuple is *pending* until its tree ends.
   At most ``max_pending`` (``topology.max.spout.pending``) are pending at once.
2. The root's acker reports ``ACKED``: the spout's ``ack(msg_id)`` runs and the
   message is done (for Kafka, its offset stops holding back the commit).
3. The acker reports ``FAILED``, or the tuple is still pending
   ``timeout_ms`` after it was emitted (``topology.message.timeout.secs``): the
   spout's ``fail(msg_id)`` runs and the :class:`RetryPolicy` decides between a
   ``RETRY`` at a later time and a ``DEAD_LETTER``. A message waiting for its
   retry is still un-acked; ``due(now)`` hands it back for re-emission under a
   new root id.

Events for roots that are no longer pending (already timed out, or from an
earlier attempt) are ignored, as in Storm.

Example:
    >>> tracker = SpoutTracker(max_pending=2, retry=RetryPolicy(initial_delay_ms=50))
    >>> tracker.emit(KafkaMessageId("t", 0, 7), root_id=111, now_ms=0)
    >>> tracker.fail(111, now_ms=10).action
    <SpoutAction.RETRY: 'retry'>
    >>> tracker.committable_offsets()
    {('t', 0): 7}
    >>> tracker.due(now_ms=60)
    [KafkaMessageId(topic='t', partition=0, offset=7)]
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Any

from kstorm.acking.decisions import SpoutAction, SpoutDecision
from kstorm.acking.messages import AckerEvent, Outcome
from kstorm.acking.offsets import KafkaMessageId, OffsetTracker, TopicPartition
from kstorm.acking.retry import RetryPolicy
from kstorm.errors import ConfigError, KstormError

DEFAULT_MESSAGE_TIMEOUT_SECS = 30
"""Storm's default ``topology.message.timeout.secs``."""


class SpoutTracker:
    """Pending, retrying and (for Kafka ids) committable state of one spout task.

    Args:
        max_pending: ``topology.max.spout.pending``; ``None`` for no limit.
        timeout_ms: ``topology.message.timeout.secs`` in milliseconds.
        retry: When to replay failed messages and when to give up.

    Times are passed in; expiry assumes ``now_ms`` does not go backwards.
    """

    def __init__(
        self,
        *,
        max_pending: int | None = None,
        timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_SECS * 1000,
        retry: RetryPolicy | None = None,
    ) -> None:
        if max_pending is not None and (
            isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1
        ):
            msg = f"topology.max.spout.pending must be None or an int >= 1, got {max_pending!r}"
            raise ConfigError(msg)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
            msg = f"topology.message.timeout.secs must be positive, got {timeout_ms!r} ms"
            raise ConfigError(msg)
        self.max_pending = max_pending
        self.timeout_ms = timeout_ms
        self.retry = retry if retry is not None else RetryPolicy()
        self._pending: dict[int, tuple[Hashable, int]] = {}  # root -> (msg_id, emitted_at)
        self._in_flight: set[Hashable] = set()
        self._num_fails: dict[Hashable, int] = {}
        self._waiting: list[tuple[int, int, Hashable]] = []  # heap of (due, seq, msg_id)
        self._waiting_ids: dict[Hashable, int] = {}  # msg_id -> seq of its valid heap entry
        self._seq = itertools.count()
        self.offsets = OffsetTracker()

    @property
    def pending_count(self) -> int:
        """Tuples emitted whose trees have not ended."""
        return len(self._pending)

    @property
    def waiting_count(self) -> int:
        """Failed messages waiting for their retry time."""
        return len(self._waiting_ids)

    def available(self) -> int | None:
        """How many more tuples may be emitted now (``None``: no limit)."""
        return None if self.max_pending is None else self.max_pending - len(self._pending)

    def emit(self, msg_id: Hashable, root_id: int, now_ms: int) -> None:
        """Step 1: ``msg_id`` was emitted (again, for a retry) as the tree ``root_id``.

        Raises:
            KstormError: If ``max_pending`` tuples are already pending, the
                message is already in flight, or the root id is in use.
        """
        if self.max_pending is not None and len(self._pending) >= self.max_pending:
            msg = (
                f"spout has {len(self._pending)} pending tuples, the "
                f"topology.max.spout.pending limit; check available() before emitting {msg_id!r}"
            )
            raise KstormError(msg)
        if msg_id in self._in_flight or root_id in self._pending:
            msg = f"message {msg_id!r} (tree {root_id}) is already pending"
            raise KstormError(msg)
        if isinstance(msg_id, KafkaMessageId):
            self.offsets.emitted(msg_id.topic_partition, msg_id.offset)
        self._waiting_ids.pop(msg_id, None)  # re-emitted before its retry time
        self._pending[root_id] = (msg_id, now_ms)
        self._in_flight.add(msg_id)

    def ack(self, root_id: int) -> SpoutDecision | None:
        """Step 2: the tree ``root_id`` was fully processed."""
        entry = self._pending.pop(root_id, None)
        if entry is None:
            return None
        msg_id = entry[0]
        self._in_flight.discard(msg_id)
        self._finish(msg_id)
        return SpoutDecision(msg_id, SpoutAction.ACK, Outcome.ACKED, self._num_fails.pop(msg_id, 0))

    def fail(self, root_id: int, now_ms: int, *, timed_out: bool = False) -> SpoutDecision | None:
        """Step 3: the tree ``root_id`` failed (or timed out); decide retry or dead letter."""
        entry = self._pending.pop(root_id, None)
        if entry is None:
            return None
        msg_id = entry[0]
        self._in_flight.discard(msg_id)
        outcome = Outcome.TIMED_OUT if timed_out else Outcome.FAILED
        num_fails = self._num_fails.get(msg_id, 0) + 1
        if not self.retry.allows_retry(num_fails):
            self._num_fails.pop(msg_id, None)
            self._finish(msg_id)
            return SpoutDecision(msg_id, SpoutAction.DEAD_LETTER, outcome, num_fails)
        self._num_fails[msg_id] = num_fails
        due = now_ms + self.retry.delay_ms(num_fails)
        seq = self._waiting_ids[msg_id] = next(self._seq)
        heapq.heappush(self._waiting, (due, seq, msg_id))
        return SpoutDecision(msg_id, SpoutAction.RETRY, outcome, num_fails, due)

    def on_event(self, event: AckerEvent, now_ms: int) -> SpoutDecision | None:
        """Route an acker event to :meth:`ack` or :meth:`fail`."""
        if event.outcome is Outcome.ACKED:
            return self.ack(event.root_id)
        return self.fail(event.root_id, now_ms, timed_out=event.outcome is Outcome.TIMED_OUT)

    def expire(self, now_ms: int) -> list[SpoutDecision]:
        """Fail every tuple pending ``timeout_ms`` or longer (as time-outs)."""
        cutoff = now_ms - self.timeout_ms
        expired = []
        for root_id, (_, emitted_at) in self._pending.items():
            if emitted_at > cutoff:
                break  # entries are in emit order
            expired.append(root_id)
        decisions = []
        for root_id in expired:
            decision = self.fail(root_id, now_ms, timed_out=True)
            if decision is not None:
                decisions.append(decision)
        return decisions

    def due(self, now_ms: int, limit: int | None = None) -> list[Hashable]:
        """Messages whose retry time has come, earliest first; re-emit each with :meth:`emit`.

        Args:
            now_ms: Current time.
            limit: Return at most this many (e.g. :meth:`available`); the rest wait.
        """
        ready: list[Hashable] = []
        self._drop_stale_waiting()
        while self._waiting and self._waiting[0][0] <= now_ms:
            if limit is not None and len(ready) >= limit:
                break
            msg_id = heapq.heappop(self._waiting)[2]
            del self._waiting_ids[msg_id]
            ready.append(msg_id)
            self._drop_stale_waiting()
        return ready

    def next_retry_at(self) -> int | None:
        """Earliest time a waiting message becomes due, if any."""
        self._drop_stale_waiting()
        return self._waiting[0][0] if self._waiting else None

    def _drop_stale_waiting(self) -> None:
        while self._waiting and self._waiting_ids.get(self._waiting[0][2]) != self._waiting[0][1]:
            heapq.heappop(self._waiting)

    def is_in_flight(self, msg_id: Hashable) -> bool:
        """Whether ``msg_id`` is pending (emitted, its tree not ended)."""
        return msg_id in self._in_flight

    def is_pending_root(self, root_id: int) -> bool:
        """Whether the tree ``root_id`` is pending."""
        return root_id in self._pending

    def next_timeout_at(self) -> int | None:
        """When the oldest pending tuple times out (None: nothing pending)."""
        for _, emitted_at in self._pending.values():
            return emitted_at + self.timeout_ms
        return None

    def waiting(self) -> list[tuple[int, Hashable]]:
        """``(due, msg_id)`` of the failed messages waiting for their retry, earliest first."""
        return self.snapshot()["waiting"]

    def num_fails(self, msg_id: Hashable) -> int:
        """Failures of ``msg_id`` so far (0 once it is acked or dead-lettered)."""
        return self._num_fails.get(msg_id, 0)

    def committable_offsets(self) -> dict[TopicPartition, int]:
        """For Kafka message ids: the offset each partition's group may commit."""
        return self.offsets.committable_offsets()

    def _finish(self, msg_id: Hashable) -> None:
        if isinstance(msg_id, KafkaMessageId):
            self.offsets.done(msg_id.topic_partition, msg_id.offset)

    def snapshot(self) -> dict[str, Any]:
        """Plain data (message ids must be picklable) for :meth:`restore`."""
        return {
            "pending": [(root, msg_id, at) for root, (msg_id, at) in self._pending.items()],
            "num_fails": list(self._num_fails.items()),
            "waiting": [
                (due, msg_id)
                for due, seq, msg_id in sorted(self._waiting)
                if self._waiting_ids.get(msg_id) == seq
            ],
            "offsets": self.offsets.snapshot(),
        }

    @classmethod
    def restore(
        cls,
        data: dict[str, Any],
        *,
        max_pending: int | None = None,
        timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_SECS * 1000,
        retry: RetryPolicy | None = None,
    ) -> SpoutTracker:
        """Rebuild from :meth:`snapshot`'s output with the given settings."""
        tracker = cls(max_pending=max_pending, timeout_ms=timeout_ms, retry=retry)
        for root, msg_id, at in data["pending"]:
            tracker._pending[root] = (msg_id, at)
            tracker._in_flight.add(msg_id)
        tracker._num_fails = dict(data["num_fails"])
        for due, msg_id in data["waiting"]:
            seq = tracker._waiting_ids[msg_id] = next(tracker._seq)
            tracker._waiting.append((due, seq, msg_id))
        tracker.offsets = OffsetTracker.restore(data["offsets"])
        return tracker
