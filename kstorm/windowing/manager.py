"""Storm's ``WindowManager`` with its trigger and eviction policies, as one plain class.

One :class:`WindowManager` per bolt task holds the tuples of its windows and decides when a
window fires and which tuples it contains. It has no clock, threads, Spark or I/O: the caller
feeds tuples with their timestamps and tells it the time, as watermarks (event time) or as
processing time, and gets back the windows to pass to ``execute``. All eight window shapes of
seed 004 follow from two choices:

* **Trigger** (sliding interval). A :class:`Duration` fires windows ending on multiples of the
  interval, the first one at the ceiling of the earliest timestamp; ends with no tuples are
  skipped (Storm ``WatermarkTimeTriggerPolicy`` / ``TimeTriggerPolicy``). A :class:`Count`
  fires after every n-th tuple, the window ending at that tuple (``WatermarkCountTriggerPolicy``
  / ``CountTriggerPolicy``).
* **Eviction** (window length). A :class:`Duration` L keeps tuples with
  ``end - L < ts <= end`` (``TimeEvictionPolicy``); a :class:`Count` N keeps the last N tuples up
  to the end (``CountEvictionPolicy``).

Event time: a window ending at ``E`` fires once a watermark ``>= E`` arrives, holding the tuples
received before it. A tuple is **late** (``add`` returns False, it joins no window) if its
timestamp is below the last watermark, or equals the end of a window that already fired: the
window has moved past it (seed 004). Processing time: ``add`` stamps never go back in time, a
duration window ending at ``E`` fires once ``on_processing_time(now)`` has ``now > E`` (so
windows close on an idle stream), count windows fire at the tuple that completes them and are
returned by the next ``on_processing_time`` call (call it after each ``add`` for Storm's
immediate firing). Nothing is ever late in processing time.

Differences from Storm, all deterministic refinements of timing-dependent behaviour: tuples are
ordered by (timestamp, arrival) rather than by arrival alone, so count triggers and count
windows follow event time when tuples arrive out of order; tuples expiring while no window
fires are reported by the next window's ``get_expired`` instead of being dropped; and there is
no ``STOP`` shortcut in the eviction scan, so a tuple arriving after one from far in the future
is still evaluated.

The trigger and eviction policies are one class here (Storm has six) because they share one
sorted buffer of tuples; that is also why this module is longer than most.

Cost: ``add`` is O(1) (O(log n) for an event-time tuple older than the previous one); firing a
window costs O(log n) plus its evicted tuples; a :class:`TupleWindow` is a view, copying nothing.

Example:
    >>> from kstorm.windowing import Duration, WindowConfig
    >>> m = WindowManager(WindowConfig(Duration.seconds(10), tumbling=True, timestamp_field="ts"))
    >>> m.add("a", 1_000), m.add("b", 9_000), m.add("c", 12_000)
    (True, True, True)
    >>> [(w.get_start_timestamp(), w.get_end_timestamp(), w.get()) for w in m.on_watermark(11_000)]
    [(0, 10000, ['a', 'b'])]
    >>> m.add("late", 5_000)
    False
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from heapq import heappop, heappush, merge
from typing import Any

from kstorm.errors import ConfigError
from kstorm.windowing.config import WindowConfig
from kstorm.windowing.durations import Count, Duration
from kstorm.windowing.message_ids import MessageIdLedger, Replay
from kstorm.windowing.window import TupleWindow, UnsupportedOperationError

_INF = float("inf")  # bisect key part: after every tuple with the same timestamp
_REPLAY_SEQ0 = -(1 << 62)  # re-added tuples sort before every tuple received after the restart
_VERSION = 1


def default_source(item: Any) -> Hashable:
    """Source of a :class:`kstorm.Tuple` for message-id bookkeeping: component, stream, task."""
    return (getattr(item, "source_component", None), getattr(item, "source_stream", None),
            getattr(item, "source_task", None))


def _ceil(ts: int, step: int) -> int:
    return -((-ts) // step) * step


def _shape(config: WindowConfig) -> tuple[Any, ...]:
    def unit(v: Any) -> tuple[str, int]:
        return ("count", v.n) if isinstance(v, Count) else ("ms", v.ms)
    shape = (unit(config.window_length), unit(config.sliding_interval), config.is_event_time)
    # (the default rule adds nothing: snapshots of earlier versions keep restoring)
    return shape if config.boundaries == "end-inclusive" else (*shape, config.boundaries)


class WindowManager:
    """Windows of one bolt task: add tuples, advance time, get the windows that fired.

    Args:
        config: The bolt's window configuration.
        source_of: With ``message_id_field``: the source a tuple's id is monotonic within
            (e.g. its Kafka topic-partition); defaults to :func:`default_source`. Picklable.
    """

    def __init__(self, config: WindowConfig,
                 source_of: Callable[[Any], Hashable] | None = None) -> None:
        self.config = config
        length, sliding = config.window_length, config.sliding_interval
        self._length_ms = length.ms if isinstance(length, Duration) else None
        self._length_n = length.n if isinstance(length, Count) else 0
        self._slide_ms = sliding.ms if isinstance(sliding, Duration) else 0
        self._slide_n = sliding.n if isinstance(sliding, Count) else 0
        self._event_time = config.is_event_time
        # bisect key part at a window bound: end-inclusive windows (Storm) hold ts == end and
        # not ts == start; start-inclusive ones hold ts == start and not ts == end
        self._bound = -_INF if config.boundaries == "start-inclusive" else _INF
        self._id_of = config.message_id_extractor
        self._source_of = source_of or default_source
        self._ledger = MessageIdLedger() if self._id_of is not None else None
        #: Bumped whenever earlier :class:`TupleWindow` views become invalid.
        self.epoch = 0
        #: Keep the items no later window holds for :meth:`take_released` (at least once).
        self.record_released = False
        self._clear()

    def _clear(self) -> None:
        self._entries: list[tuple[int, int, Any]] = []  # released, sorted by (ts, seq)
        self._head = 0  # entries before it are evicted (dropped at the next compaction)
        self._pending: deque[tuple[int, int, Any]] = deque()  # event time, in order
        self._heap: list[tuple[int, int, Any]] = []  # event time, out of order
        self._replayed: list[tuple[int, int, Any]] = []  # re-added after a restart
        self._seq = 0
        self._replay_seq = _REPLAY_SEQ0
        self._clock: int | None = None  # last watermark / last processing time
        self._min_ts: int | None = None  # lower timestamps are late (event time) or raised
        self._last_end: tuple[int, float] | None = None  # bisect key of last fired window
        self._last_end_ts: int | None = None
        self._next_end: int | None = None  # duration trigger: next window end
        self._uncounted = 0  # count trigger: tuples since the last one
        self._marks: list[tuple[int, int]] = []  # count triggers not evaluated yet
        self._expired: list[Any] = []  # evicted, not reported by a window yet
        self._released: list[Any] = []  # evicted since the last take_released()
        self._late = 0

    # -- input -------------------------------------------------------------------------------

    def count_late(self) -> None:
        """Count one tuple found late before :meth:`add` (by its stream's clock)."""
        self._late += 1

    def add(self, item: Any, ts: int) -> bool:
        """Track ``item`` with timestamp ``ts`` (ms; event time, or the processing time now).

        Returns:
            False if the tuple is late (it joins no window; emit it on the late-tuple stream).
        """
        if self._ledger is not None:
            return self._add_with_id(item, ts)
        return self._add(item, ts)

    def _add(self, item: Any, ts: int) -> bool:
        floor = self._min_ts
        if self._event_time:
            if floor is not None and ts < floor:
                self._late += 1
                return False
            seq = self._seq
            self._seq = seq + 1
            pending = self._pending
            if pending and ts < pending[-1][0]:
                heappush(self._heap, (ts, seq, item))
            else:
                pending.append((ts, seq, item))
            return True
        if floor is not None and ts < floor:
            ts = floor
        else:
            self._min_ts = ts
        seq = self._seq
        self._seq = seq + 1
        self._entries.append((ts, seq, item))
        if self._slide_n:
            self._count(ts, seq)
        return True

    def _count(self, ts: int, seq: int) -> None:
        self._uncounted += 1
        if self._uncounted == self._slide_n:
            self._marks.append((ts, seq))
            self._uncounted = 0

    def _add_with_id(self, item: Any, ts: int) -> bool:
        ledger: Any = self._ledger
        id_of: Any = self._id_of
        key, msg_id = self._source_of(item), id_of(item)
        verdict = ledger.classify(key, msg_id)
        if verdict is Replay.DISCARD:
            return True
        if verdict is Replay.REPLAY:
            if not self._event_time and self._last_end_ts is not None:
                ts = min(ts, self._last_end_ts)  # its processing time is gone; keep it evaluated
            self._replayed.append((ts, self._replay_seq, item))
            self._replay_seq += 1
            return True
        accepted = self._add(item, ts)
        (ledger.seen if accepted else ledger.late)(key, msg_id)
        return accepted

    # -- time --------------------------------------------------------------------------------

    def on_watermark(self, watermark: int) -> list[TupleWindow]:
        """Event time advanced to ``watermark``: the windows ending at or before it, in order.

        A watermark not above the previous one changes nothing.
        """
        if not self._event_time:
            msg = (
                "on_watermark() needs event time (with_timestamp_field/extractor); "
                "use on_processing_time() for processing-time windows"
            )
            raise UnsupportedOperationError(msg)
        if self._clock is not None and watermark <= self._clock:
            return []
        self._clock = watermark
        windows = self._advance(watermark)
        last = self._last_end
        at_end = last is not None and last[1] == _INF and self._last_end_ts == watermark
        self._min_ts = watermark + 1 if at_end else watermark
        return windows

    def on_processing_time(self, now: int) -> list[TupleWindow]:
        """Processing time is ``now`` (ms): the windows that fired, in order."""
        if self._event_time:
            msg = (
                "on_processing_time() is for processing-time windows; this bolt uses event "
                "time, advance it with on_watermark()"
            )
            raise UnsupportedOperationError(msg)
        if self._clock is not None and now < self._clock:
            now = self._clock
        self._clock = now
        windows = self._advance(now - 1)
        if self._min_ts is None or now > self._min_ts:
            self._min_ts = now
        return windows

    def _advance(self, limit: int) -> list[TupleWindow]:
        self.epoch += 1
        self._compact()
        if self._event_time:
            self._release(limit)
        windows: list[TupleWindow] = []
        if self._slide_n:
            for ts, seq in self._marks:
                window = self._evaluate((ts, seq + 1), ts)
                if window is not None:
                    windows.append(window)
            self._marks.clear()
        else:
            self._tick(limit, windows)
        return windows

    def _release(self, limit: int) -> None:
        pending, heap, entries = self._pending, self._heap, self._entries
        counting = bool(self._slide_n)
        while True:
            if pending and pending[0][0] <= limit:
                entry = heappop(heap) if heap and heap[0] < pending[0] else pending.popleft()
            elif heap and heap[0][0] <= limit:
                entry = heappop(heap)
            else:
                return
            entries.append(entry)
            if counting:
                self._count(entry[0], entry[1])

    def _tick(self, limit: int, windows: list[TupleWindow]) -> None:
        step, entries, end = self._slide_ms, self._entries, self._next_end
        if end is None:
            if self._head >= len(entries):
                return
            end = self._first_end(entries[self._head][0])
        while end <= limit:
            window = self._evaluate((end, self._bound), end)
            if window is not None:
                windows.append(window)
                end += step
                continue
            i = bisect_left(entries, (end, self._bound), lo=self._head)  # skip empty windows
            if i >= len(entries):
                break
            end = self._first_end(entries[i][0])
        self._next_end = end

    def _first_end(self, ts: int) -> int:
        """The end of the first window holding ``ts`` (on the sliding interval)."""
        step = self._slide_ms
        return ts // step * step + step if self._bound < 0 else _ceil(ts, step)

    def _evaluate(self, end_key: tuple[int, float], end_ts: int) -> TupleWindow | None:
        entries, head = self._entries, self._head
        hi = bisect_left(entries, end_key, lo=head)
        if self._length_ms is not None:
            start_ts: int | None = end_ts - self._length_ms
            lo = bisect_left(entries, (start_ts, self._bound), lo=head, hi=hi)
        else:
            start_ts, lo = None, max(head, hi - self._length_n)
        if lo > head:
            self._evict(head, lo)
        if lo == hi:
            return None
        new_lo = lo if self._last_end is None else bisect_left(entries, self._last_end, lo, hi)
        window = TupleWindow(self, entries, lo, new_lo, hi, self._expired, start_ts, end_ts,
                             self.config.persistent)
        self._expired = []
        self._last_end, self._last_end_ts = end_key, end_ts
        if self.record_released:  # at least once they are acked now: no window needs them
            done = self._in_no_later_window(lo, hi, end_ts)
            self._released.extend(entry[2] for entry in entries[lo:done])
        if self._ledger is not None:
            source_of, id_of, ledger = self._source_of, self._id_of, self._ledger
            for i in range(new_lo, hi):
                item = entries[i][2]
                ledger.evaluated(source_of(item), id_of(item))  # type: ignore[misc]
        return window

    def _in_no_later_window(self, lo: int, hi: int, end_ts: int) -> int:
        """Entries ``[lo, result)`` of the window just fired belong to no later window.

        The next window of the same shape starts one sliding interval later: a tumbling
        window's tuples are all done; a sliding one's oldest. Mixed shapes (a count length
        with a time slide, or the reverse) cannot tell yet: their tuples are done when
        evicted.
        """
        if self._length_n and self._slide_n:
            return max(lo, min(hi, hi + self._slide_n - self._length_n))
        if self._length_ms is not None and self._slide_ms:
            start = end_ts + self._slide_ms - self._length_ms
            return bisect_left(self._entries, (start, self._bound), lo, hi)
        return lo

    def _evict(self, head: int, lo: int) -> None:
        evicted = [entry[2] for entry in self._entries[head:lo]]
        self._expired.extend(evicted)
        if self.record_released:
            self._released.extend(evicted)
        self._head = lo
        if self._ledger is not None:
            source_of, id_of, ledger = self._source_of, self._id_of, self._ledger
            for item in evicted:
                ledger.expired(source_of(item), id_of(item))  # type: ignore[misc]

    def _compact(self) -> None:
        if self._replayed:
            self._replayed.sort()
            self._entries = list(merge(self._replayed, self._entries[self._head:]))
            self._replayed, self._head = [], 0
        elif self._head and self._head * 2 >= len(self._entries):
            del self._entries[:self._head]
            self._head = 0

    def next_window_end(self) -> int | None:
        """The end of the next window that will hold a tuple (processing-time duration slides).

        The window fires once ``on_processing_time(now)`` has ``now > end``.

        ``None`` when no held tuple can be in a later window, or for other shapes (count
        triggers fire on tuples, event-time windows on watermarks).

        Example:
            >>> from kstorm.windowing import Duration, WindowConfig
            >>> m = WindowManager(WindowConfig(Duration.seconds(10), tumbling=True))
            >>> m.add("a", 12_000)
            True
            >>> m.next_window_end()
            20000
        """
        if self._event_time or self._slide_n:
            return None
        entries, head = self._entries, self._head
        if head >= len(entries):
            return None
        end = self._next_end
        if end is None:
            return self._first_end(entries[head][0])
        if self._length_ms is None:
            return end
        i = bisect_left(entries, (end - self._length_ms, self._bound), lo=head)
        if i >= len(entries):
            return None
        return max(end, self._first_end(entries[i][0]))

    # -- state -------------------------------------------------------------------------------

    @property
    def late_count(self) -> int:
        """Number of late tuples so far."""
        return self._late

    @property
    def size(self) -> int:
        """Tuples held: in windows, or waiting for the watermark or a trigger."""
        held = len(self._entries) - self._head + len(self._pending) + len(self._heap)
        return held + len(self._replayed)

    def take_released(self) -> list[Any]:
        """The items evicted since the last call: in no window from now on."""
        released, self._released = self._released, []
        return released

    def held(self) -> Iterator[Any]:
        """Every item the manager still holds (in a window to come, or waiting for one)."""
        for part in (self._entries[self._head:], self._pending, self._heap, self._replayed):
            for entry in part:
                yield entry[2]

    @property
    def ledger(self) -> MessageIdLedger | None:
        """Message-id bookkeeping (with ``message_id_field``), else ``None``."""
        return self._ledger

    def snapshot(self, *, compact: bool = False) -> dict[str, Any]:
        """The complete state as plain, picklable data (tuples included).

        Args:
            compact: Leave out tuples of windows that already fired (needs
                ``message_id_field``); after :meth:`restore`, re-read the sources from
                ``ledger.replay_ranges()`` and :meth:`add` those tuples again.
        """
        entries = self._entries[self._head:]
        replayed = sorted(self._replayed)
        if compact:
            if self._ledger is None:
                msg = "a compact window snapshot needs with_message_id_field(...)"
                raise ConfigError(msg)
            if self._last_end is not None:
                entries = entries[bisect_left(entries, self._last_end):]
            replayed = []
        return {
            "version": _VERSION, "shape": _shape(self.config), "compact": compact,
            "entries": entries, "pending": list(self._pending), "heap": list(self._heap),
            "replayed": replayed, "seq": self._seq, "replay_seq": self._replay_seq,
            "clock": self._clock, "min_ts": self._min_ts, "last_end": self._last_end,
            "last_end_ts": self._last_end_ts, "next_end": self._next_end,
            "uncounted": self._uncounted, "marks": list(self._marks),
            "expired": list(self._expired), "late": self._late,
            "ledger": None if self._ledger is None else self._ledger.snapshot(),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace the state with a :meth:`snapshot` (of a manager with the same windows)."""
        if snapshot.get("version") != _VERSION:
            msg = (
                f"unsupported window snapshot version {snapshot.get('version')!r}; "
                f"expected {_VERSION}"
            )
            raise ConfigError(msg)
        if tuple(snapshot["shape"]) != _shape(self.config):
            msg = (
                f"window snapshot was taken with windows {snapshot['shape']}, "
                f"this bolt has {_shape(self.config)}"
            )
            raise ConfigError(msg)
        self.epoch += 1
        self._clear()
        self._entries = list(snapshot["entries"])
        self._pending = deque(snapshot["pending"])
        self._heap = list(snapshot["heap"])
        self._replayed = list(snapshot["replayed"])
        self._seq, self._replay_seq = snapshot["seq"], snapshot["replay_seq"]
        self._clock, self._min_ts = snapshot["clock"], snapshot["min_ts"]
        self._last_end_ts, self._next_end = snapshot["last_end_ts"], snapshot["next_end"]
        self._uncounted, self._late = snapshot["uncounted"], snapshot["late"]
        self._last_end = None if snapshot["last_end"] is None else tuple(snapshot["last_end"])
        self._marks = [tuple(m) for m in snapshot["marks"]]
        self._expired = list(snapshot["expired"])
        if self._ledger is not None and snapshot["ledger"] is not None:
            self._ledger.restore(snapshot["ledger"])
            if snapshot["compact"]:
                source_of, id_of = self._source_of, self._id_of
                held = [e[2] for e in (*self._entries, *self._pending, *self._heap)]
                self._ledger.begin_recovery((source_of(i), id_of(i)) for i in held)  # type: ignore[misc]
