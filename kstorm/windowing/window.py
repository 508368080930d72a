"""What a windowed bolt's ``execute(window)`` receives (Storm ``TupleWindow``).

A :class:`TupleWindow` is a read-only view over the tuples its
:class:`~kstorm.windowing.WindowManager` holds: building one copies nothing, so a window of a
million tuples costs a few integers until you call :meth:`TupleWindow.get`. Like Storm's
persistent windows, a view is valid only until the manager moves on (its next
``on_watermark``, ``on_processing_time`` or ``restore``); after that every accessor raises
:class:`StaleWindowError`. Keep ``window.get()`` if you need the tuples longer.

Example:
    >>> w = TupleWindow.of(["a", "b", "c"], new=["c"], expired=["z"], start_ts=0, end_ts=10)
    >>> w.get(), w.get_new(), w.get_expired(), w.get_end_timestamp()
    (['a', 'b', 'c'], ['c'], ['z'], 10)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from kstorm.errors import StaleWindowError, UnsupportedOperationError


class _Frozen:
    """Owner of windows built with :meth:`TupleWindow.of`: never moves on."""

    epoch = 0


class TupleWindow:
    """The tuples of one window activation, plus those new and expired since the last one.

    Tuples are listed in timestamp order (arrival order among equal timestamps); with
    processing time that is arrival order. ``get_start_timestamp`` is ``None`` when the window
    length is a :class:`~kstorm.windowing.Count` (as in Storm).
    """

    __slots__ = ("_owner", "_epoch", "_entries", "_lo", "_new_lo", "_hi", "_expired",
                 "_start_ts", "_end_ts", "_persistent")

    def __init__(self, owner: Any, entries: list[tuple[int, int, Any]], lo: int, new_lo: int,
                 hi: int, expired: list[Any], start_ts: int | None, end_ts: int | None,
                 persistent: bool = False) -> None:
        self._owner = owner
        self._epoch = owner.epoch
        self._entries = entries
        self._lo, self._new_lo, self._hi = lo, new_lo, hi
        self._expired = expired
        self._start_ts, self._end_ts = start_ts, end_ts
        self._persistent = persistent

    @classmethod
    def of(cls, tuples: Sequence[Any], *, new: Sequence[Any] = (), expired: Sequence[Any] = (),
           start_ts: int | None = None, end_ts: int | None = None,
           persistent: bool = False) -> TupleWindow:
        """A standalone window, e.g. to unit-test a bolt's ``execute``.

        ``new`` must be a suffix of ``tuples`` (new tuples are the latest ones).
        """
        new = list(new)
        if new and list(tuples[len(tuples) - len(new):]) != new:
            msg = "`new` must be the last len(new) tuples of `tuples`"
            raise ValueError(msg)
        entries = [(0, i, t) for i, t in enumerate(tuples)]
        return cls(_Frozen, entries, 0, len(entries) - len(new), len(entries), list(expired),
                   start_ts, end_ts, persistent)

    def _check(self) -> None:
        if self._owner.epoch != self._epoch:
            msg = (
                "this TupleWindow is no longer valid: its window manager has evaluated later "
                "windows since; copy window.get() inside execute() to keep the tuples"
            )
            raise StaleWindowError(msg)

    def get(self) -> list[Any]:
        """All tuples in the window (a new list)."""
        self._check()
        entries = self._entries
        return [entries[i][2] for i in range(self._lo, self._hi)]

    def get_iter(self) -> Iterator[Any]:
        """Iterate the window lazily (use this for large or persistent windows)."""
        self._check()
        entries, check = self._entries, self._check
        for i in range(self._lo, self._hi):
            check()
            yield entries[i][2]

    def get_new(self) -> list[Any]:
        """Tuples that joined since the previous activation."""
        self._check()
        if self._persistent:
            msg = (
                "get_new() is not supported for persistent windows (with_persistence()); "
                "iterate window.get_iter() instead"
            )
            raise UnsupportedOperationError(msg)
        entries = self._entries
        return [entries[i][2] for i in range(self._new_lo, self._hi)]

    def get_expired(self) -> list[Any]:
        """Tuples that left the window (were evicted) since the previous activation."""
        self._check()
        if self._persistent:
            msg = "get_expired() is not supported for persistent windows (with_persistence())"
            raise UnsupportedOperationError(msg)
        return list(self._expired)

    def get_start_timestamp(self) -> int | None:
        """Window start (exclusive), in ms; ``None`` for count-length windows."""
        return self._start_ts

    def get_end_timestamp(self) -> int | None:
        """Window end (inclusive), in ms: the event or processing time the window closed at."""
        return self._end_ts

    def __len__(self) -> int:
        self._check()
        return self._hi - self._lo

    def __iter__(self) -> Iterator[Any]:
        return self.get_iter()

    def __repr__(self) -> str:
        return (f"TupleWindow(start={self._start_ts}, end={self._end_ts}, "
                f"size={self._hi - self._lo}, new={self._hi - self._new_lo}, "
                f"expired={len(self._expired)})")
