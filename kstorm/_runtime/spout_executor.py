"""Run a free-form spout's ``next_tuple`` into logged batches: Storm's spout executor.

Pure Python (no Spark); the Spark source (``kstorm/_spark/spout_source.py``) holds one
:class:`SpoutExecutor` in Spark's long-lived streaming source process and calls it when
Spark plans a batch and when it commits one.

Planning batch ``seq`` (:meth:`SpoutExecutor.next_batch`):

1. Open the spout on first use (``open(conf, context, collector)``; the collector buffers).
2. Ack every logged batch below ``seq``: Spark plans batch ``seq`` only after the batch
   before it committed (batches run one at a time), so their tuples are fully processed
   (seed 002's transactional ack). Untracked tuples (message id None) get nothing. A
   *tracked* spout (at least once, with ackers: ``notices`` is given) is not acked per
   batch: step 4a acks and fails its tuples one by one.
3. If batch ``seq`` is already in the log (logged, then the process died before Spark
   recorded it), it is the batch: replayed as logged, ``next_tuple`` is not called.
4. Otherwise:
   a. Tracked: deliver the notices of the trees that ended since the last delivery
      (``kstorm/_runtime/spout_notices.py``), in batch order: ``ack(msg_id)``, or
      ``fail(msg_id)`` for a tree a bolt failed or that timed out, so the spout can re-emit
      it in this batch. A notice for a tuple another (dead) instance emitted goes to this
      one if it is an ack; if it is a fail, kstorm re-emits the logged tuple itself (owner
      ``@kstorm``), since only the instance that emitted it could: nothing is lost.
   b. The batch starts with the tuples the spout emitted since the last batch from
      ``open``, ``activate``, ``ack`` or ``fail`` (a replay from ``fail``, as Storm allows:
      they share one thread there); tuples emitted after a batch is logged (an ``ack``
      at most once) start the next one.
      Call ``next_tuple`` until the batch is full (:class:`BatchBounds`): max tuples, max
      time, or the spout emitting nothing for ``idle_calls`` calls in a row (sleeping
      ``wait_ms`` after each, as Storm's sleep wait strategy). A call that raises ends the
      batch (logged with the spout's id); ``max_failures`` failing calls in a row raise a
      :class:`SourceError`, which fails the query.
   c. Tracked, nothing emitted, and a pending tree's time-out has passed: an empty batch
      all the same, whose commit times the tree out (Storm's tick).
5. Log the batch atomically (``kstorm/_spout_log.py``); only then is its end returned, and
   (tracked) the notices of 4a recorded as delivered.
6. At most once: ack the batch's tuples now (Storm acks on emit when there are no ackers).

Example:
    >>> ex = SpoutExecutor(spout, "numbers", conf, context, SpoutLog(d), BatchBounds())
    ... # doctest: +SKIP
    >>> ex.next_batch(0)  # 1 once batch 0 is logged, 0 if the spout had nothing  # doctest: +SKIP
    1
"""

from __future__ import annotations

import logging
import pickle
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kstorm._runtime.checkpoint import KEEP_BATCHES
from kstorm._runtime.spout_log import LoggedTuple, SpoutLog
from kstorm._runtime.spout_notices import NoticeBook
from kstorm.acking.emits import ACK, ORPHAN
from kstorm.component import TopologyContext
from kstorm.errors import ConfigError, SourceError, TopologyError
from kstorm.spout import BaseRichSpout, SpoutOutputCollector
from kstorm.tuple import Fields

log = logging.getLogger("kstorm.spout")


@dataclass(frozen=True)
class BatchBounds:
    """When a batch of ``next_tuple`` emits ends (``kstorm.spout.*`` config keys).

    A single ``next_tuple`` call may emit several tuples: a batch can exceed ``max_tuples``
    by what its last call emitted.

    Example:
        >>> BatchBounds(max_tuples=500, max_ms=200).max_tuples
        500
    """

    max_tuples: int = 10_000
    max_ms: int = 1_000
    idle_calls: int = 3
    max_failures: int = 3
    wait_ms: float = 1.0

    def __post_init__(self) -> None:
        for name in ("max_tuples", "max_ms", "idle_calls", "max_failures"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                msg = f"spout batch bound {name} must be an int >= 1, got {value!r}"
                raise ConfigError(msg)
        if self.wait_ms < 0:
            msg = f"spout batch bound wait_ms must be >= 0, got {self.wait_ms!r}"
            raise ConfigError(msg)


class EmitBuffer:
    """The spout collector's emit function: checks each emit, keeps it for the batch."""

    def __init__(self, spout_id: str, streams: Mapping[str, Fields], owner: str = "") -> None:
        self.spout_id = spout_id
        self.owner = owner  # the spout instance: what a tracked tuple's notices go back to
        self.streams = dict(streams)
        self.tuples: list[LoggedTuple] = []
        self.error: TopologyError | None = None  # kept in case next_tuple swallows it

    def __call__(self, stream: str, values: list[Any], message_id: Any) -> None:
        fields = self.streams.get(stream)
        if fields is None:
            msg = (f"spout {self.spout_id!r} emitted on undeclared stream {stream!r}; it "
                   f"declares {sorted(self.streams)}")
            self.error = TopologyError(msg)
            raise self.error
        if len(values) != len(fields):
            msg = (f"spout {self.spout_id!r} emitted {len(values)} values on stream "
                   f"{stream!r}, which declares {len(fields)} fields {fields.to_list()}: "
                   f"{values!r}")
            self.error = TopologyError(msg)
            raise self.error
        self.tuples.append(LoggedTuple(stream, values, message_id,
                                       "" if message_id is None else self.owner))

    def take(self) -> list[LoggedTuple]:
        """The buffered tuples; the buffer starts over."""
        out, self.tuples = self.tuples, []
        return out


class SpoutExecutor:
    """Drives one spout instance into logged batches (see the module docstring)."""

    def __init__(self, spout: BaseRichSpout, spout_id: str, conf: dict[str, Any],
                 context: TopologyContext, spout_log: SpoutLog, bounds: BatchBounds, *,
                 ack_on_emit: bool = False, notices: NoticeBook | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 instance: str | None = None, max_pending: int | None = None) -> None:
        self.spout = spout
        self.spout_id = spout_id
        self.conf = conf
        self.context = context
        self.spout_log = spout_log
        self.bounds = bounds
        self.ack_on_emit = ack_on_emit
        self.notices = notices  # tracked (at least once): acks and fails come from here
        self.instance = instance or uuid.uuid4().hex
        self._clock = clock
        self._sleep = sleep
        self._wall_ms = wall_ms
        self._buffer = EmitBuffer(spout_id, context.output_streams,
                                  self.instance if notices is not None else "")
        self._opened = False
        self._delivered = -1          # tracked: the first batch whose notices are not delivered
        self._next_timeout: int | None = None
        self._pending = 0             # tracked: trees pending after the last committed batch
        self.max_pending = max_pending  # tracked: topology.max.spout.pending
        self.failures = 0  # next_tuple calls that raised in a row
        self.acked = 0     # acks delivered by this instance (testing, progress)
        self.failed = 0    # fails delivered to this instance
        self.reemitted = 0  # failed tuples of a gone instance kstorm re-emitted
        self.planned_ms: int | None = None  # when the last batch was planned (wall clock)

    def next_batch(self, seq: int) -> int:
        """Plan batch ``seq``: ``seq + 1`` once it is logged, ``seq`` if there is none."""
        # Step 1: open.
        self._open()
        # Step 2: everything before seq committed.
        self.ack_through(seq)
        # Step 3: a batch logged before a restart is the batch.
        self.planned_ms = self._wall_ms()
        if self.spout_log.exists(seq):
            log.info("spout %r: batch %s is in the log already: replayed as logged",
                     self.spout_id, seq)
        else:
            # Step 4a: tracked, the trees that ended: ack / fail (or re-emit an orphan).
            reemits = self._deliver() if self.notices is not None else []
            # Step 4b: next_tuple until the batch is full (tracked: or until
            # topology.max.spout.pending tuples are pending, counting this batch's).
            room = (None if self.max_pending is None or self.notices is None
                    else self.max_pending - self._pending - len(reemits))
            tuples = reemits + (self._fill(room) if room is None or room > 0 else [])
            # Step 4c: tracked, nothing to emit but a tree's time-out has passed: tick.
            if not tuples and not self._tick_due():
                return seq
            # Step 5: write ahead (then the delivered notices are durable: their re-emits
            # are in the log).
            self.spout_log.write(seq, tuples)
            if self.notices is not None:
                self.notices.mark_delivered(self._delivered)
        # Step 6: at most once, ack on emit.
        if self.ack_on_emit:
            self.ack_through(seq + 1)
        return seq + 1

    def ack_through(self, seq: int) -> None:
        """Ack the tracked tuples of every logged batch below ``seq`` not acked yet."""
        first = self.spout_log.acked()
        if first >= seq:
            return
        self._open()
        # (tracked: acked one by one in step 4a, not per batch)
        for batch in range(first, seq) if self.notices is None else ():
            if not self.spout_log.exists(batch):
                continue  # pruned or never logged (a checkpoint older than the log)
            for t in self.spout_log.tuples(batch):
                if t.message_id is None:
                    continue
                try:
                    self.spout.ack(t.message_id)
                except Exception:
                    log.exception("spout %r: ack(%r) raised (batch %s); going on",
                                  self.spout_id, t.message_id, batch)
                self.acked += 1
        self.spout_log.mark_acked(seq)
        self.spout_log.prune(seq - KEEP_BATCHES)

    def _deliver(self) -> list[LoggedTuple]:
        """Step 4a: the notices not delivered yet; returns the tuples kstorm re-emits."""
        assert self.notices is not None
        if self._delivered < 0:  # a new instance: from what no instance durably got
            self._delivered = self.notices.delivered()
            self._next_timeout, self._pending = self.notices.latest()
        reemits: list[LoggedTuple] = []
        first = self._delivered
        for batch_id, notices, next_timeout in self.notices.unread(first):
            for notice in notices:
                msg = notice.msg
                msg_id = msg.message_id()
                mine = msg.owner == self.instance
                if notice.action == ACK:
                    self._call("ack", msg_id, batch_id)
                    self.acked += 1
                elif mine:
                    self._call("fail", msg_id, batch_id)
                    self.failed += 1
                else:  # emitted by an instance that is gone: only kstorm can replay it
                    reemits.append(LoggedTuple(msg.stream, pickle.loads(msg.values), msg_id,
                                               ORPHAN))
            self._delivered = batch_id + 1
            self._next_timeout = next_timeout
        if self._delivered > first:  # the newest file (the last delivered): what is pending
            self._next_timeout, self._pending = self.notices.latest()
        if reemits:
            self.reemitted += len(reemits)
            log.info("spout %r: re-emitting %d failed tuple(s) a previous instance emitted",
                     self.spout_id, len(reemits))
        return reemits

    def _call(self, method: str, msg_id: Any, batch_id: int) -> None:
        try:
            getattr(self.spout, method)(msg_id)
        except Exception:
            log.exception("spout %r: %s(%r) raised (notice of batch %s); going on",
                          self.spout_id, method, msg_id, batch_id)

    def wait_ms(self) -> int | None:
        """Tracked: milliseconds until a pending tree times out (None: nothing pending)."""
        if self.notices is None or self._next_timeout is None:
            return None
        return max(0, self._next_timeout - self._wall_ms())

    def _tick_due(self) -> bool:
        return (self.notices is not None and self._next_timeout is not None
                and self._wall_ms() >= self._next_timeout)

    def close(self) -> None:
        """Close the spout instance if it was opened."""
        if self._opened:
            self._opened = False
            self.spout.close()

    def _open(self) -> None:
        if self._opened:
            return
        self.spout.open(self.conf, self.context, SpoutOutputCollector(self._buffer))
        self._opened = True

    def _fill(self, room: int | None = None) -> list[LoggedTuple]:
        """``next_tuple`` until the batch is full.

        The batch starts with what the spout emitted since the last one from ``open``,
        ``activate``, ``ack`` or ``fail`` (in Storm they share ``next_tuple``'s thread and
        may emit: a replay from ``fail``).
        """
        try:
            return self._fill_from_next_tuple(room)
        except BaseException:
            self._buffer.take()  # the failed call's emits go with its batch
            raise

    def _fill_from_next_tuple(self, room: int | None) -> list[LoggedTuple]:
        bounds = self.bounds
        buffer = self._buffer
        deadline = self._clock() + bounds.max_ms / 1000
        idle = 0
        most = bounds.max_tuples if room is None else min(bounds.max_tuples, room)
        while len(buffer.tuples) < most and self._clock() < deadline:
            before = len(buffer.tuples)
            try:
                self.spout.next_tuple()
            except Exception as exc:
                if buffer.error is not None:
                    raise buffer.error from None
                self.failures += 1
                if self.failures >= bounds.max_failures:
                    msg = (f"spout {self.spout_id!r}: next_tuple raised {self.failures} times "
                           f"in a row; last: {type(exc).__name__}: {exc}")
                    raise SourceError(msg) from exc
                log.warning("spout %r: next_tuple raised (%d in a row, the query fails at "
                            "%d): %s: %s", self.spout_id, self.failures, bounds.max_failures,
                            type(exc).__name__, exc)
                if buffer.tuples:
                    break  # the batch ends with what was emitted before the error
                self._sleep(min(1.0, 0.05 * 2 ** self.failures))
                continue
            if buffer.error is not None:
                raise buffer.error
            self.failures = 0
            if len(buffer.tuples) > before:
                idle = 0
                continue
            idle += 1
            if idle >= bounds.idle_calls:
                break
            self._sleep(bounds.wait_ms / 1000)
        return buffer.take()
