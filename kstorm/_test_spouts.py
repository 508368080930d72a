"""Storm's test spouts (``org.apache.storm.testing``), re-exported by :mod:`kstorm.testing`.

- :class:`TestWordSpout`: emits random words from Storm's list on field ``word``.
- :class:`FeederSpout`: emits what the test feeds it (``feed(values[, message_id])``).

Both are free-form spouts (``next_tuple``): :meth:`kstorm.testing.TopologyTestDriver.run`
runs them batch after batch until they emit nothing.
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.errors import ConfigError
from kstorm.spout import BaseRichSpout, SpoutOutputCollector
from kstorm.tuple import Fields

WORDS = ("nathan", "mike", "jackson", "golda", "bertels")


class TestWordSpout(BaseRichSpout):
    """Storm's ``TestWordSpout``: a random word from :data:`WORDS` per ``next_tuple``.

    Storm's spout emits forever (sleeping 100 ms between words); this one emits without
    sleeping, forever unless ``limit`` is given, so bound a run with it (or with
    ``TopologyTestDriver.run(max_batches=...)``).

    Args:
        limit: how many words each task emits in all (None: no end, as Storm's).
        seed: seeds the choice of words (each task adds its index), for repeatable tests.

    Example:
        >>> builder.set_spout("word", TestWordSpout(limit=100), 2)  # doctest: +SKIP
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, limit: int | None = None, *, seed: int | None = None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            msg = f"TestWordSpout limit must be an int >= 0 or None, got {limit!r}"
            raise ConfigError(msg)
        self.limit = limit
        self.seed = seed

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """One field, ``word``."""
        declarer.declare(Fields("word"))

    def open(self, conf: dict[str, Any], context: TopologyContext,
             collector: SpoutOutputCollector) -> None:
        """Keep the collector; seed this task's random words."""
        self._collector = collector
        seed = None if self.seed is None else self.seed + context.task_index
        self._random = random.Random(seed)  # noqa: S311 - test data, not security
        self._emitted = 0

    def next_tuple(self) -> None:
        """Emit one random word (none once ``limit`` words were emitted)."""
        if self.limit is not None and self._emitted >= self.limit:
            return
        self._emitted += 1
        self._collector.emit([self._random.choice(WORDS)])


@dataclass
class _Feed:
    """What a FeederSpout's copies share in this process: the queue and the delegate."""

    queue: deque[tuple[list[Any], Any]] = field(default_factory=deque)
    delegate: Any = None


_FEEDS: dict[str, _Feed] = {}


class FeederSpout(BaseRichSpout):
    """Storm's ``FeederSpout``: the test feeds tuples, the spout emits them in that order.

    The runtime runs a copy of the spout; the copies find the fed tuples through an id in
    this process (as Storm's ``InprocMessaging``), so feeding works where the spout runs in
    the test's process: the test driver. Each fed tuple is emitted with its message id
    (Storm's default: a random UUID), so at least once it is tracked and ``ack``/``fail``
    reach the delegate set with :meth:`set_ack_fail_delegate`.

    Args:
        fields: the output fields (Storm's ``new FeederSpout(new Fields("word"))``).

    Example:
        >>> spout = FeederSpout(Fields("word"))
        >>> spout.feed(["nathan"])
        >>> spout.pending
        1
    """

    def __init__(self, fields: Fields | Sequence[str]) -> None:
        self.fields = fields if isinstance(fields, Fields) else Fields(*fields)
        self._feed_id = uuid.uuid4().hex
        _FEEDS[self._feed_id] = _Feed()

    @property
    def _feed(self) -> _Feed:
        return _FEEDS.setdefault(self._feed_id, _Feed())

    def feed(self, values: Sequence[Any], message_id: Any = None) -> None:
        """Queue ``values`` to be emitted with ``message_id`` (None: a new UUID, as Storm).

        Raises:
            ConfigError: the values do not match the spout's fields.
        """
        if len(values) != len(self.fields):
            msg = (f"FeederSpout.feed({list(values)!r}): {len(values)} value(s) for fields "
                   f"{self.fields.to_list()}")
            raise ConfigError(msg)
        self._feed.queue.append((list(values), str(uuid.uuid4()) if message_id is None
                                 else message_id))

    def feed_no_wait(self, values: Sequence[Any], message_id: Any = None) -> None:
        """Storm's ``feedNoWait``: the same as :meth:`feed` (feeding never blocks here)."""
        self.feed(values, message_id)

    @property
    def pending(self) -> int:
        """How many fed tuples have not been emitted yet."""
        return len(self._feed.queue)

    def set_ack_fail_delegate(self, delegate: Any) -> None:
        """Call ``delegate.ack(message_id)`` / ``delegate.fail(message_id)`` (Storm's)."""
        self._feed.delegate = delegate

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The fields given to the constructor."""
        declarer.declare(self.fields)

    def open(self, conf: dict[str, Any], context: TopologyContext,
             collector: SpoutOutputCollector) -> None:
        """Keep the collector."""
        self._collector = collector

    def next_tuple(self) -> None:
        """Emit the next fed tuple, if any."""
        if self._feed.queue:
            values, message_id = self._feed.queue.popleft()
            self._collector.emit(values, message_id)

    def ack(self, msg_id: Any) -> None:
        """Pass the ack to the delegate, if one is set."""
        if self._feed.delegate is not None:
            self._feed.delegate.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        """Pass the fail to the delegate, if one is set."""
        if self._feed.delegate is not None:
            self._feed.delegate.fail(msg_id)
