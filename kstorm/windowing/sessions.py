"""Session windows: bursts of activity per key, separated by a gap of silence (pure logic).

A :class:`SessionWindowManager` replaces the :class:`~kstorm.windowing.WindowManager` of a
bolt declared with ``with_session_window(gap, max_duration=None, key_fields=None)``. It has
the same surface (``add``, ``on_watermark``, ``on_processing_time``, ``snapshot`` ...), so
the per-task runtime (``WindowedTask``) drives both, on Spark and in the test driver alike.

**Sessions.** Per task and per key (the values of the key fields), the tuples sorted by
timestamp are cut wherever two neighbours are more than ``gap`` apart; each piece is a
session. So a tuple that falls within ``gap`` of two sessions *merges* them. With
``max_duration`` a piece is further cut greedily from its first tuple ``f``: a session holds
the tuples up to ``f + max_duration``, the next one starts at the first tuple after that.
Both rules are functions of the set of tuples, not of their arrival order.

**End and firing.** A session's end is ``min(last + gap, first + max_duration)``: the last
timestamp a tuple could still join it at (inclusive). It fires ``execute(window)`` once,
when the clock passes its end -- the watermark (event time) or the processing time is
above the end. ``window.get_start_timestamp()`` is the first tuple's timestamp (inclusive,
unlike a sliding window's exclusive start), ``get_end_timestamp()`` the end above;
``get_new()`` is every tuple, ``get_expired()`` is empty. Sessions firing at one clock step
come in order of (end, start, arrival).

**Lateness** (event time; nothing is late in processing time). First the rule every
windowed bolt applies (``WindowedTask``: below its stream's latest timestamp minus the lag).
Then, for a tuple below the watermark: it is late iff it belongs to a session that already
fired (its timestamp is within ``[first - gap, end]`` of one: joining would change a result
already emitted), or the session it would be in after joining is already closed (its end is
below the watermark: e.g. a lone tuple more than ``gap`` below it). Otherwise it joins its
open session, even below the watermark. A tuple at or above the watermark is never late.

Cost: ``add`` is O(log s + t) for s sessions of the key and t tuples in the sessions it
joins; a clock step visits every open session once. State: the open sessions' tuples, and
(event time) the bounds of the fired sessions a tuple below the watermark could still hit:
the latest one of each key seen, or with ``max_duration`` those ending within it of the
watermark.

Example:
    >>> from kstorm.windowing import Duration, WindowConfig
    >>> m = SessionWindowManager(WindowConfig.session(Duration.millis(10),
    ...                                               timestamp_field="ts"))
    >>> [m.add(x, ts) for x, ts in [("a", 0), ("b", 8), ("c", 30), ("d", 17)]]
    [True, True, True, True]
    >>> [(w.get_start_timestamp(), w.get_end_timestamp(), w.get()) for w in m.on_watermark(35)]
    [(0, 27, ['a', 'b', 'd'])]
    >>> m.add("late", 25)  # would join the session that fired
    False
"""

from __future__ import annotations

import dataclasses
import pickle
from bisect import bisect_left, insort
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kstorm.errors import ConfigError
from kstorm.windowing.config import WindowConfig, field_value
from kstorm.windowing.window import TupleWindow, UnsupportedOperationError

__all__ = ["SessionKey", "SessionWindowManager", "bind_session_keys"]

_VERSION = 1
Entry = tuple[int, int, Any]  # (timestamp, arrival seq, item)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """The key a tuple's sessions are kept under: its values of ``fields`` (picklable).

    Unhashable values (lists, dicts) are keyed by their pickled bytes.

    Example:
        >>> SessionKey(("user",))({"user": "ann", "page": "/"})
        ('ann',)
        >>> SessionKey(())({"user": "ann"})
        ()
    """

    fields: tuple[str, ...]

    def __call__(self, item: Any) -> Hashable:
        """The key of ``item``."""
        values = tuple(field_value(item, name) for name in self.fields)
        try:
            hash(values)
        except TypeError:
            return pickle.dumps(values, protocol=5)
        return values


def bind_session_keys(config: WindowConfig, inputs: Sequence[Any], component: str
                      ) -> WindowConfig:
    """``config`` with its session key fields taken from the bolt's groupings.

    Explicit ``key_fields`` win. Otherwise, if the bolt's inputs are fields groupings on the
    same field names, sessions are per key of those fields (the tuples of one key all reach
    one task, so a key's sessions are complete there); with no fields grouping, sessions are
    per task (``()``). Fields groupings on different fields, or mixed with other groupings,
    are ambiguous: ``ConfigError`` asking for ``key_fields``.

    Args:
        config: the bolt's window configuration.
        inputs: its subscriptions (:class:`kstorm.grouping.Grouping`: ``fields`` is read).
        component: the bolt's id, for the message.

    Example:
        >>> from kstorm.grouping import Grouping, GroupingKind
        >>> from kstorm.tuple import Fields
        >>> from kstorm.windowing import Duration
        >>> cfg = WindowConfig.session(Duration.seconds(5))
        >>> g = Grouping(GroupingKind.FIELDS, "clicks", fields=Fields("user"))
        >>> bind_session_keys(cfg, [g], "sessions").session_key_fields
        ('user',)
    """
    if not config.is_session or config.session_key_fields is not None:
        return config
    keyed = {tuple(g.fields) for g in inputs if getattr(g, "fields", None) is not None}
    plain = [g for g in inputs if getattr(g, "fields", None) is None]
    if len(keyed) > 1 or (keyed and plain):
        described = sorted(str(g) for g in inputs)
        msg = (f"session windowed bolt {component!r}: cannot tell which fields its sessions "
               f"are per key of from its inputs {described}; pass "
               "with_session_window(gap, key_fields=[...])")
        raise ConfigError(msg)
    fields = keyed.pop() if keyed else ()
    return dataclasses.replace(config, session_key_fields=fields)


def _shape(config: WindowConfig) -> tuple[Any, ...]:
    top = config.session_max_duration
    return ("session", config.window_length.ms,  # type: ignore[union-attr]
            None if top is None else top.ms, config.session_key_fields or (),
            config.is_event_time)


class SessionWindowManager:
    """Session windows of one bolt task (the module docstring has the rules).

    Args:
        config: a session window configuration (``config.is_session``); its key fields,
            if still unbound (``None``), mean one session stream per task.
    """

    def __init__(self, config: WindowConfig) -> None:
        if not config.is_session:
            msg = "SessionWindowManager needs a session window config (with_session_window)"
            raise ConfigError(msg)
        self.config = config
        self._gap: int = config.window_length.ms  # type: ignore[union-attr]
        top = config.session_max_duration
        self._max: int | None = None if top is None else top.ms
        self._event_time = config.is_event_time
        self._key_of = SessionKey(config.session_key_fields or ())
        #: Bumped whenever earlier :class:`TupleWindow` views become invalid.
        self.epoch = 0
        #: Keep the items of fired sessions for :meth:`take_released` (at least once).
        self.record_released = False
        self._clear()

    def _clear(self) -> None:
        # key -> its open runs (gap-connected tuples, sorted), runs ordered by timestamp
        self._runs: dict[Hashable, list[list[Entry]]] = {}
        # key -> (first, end) of fired sessions a tuple below the watermark could still hit
        self._fired: dict[Hashable, list[tuple[int, int]]] = {}
        self._seq = 0
        self._clock: int | None = None
        self._late = 0
        self._released: list[Any] = []

    # -- input -------------------------------------------------------------------------------

    def count_late(self) -> None:
        """Count one tuple found late before :meth:`add` (by its stream's clock)."""
        self._late += 1

    def add(self, item: Any, ts: int) -> bool:
        """Track ``item`` at ``ts`` (ms: event time, or the processing time now).

        Returns:
            False if the tuple is late (module docstring): it joins no session.
        """
        if not self._event_time and self._clock is not None and ts < self._clock:
            ts = self._clock
        key = self._key_of(item)
        runs = self._runs.setdefault(key, [])
        gap = self._gap
        lo = bisect_left(runs, ts - gap, key=lambda run: run[-1][0])  # runs ending near ts
        hi = lo
        while hi < len(runs) and runs[hi][0][0] - gap <= ts:
            hi += 1
        entry = (ts, self._seq, item)
        merged = [e for run in runs[lo:hi] for e in run]
        insort(merged, entry)
        watermark = self._clock
        if self._event_time and watermark is not None and ts < watermark and (
                self._hits_fired(key, ts) or self._end_of(merged, entry) < watermark):
            if not runs:
                del self._runs[key]
            self._late += 1
            return False
        self._seq += 1
        runs[lo:hi] = [merged]
        return True

    def _hits_fired(self, key: Hashable, ts: int) -> bool:
        gap = self._gap
        return any(first - gap <= ts <= end for first, end in self._fired.get(key, ()))

    def _chunks(self, run: list[Entry]) -> list[tuple[int, int, int]]:
        """The sessions of one run: ``(lo, hi, end)`` slices, in order."""
        gap, top = self._gap, self._max
        if top is None:
            return [(0, len(run), run[-1][0] + gap)]
        chunks, lo = [], 0
        while lo < len(run):
            limit = run[lo][0] + top
            hi = bisect_left(run, (limit + 1,), lo=lo)
            chunks.append((lo, hi, min(run[hi - 1][0] + gap, limit)))
            lo = hi
        return chunks

    def _end_of(self, run: list[Entry], entry: Entry) -> int:
        """The end of the session of ``run`` holding ``entry``."""
        at = bisect_left(run, entry)
        return next(end for lo, hi, end in self._chunks(run) if lo <= at < hi)

    # -- time --------------------------------------------------------------------------------

    def on_watermark(self, watermark: int) -> list[TupleWindow]:
        """Event time advanced to ``watermark``: the sessions ending below it, in order.

        A watermark not above the previous one changes nothing.
        """
        if not self._event_time:
            msg = ("on_watermark() needs event time (with_timestamp_field/extractor); "
                   "use on_processing_time() for processing-time sessions")
            raise UnsupportedOperationError(msg)
        if self._clock is not None and watermark <= self._clock:
            return []
        self._clock = watermark
        return self._fire(watermark)

    def on_processing_time(self, now: int) -> list[TupleWindow]:
        """Processing time is ``now`` (ms): the sessions ending before it, in order."""
        if self._event_time:
            msg = ("on_processing_time() is for processing-time sessions; this bolt uses "
                   "event time, advance it with on_watermark()")
            raise UnsupportedOperationError(msg)
        if self._clock is not None and now < self._clock:
            now = self._clock
        self._clock = now
        return self._fire(now)

    def _fire(self, clock: int) -> list[TupleWindow]:
        self.epoch += 1
        done: list[tuple[int, int, int, list[Entry]]] = []  # (end, first, seq, entries)
        for key in list(self._runs):
            runs, kept = self._runs[key], []
            fired = self._fired.setdefault(key, [])
            for run in runs:
                rest = 0
                for lo, hi, end in self._chunks(run):
                    if end >= clock:
                        break
                    session = run[lo:hi]
                    done.append((end, session[0][0], session[0][1], session))
                    if self._event_time:
                        fired.append((session[0][0], end))
                    rest = hi
                if rest < len(run):
                    kept.append(run[rest:] if rest else run)
            if fired:
                fired[:] = self._still_reachable(fired, clock)
            if kept:
                self._runs[key] = kept
            else:
                del self._runs[key]
            if not fired:
                del self._fired[key]
        done.sort(key=lambda d: d[:3])
        if self.record_released:
            self._released.extend(e[2] for d in done for e in d[3])
        return [TupleWindow(self, entries, 0, 0, len(entries), [], first, end)
                for end, first, _, entries in done]

    def _still_reachable(self, fired: list[tuple[int, int]], clock: int
                         ) -> list[tuple[int, int]]:
        """The fired sessions a tuple that is not late for other reasons could still hit.

        With ``max_duration`` M, a tuple joining an open session has ``ts >= clock - M``
        (its session's end is at most ``ts + M`` and not below the clock): older sessions
        are out of reach. Without it, a chain of tuples below the watermark can extend an
        open session backwards without bound, but every open session lies after the key's
        latest fired one (it would have merged with it otherwise), so only that one is kept.
        """
        if self._max is not None:
            return [f for f in fired if f[1] >= clock - self._max]
        return [max(fired, key=lambda f: f[1])]

    def next_window_end(self) -> int | None:
        """Processing time: the end of the next session to fire (``now > end`` fires it).

        ``None`` with no open session, or in event time (sessions fire on watermarks).

        Example:
            >>> from kstorm.windowing import Duration, WindowConfig
            >>> m = SessionWindowManager(WindowConfig.session(Duration.seconds(10)))
            >>> m.add("a", 12_000)
            True
            >>> m.next_window_end()
            22000
        """
        if self._event_time:
            return None
        ends = [self._chunks(run)[0][2] for runs in self._runs.values() for run in runs]
        return min(ends, default=None)

    # -- state -------------------------------------------------------------------------------

    @property
    def late_count(self) -> int:
        """Number of late tuples so far."""
        return self._late

    @property
    def size(self) -> int:
        """Tuples held in open sessions."""
        return sum(len(run) for runs in self._runs.values() for run in runs)

    @property
    def ledger(self) -> None:
        """Session windows keep no message-id ledger (``with_message_id_field`` is refused)."""
        return None

    def take_released(self) -> list[Any]:
        """The items of the sessions fired since the last call: in no window from now on."""
        released, self._released = self._released, []
        return released

    def held(self) -> Iterator[Any]:
        """Every item in an open session."""
        for runs in self._runs.values():
            for run in runs:
                for entry in run:
                    yield entry[2]

    def snapshot(self, *, compact: bool = False) -> dict[str, Any]:
        """The complete state as plain, picklable data (tuples included).

        The held tuples are in ``entries`` as ``(ts, seq, item)``, as a
        :class:`~kstorm.windowing.WindowManager` snapshot has them (so the window state
        stores, ``_kvstore.WindowKV``, save them one by one); ``runs`` refers to them by seq.
        """
        if compact:
            msg = "a compact window snapshot needs with_message_id_field(...), which " \
                  "session windows do not support"
            raise ConfigError(msg)
        entries: list[Entry] = []
        runs: list[tuple[Hashable, list[int]]] = []
        for key, key_runs in self._runs.items():
            for run in key_runs:
                entries.extend(run)
                runs.append((key, [e[1] for e in run]))
        return {
            "version": _VERSION, "shape": _shape(self.config), "compact": False,
            "entries": entries, "pending": [], "heap": [], "replayed": [], "runs": runs,
            "fired": [(key, list(f)) for key, f in self._fired.items()],
            "seq": self._seq, "clock": self._clock, "late": self._late,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace the state with a :meth:`snapshot` (of a manager with the same sessions)."""
        if snapshot.get("version") != _VERSION or snapshot.get("shape", ("",))[0] != "session":
            msg = (f"unsupported session window snapshot (version "
                   f"{snapshot.get('version')!r}, shape {snapshot.get('shape')!r}); expected "
                   f"version {_VERSION} of a session window")
            raise ConfigError(msg)
        if tuple(snapshot["shape"]) != _shape(self.config):
            msg = (f"session snapshot was taken with sessions {snapshot['shape']}, "
                   f"this bolt has {_shape(self.config)}")
            raise ConfigError(msg)
        self.epoch += 1
        self._clear()
        by_seq = {e[1]: tuple(e) for e in snapshot["entries"]}
        for key, seqs in snapshot["runs"]:
            self._runs.setdefault(key, []).append([by_seq[s] for s in seqs])
        self._fired = {key: [tuple(f) for f in fired] for key, fired in snapshot["fired"]}
        self._seq, self._clock, self._late = snapshot["seq"], snapshot["clock"], snapshot["late"]
