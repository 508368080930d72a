"""Un-acked tuples of a Kafka (or list) spout: what its source needs to plan the next batch.

After each batch the driver writes a :class:`SpoutBook` for every tracked spout: the offsets
its consumer group may commit (never past an un-acked offset), the failed messages waiting
for their retry, when the oldest pending tree times out, and how many tuples are un-acked.
The source (a separate process, Spark's) reads it in ``latestOffset`` and adds to the next
batch's end offsets, under :data:`ACKING_KEY`, the retries that are due and the time it
planned the batch at. Spark writes those end offsets to its offset log before the batch
runs, so a replay of the batch re-emits the same retries with the same time. Both sources
plan with :func:`next_batch` (a list spout's rows are records of the topic
:data:`~kstorm.acking.offsets.LIST_TOPIC`).

Example:
    >>> book = SpoutBook(batch_id=3, committable={("t", 0): 7},
    ...                  retries=[("t", 0, 7, 1, 1_000)], next_timeout_ms=5_000, outstanding=1)
    >>> plan = book.plan(now_ms=2_000, max_pending=10)
    >>> plan.retries, plan.tick, plan.new_cap
    ([('t', 0, 7, 1)], False, 9)
    >>> book.wait_ms(now_ms=500)  # the retry is due at 1,000
    500
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

MAX_IDLE_WAIT_S = 1.0
"""An available-now source waiting for un-acked tuples looks at its book this often."""

ACKING_KEY = "@acking"
"""Key of the reliability marks in a batch's end offsets (not a legal topic name)."""


E = TypeVar("E")

Retry = tuple[str, int, int, int]
"""``(topic, partition, offset, attempt)`` of a message to re-emit."""


@dataclass(frozen=True)
class ReplayPlan:
    """What the next batch of a tracked spout adds to its new offsets.

    Attributes:
        retries: due retries, earliest first.
        tick: whether a pending tree's timeout has passed (run a batch even without data).
        new_cap: at most this many new offsets (``topology.max.spout.pending``), or None.
    """

    retries: list[Retry]
    tick: bool
    new_cap: int | None

    @property
    def has_work(self) -> bool:
        """Whether the batch is needed even when no new record arrived."""
        return bool(self.retries) or self.tick


@dataclass(frozen=True)
class SpoutBook:
    """The un-acked state of one spout after a batch, as its source needs it.

    Attributes:
        batch_id: the batch it was written after.
        committable: per partition, the offset the consumer group may commit.
        retries: ``(topic, partition, offset, attempt, due_ms)`` of waiting messages.
        next_timeout_ms: when the oldest pending tree times out (None: none pending).
        outstanding: un-acked tuples (pending or waiting for a retry).
    """

    batch_id: int
    committable: Mapping[tuple[str, int], int] = field(default_factory=dict)
    retries: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    next_timeout_ms: int | None = None
    outstanding: int = 0

    def plan(self, now_ms: int, max_pending: int | None) -> ReplayPlan:
        """Due retries, whether to tick, and the cap on new offsets at ``now_ms``."""
        due = sorted((r for r in self.retries if r[4] <= now_ms), key=lambda r: (r[4], r[:4]))
        retries = [(t, p, o, a) for t, p, o, a, _ in due]
        if max_pending is not None:
            retries = retries[:max(max_pending, 1)]
        tick = self.next_timeout_ms is not None and now_ms >= self.next_timeout_ms
        cap = None if max_pending is None else max(0, max_pending - self.outstanding)
        return ReplayPlan(retries, tick, cap)

    def wait_ms(self, now_ms: int) -> int | None:
        """Milliseconds until a retry is due or a tree times out (None: nothing waits)."""
        times = [r[4] for r in self.retries]
        if self.next_timeout_ms is not None:
            times.append(self.next_timeout_ms)
        return None if not times else max(0, min(times) - now_ms)

    @property
    def idle(self) -> bool:
        """Whether nothing is un-acked."""
        return self.outstanding == 0 and not self.retries

    def to_json(self) -> str:
        """The file form."""
        return json.dumps({
            "batch_id": self.batch_id,
            "committable": [[t, p, o] for (t, p), o in sorted(self.committable.items())],
            "retries": [list(r) for r in self.retries],
            "next_timeout_ms": self.next_timeout_ms,
            "outstanding": self.outstanding,
        })

    @classmethod
    def load(cls, path: str) -> SpoutBook:
        """The book at ``path`` (an empty one before the first batch wrote it)."""
        try:
            with open(path) as f:
                return cls.from_json(f.read())
        except FileNotFoundError:
            return cls(-1)

    @classmethod
    def from_json(cls, text: str) -> SpoutBook:
        """Parse :meth:`to_json`'s output."""
        data: dict[str, Any] = json.loads(text)
        return cls(int(data["batch_id"]),
                   {(str(t), int(p)): int(o) for t, p, o in data["committable"]},
                   [(str(t), int(p), int(o), int(a), int(d)) for t, p, o, a, d in data["retries"]],
                   data["next_timeout_ms"], int(data["outstanding"]))


def next_batch(book: SpoutBook, max_pending: int | None,
               new_end: Callable[[int | None], tuple[E, bool]], *, waits: bool,
               clock_ms: Callable[[], int], sleep: Callable[[float], None]
               ) -> tuple[int, ReplayPlan, E] | None:
    """Plan a tracked spout's next batch: ``(planned time, replay plan, end)``, or None.

    ``new_end(cap)`` is the source's end for at most ``cap`` new tuples (None: no cap) and
    whether it holds any. A batch is planned when it does, or a retry is due, or a tree
    timed out (Storm's tick). Otherwise, when ``waits`` (an available-now run, which must
    not end while a tuple is un-acked), it sleeps until the next retry or time-out (at most
    :data:`MAX_IDLE_WAIT_S` between looks); else there is no batch (None).

    Example:
        >>> book = SpoutBook(0, retries=[("t", 0, 7, 1, 1_000)], outstanding=1)
        >>> times = iter([500, 1_000])
        >>> next_batch(book, None, lambda cap: (0, False), waits=True,
        ...            clock_ms=lambda: next(times), sleep=lambda s: None)
        (1000, ReplayPlan(retries=[('t', 0, 7, 1)], tick=False, new_cap=None), 0)
    """
    while True:
        now = clock_ms()
        plan = book.plan(now, max_pending)
        end, moved = new_end(plan.new_cap)
        if moved or plan.has_work:
            return now, plan, end
        wait = book.wait_ms(now)
        if not waits or wait is None:
            return None
        sleep(min(wait / 1000, MAX_IDLE_WAIT_S) + 0.001)


def marks(now_ms: int, retries: list[Retry]) -> dict[str, Any]:
    """``{ACKING_KEY: ...}`` to merge into a batch's end offsets."""
    return {ACKING_KEY: {"now": now_ms, "retry": [list(r) for r in retries]}}


def read_marks(end_offsets: Mapping[str, Any]) -> tuple[int | None, list[Retry]]:
    """``(planned time, retries)`` recorded in a batch's end offsets (``(None, [])``: none)."""
    data = end_offsets.get(ACKING_KEY)
    if not isinstance(data, Mapping):
        return None, []
    retries = [(str(t), int(p), int(o), int(a)) for t, p, o, a in data.get("retry", [])]
    return int(data["now"]), retries


def committable_offsets(ends: Mapping[tuple[str, int], int],
                        lowest_unacked: Mapping[tuple[str, int], int]
                        ) -> dict[tuple[str, int], int]:
    """Per partition: the lowest un-acked offset, or the batch's end when all are acked.

    Example:
        >>> committable_offsets({("t", 0): 10, ("t", 1): 4}, {("t", 0): 6})
        {('t', 0): 6, ('t', 1): 4}
    """
    out = dict(ends)
    for tp, low in lowest_unacked.items():
        out[tp] = min(low, out.get(tp, low))
    return out
