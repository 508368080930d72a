"""storm-starter's ``tools`` package and Storm's ``RotatingMap``, ported as written.

Ports ``storm-starter/src/jvm/org/apache/storm/starter/tools/``: ``Rankable.java``,
``RankableObjectWithFields.java``, ``Rankings.java``, ``SlotBasedCounter.java``,
``SlidingWindowCounter.java``, ``NthLastModifiedTimeTracker.java``; and
``storm-client/src/jvm/org/apache/storm/utils/RotatingMap.java``, which
``SingleJoinBolt`` uses (kstorm has no ``RotatingMap`` of its own).

Changes beyond syntax, each forced by Python:

- ``RankableObjectWithFields.from(tuple)`` is :meth:`RankableObjectWithFields.from_tuple`
  (``from`` is a Python keyword).
- ``compareTo`` is kept and backs ``__lt__``, so ``list.sort()`` sorts as
  ``Collections.sort`` does (both are stable); ``equals``/``hashCode`` are ``__eq__`` and
  ``__hash__``.
- Guava's ``ImmutableList`` is a Python ``tuple``; ``synchronized`` blocks are gone (a kstorm
  task runs one thread); ``ArrayBlockingQueue`` is a ``deque`` with the same take/offer/poll
  steps.
- ``Time.currentTimeMillis()`` (``NthLastModifiedTimeTracker``) is the wall clock: kstorm
  has no Storm ``Time`` that simulated-time tests can move, so in the test driver the
  tracker measures real time, not the driver's clock (it only feeds a log line and the
  ``actualWindowLengthInSeconds`` field).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from kstorm import Tuple

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class Rankable:
    """``Rankable``: an object and its count, comparable by count."""

    def get_object(self) -> Any:
        """The ranked object."""
        raise NotImplementedError

    def get_count(self) -> int:
        """Its count."""
        raise NotImplementedError

    def copy(self) -> Rankable:
        """A (shallow) copy."""
        raise NotImplementedError

    def compare_to(self, other: Rankable) -> int:
        """``compareTo``: by count."""
        raise NotImplementedError

    def __lt__(self, other: Rankable) -> bool:
        return self.compare_to(other) < 0


class RankableObjectWithFields(Rankable):
    """Wraps an object and its count, including any additional data fields."""

    TO_STRING_SEPARATOR = "|"

    def __init__(self, obj: Any, count: int, *other_fields: Any) -> None:
        if obj is None:
            raise ValueError("The object must not be null")  # noqa: EM101 - as Storm's
        if count < 0:
            raise ValueError("The count must be >= 0")  # noqa: EM101 - as Storm's
        self.obj = obj
        self.count = count
        self.fields = tuple(other_fields)

    @staticmethod
    def from_tuple(tuple_: Tuple) -> RankableObjectWithFields:
        """``from(Tuple)``: the object in field 0, its count in field 1, then other fields."""
        other_fields = list(tuple_.get_values())
        obj = other_fields.pop(0)
        count = int(other_fields.pop(0))
        return RankableObjectWithFields(obj, count, *other_fields)

    def get_object(self) -> Any:
        """The ranked object."""
        return self.obj

    def get_count(self) -> int:
        """Its count."""
        return self.count

    def get_fields(self) -> tuple[Any, ...]:
        """An immutable list of any additional data fields (maybe empty, never null)."""
        return self.fields

    def compare_to(self, other: Rankable) -> int:
        """By count: 1, -1 or 0."""
        delta = self.get_count() - other.get_count()
        if delta > 0:
            return 1
        elif delta < 0:
            return -1
        else:
            return 0

    def __eq__(self, o: object) -> bool:
        if self is o:
            return True
        if not isinstance(o, RankableObjectWithFields):
            return False
        return self.obj == o.obj and self.count == o.count

    def __hash__(self) -> int:
        return hash((self.count, self.obj))

    def __repr__(self) -> str:
        sep = self.TO_STRING_SEPARATOR
        return "[" + sep.join(str(v) for v in (self.obj, self.count, *self.fields)) + "]"

    def copy(self) -> Rankable:
        """A shallow copy (the object and the fields are not copied)."""
        return RankableObjectWithFields(self.get_object(), self.get_count(), *self.get_fields())


class Rankings:
    """The top ``top_n`` rankables by count (``Rankings.java``)."""

    DEFAULT_COUNT = 10

    def __init__(self, top_n: int | Rankings = DEFAULT_COUNT) -> None:
        other = top_n if isinstance(top_n, Rankings) else None  # Rankings(Rankings other)
        if other is not None:
            top_n = other.max_size()
        if top_n < 1:  # type: ignore[operator]
            raise ValueError("topN must be >= 1")  # noqa: EM101 - as Storm's
        self._max_size: int = top_n  # type: ignore[assignment]
        self.ranked_items: list[Rankable] = []
        if other is not None:
            self.update_with(other)

    def max_size(self) -> int:
        """The maximum number of ranked objects this instance can hold."""
        return self._max_size

    def size(self) -> int:
        """The number of ranked objects this instance holds."""
        return len(self.ranked_items)

    def get_rankings(self) -> tuple[Rankable, ...]:
        """A somewhat defensive copy of the ranked items."""
        return tuple(r.copy() for r in self.ranked_items)

    def update_with(self, r: Rankings | Rankable) -> None:
        """Merge another ``Rankings``, or add or replace one ``Rankable``."""
        if isinstance(r, Rankings):
            for rankable in r.get_rankings():
                self.update_with(rankable)
            return
        self._add_or_replace(r)
        self._rerank()
        self._shrink_rankings_if_needed()

    def _add_or_replace(self, r: Rankable) -> None:
        rank = self._find_rank_of(r)
        if rank is not None:
            self.ranked_items[rank] = r
        else:
            self.ranked_items.append(r)

    def _find_rank_of(self, r: Rankable) -> int | None:
        tag = r.get_object()
        for rank in range(len(self.ranked_items)):
            cur = self.ranked_items[rank].get_object()
            if cur == tag:
                return rank
        return None

    def _rerank(self) -> None:
        self.ranked_items.sort()
        self.ranked_items.reverse()

    def _shrink_rankings_if_needed(self) -> None:
        if len(self.ranked_items) > self._max_size:
            del self.ranked_items[self._max_size]

    def prune_zero_counts(self) -> None:
        """Remove the ranking entries that have a count of zero."""
        i = 0
        while i < len(self.ranked_items):
            if self.ranked_items[i].get_count() == 0:
                del self.ranked_items[i]
            else:
                i += 1

    def __repr__(self) -> str:
        return repr(self.ranked_items)

    def copy(self) -> Rankings:
        """A (defensive) copy of itself."""
        return Rankings(self)


class SlotBasedCounter(Generic[T]):
    """Per-slot counts of the occurrences of objects."""

    def __init__(self, num_slots: int) -> None:
        if num_slots <= 0:
            msg = f"Number of slots must be greater than zero (you requested {num_slots})"
            raise ValueError(msg)
        self.obj_to_counts: dict[T, list[int]] = {}
        self.num_slots = num_slots

    def increment_count(self, obj: T, slot: int) -> None:
        """One more ``obj`` in ``slot``."""
        counts = self.obj_to_counts.get(obj)
        if counts is None:
            counts = [0] * self.num_slots
            self.obj_to_counts[obj] = counts
        counts[slot] += 1

    def get_count(self, obj: T, slot: int) -> int:
        """``obj``'s count in ``slot``."""
        counts = self.obj_to_counts.get(obj)
        if counts is None:
            return 0
        else:
            return counts[slot]

    def get_counts(self) -> dict[T, int]:
        """Each object's total over the slots."""
        result: dict[T, int] = {}
        for obj in self.obj_to_counts:
            result[obj] = self._compute_total_count(obj)
        return result

    def _compute_total_count(self, obj: T) -> int:
        return sum(self.obj_to_counts[obj])

    def wipe_slot(self, slot: int) -> None:
        """Reset the slot count of any tracked objects to zero for the given slot."""
        for obj in self.obj_to_counts:
            self._reset_slot_count_to_zero(obj, slot)

    def _reset_slot_count_to_zero(self, obj: T, slot: int) -> None:
        self.obj_to_counts[obj][slot] = 0

    def _should_be_removed_from_counter(self, obj: T) -> bool:
        return self._compute_total_count(obj) == 0

    def wipe_zeros(self) -> None:
        """Remove any object whose total count is zero (to free up memory)."""
        obj_to_be_removed = {obj for obj in self.obj_to_counts
                             if self._should_be_removed_from_counter(obj)}
        for obj in obj_to_be_removed:
            del self.obj_to_counts[obj]


class SlidingWindowCounter(Generic[T]):
    """Counts objects in a sliding window of ``window_length_in_slots`` slots.

    Each :meth:`get_counts_then_advance_window` returns the counts of the whole window, then
    starts counting in the next slot (wiping what it held).
    """

    def __init__(self, window_length_in_slots: int) -> None:
        if window_length_in_slots < 2:
            msg = ("Window length in slots must be at least two (you requested "
                   f"{window_length_in_slots})")
            raise ValueError(msg)
        self.window_length_in_slots = window_length_in_slots
        self.obj_counter: SlotBasedCounter[T] = SlotBasedCounter(self.window_length_in_slots)
        self.head_slot = 0
        self.tail_slot = self._slot_after(self.head_slot)

    def increment_count(self, obj: T) -> None:
        """One more ``obj`` in the head slot."""
        self.obj_counter.increment_count(obj, self.head_slot)

    def get_counts_then_advance_window(self) -> dict[T, int]:
        """Return the current (total) counts of all tracked objects, then advance the window."""
        counts = self.obj_counter.get_counts()
        self.obj_counter.wipe_zeros()
        self.obj_counter.wipe_slot(self.tail_slot)
        self._advance_head()
        return counts

    def _advance_head(self) -> None:
        self.head_slot = self.tail_slot
        self.tail_slot = self._slot_after(self.tail_slot)

    def _slot_after(self, slot: int) -> int:
        return (slot + 1) % self.window_length_in_slots


class NthLastModifiedTimeTracker:
    """Tracks the time-since-last-modify of a "thing" in a rolling fashion."""

    MILLIS_IN_SEC = 1000

    def __init__(self, num_times_to_track: int) -> None:
        if num_times_to_track < 1:
            msg = ("numTimesToTrack must be greater than zero (you requested "
                   f"{num_times_to_track})")
            raise ValueError(msg)
        self.capacity = num_times_to_track
        self.last_modified_times_millis: deque[int] = deque()
        self._init_last_modified_times_millis(num_times_to_track)

    def _init_last_modified_times_millis(self, num_times_to_track: int) -> None:
        now_cached = self._now()
        for _ in range(num_times_to_track):
            self.last_modified_times_millis.append(now_cached)

    @staticmethod
    def _now() -> int:
        return int(time.time() * 1000)  # Time.currentTimeMillis() (module docstring)

    def seconds_since_oldest_modification(self) -> int:
        """Seconds since the oldest tracked modification (taken off the queue)."""
        modified_time_millis = self.last_modified_times_millis.popleft()
        return (self._now() - modified_time_millis) // self.MILLIS_IN_SEC

    def mark_as_modified(self) -> None:
        """Record a modification now."""
        self._update_last_modified_time()

    def _update_last_modified_time(self) -> None:
        if len(self.last_modified_times_millis) >= self.capacity:  # offer() failed
            self.last_modified_times_millis.popleft()
        self.last_modified_times_millis.append(self._now())


class RotatingMap(Generic[K, V]):
    """Storm's ``RotatingMap``: a map of ``num_buckets`` buckets; ``rotate()`` expires the last.

    Expires keys that have not been updated within ``num_buckets - 1`` to ``num_buckets``
    rotations; the expired entries go to ``callback(key, value)``.
    """

    def __init__(self, num_buckets: int,
                 callback: Callable[[K, V], None] | None = None) -> None:
        if num_buckets < 2:
            raise ValueError("numBuckets must be >= 2")  # noqa: EM101 - as Storm's
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(num_buckets))
        self._callback = callback

    def rotate(self) -> dict[K, V]:
        """Drop the oldest bucket (its entries to the callback) and start a new one."""
        dead = self._buckets.pop()
        self._buckets.appendleft({})
        if self._callback is not None:
            for key, value in dead.items():
                self._callback(key, value)
        return dead

    def contains_key(self, key: K) -> bool:
        """Whether any bucket holds ``key``."""
        return any(key in bucket for bucket in self._buckets)

    def get(self, key: K) -> V | None:
        """``key``'s value, or None."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket[key]
        return None

    def put(self, key: K, value: V) -> None:
        """Put ``key`` in the newest bucket (and out of the others)."""
        it = iter(self._buckets)
        bucket = next(it)
        bucket[key] = value
        for older in it:
            older.pop(key, None)

    def remove(self, key: K) -> V | None:
        """Remove ``key``; its value, or None."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket.pop(key)
        return None

    def size(self) -> int:
        """How many keys it holds."""
        return sum(len(bucket) for bucket in self._buckets)
