"""Stateful windowing bookkeeping by message id (seed 004, "Stateful windowing").

When tuples carry a monotonically increasing id per source (for Kafka: the offset within a
topic-partition), a windowed bolt need not checkpoint the tuples of its windows. It keeps, per
source, Storm's ``WindowState``: the **last expired** and **last evaluated** ids. After a restart
the source is re-read from ``last_expired + 1`` and each re-read tuple is sorted out:

1. ``id <= last_expired`` (or a tuple that was late): discarded, it already left every window;
2. ``last_expired < id <= last_evaluated``: re-added to the window *without* activating any
   window, since the windows it was part of have fired already;
3. anything else is processed as usual (ids the checkpoint already holds are skipped, so a
   source that re-delivers a tuple never adds it twice).

The ledger also remembers the last id seen per source and the ids of late tuples; it is updated
by :class:`~kstorm.windowing.WindowManager`, which owns one when ``with_message_id_field`` is set.
It assumes that per source, ids grow with timestamps (always true with processing time; with
event time, each source must be in timestamp order: disorder only *across* sources).

Example:
    >>> ledger = MessageIdLedger()
    >>> ledger.seen("p0", 7); ledger.evaluated("p0", 7); ledger.expired("p0", 3)
    >>> ledger.state()
    {'p0': (3, 7)}
"""

from __future__ import annotations

import enum
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterable
from typing import Any

_NONE = float("-inf")  # no id yet; compares below every int
_EXPIRED, _EVALUATED, _SEEN = 0, 1, 2


class Replay(enum.Enum):
    """What to do with a tuple whose id the ledger has seen before."""

    PROCESS = "process"  # new tuple: add it as usual
    REPLAY = "replay"  # evaluated before the restart: re-add without firing windows
    DISCARD = "discard"  # expired, late, or already held: drop it


class MessageIdLedger:
    """Per-source last expired / last evaluated / last seen message ids."""

    __slots__ = ("_marks", "_late", "_replayed", "_skip")

    def __init__(self) -> None:
        self._marks: dict[Hashable, list[Any]] = {}
        self._late: dict[Hashable, list[int]] = {}
        self._replayed: dict[Hashable, Any] | None = None  # recovering: last re-added id
        self._skip: set[tuple[Hashable, int]] = set()

    def _get(self, key: Hashable) -> list[Any]:
        marks = self._marks.get(key)
        if marks is None:
            marks = self._marks[key] = [_NONE, _NONE, _NONE]
        return marks

    def seen(self, key: Hashable, msg_id: int) -> None:
        """A tuple with this id was accepted into the window."""
        marks = self._get(key)
        if msg_id > marks[_SEEN]:
            marks[_SEEN] = msg_id

    def late(self, key: Hashable, msg_id: int) -> None:
        """A tuple with this id was late (never part of a window)."""
        self.seen(key, msg_id)
        self._late.setdefault(key, []).append(msg_id)

    def evaluated(self, key: Hashable, msg_id: int) -> None:
        """A tuple with this id was part of a window that fired."""
        marks = self._get(key)
        if msg_id > marks[_EVALUATED]:
            marks[_EVALUATED] = msg_id

    def expired(self, key: Hashable, msg_id: int) -> None:
        """A tuple with this id left the window for good."""
        marks = self._get(key)
        if msg_id > marks[_EXPIRED]:
            marks[_EXPIRED] = msg_id
            late = self._late.get(key)
            if late and late[0] <= msg_id:
                del late[:bisect_right(late, msg_id)]

    def classify(self, key: Hashable, msg_id: int) -> Replay:
        """Sort out a tuple by its id (see the module docstring)."""
        marks = self._marks.get(key)
        if marks is None or msg_id > marks[_SEEN]:
            return Replay.PROCESS
        replayed = self._replayed
        if replayed is not None and key in replayed:
            if (replayed[key] < msg_id <= marks[_EVALUATED] and msg_id > marks[_EXPIRED]
                    and not self._is_late(key, msg_id) and (key, msg_id) not in self._skip):
                replayed[key] = msg_id
                if msg_id >= marks[_EVALUATED]:
                    del replayed[key]
                    if not replayed:
                        self._replayed, self._skip = None, set()
                return Replay.REPLAY
        return Replay.DISCARD

    def _is_late(self, key: Hashable, msg_id: int) -> bool:
        late = self._late.get(key)
        if not late:
            return False
        i = bisect_left(late, msg_id)
        return i < len(late) and late[i] == msg_id

    def begin_recovery(self, held: Iterable[tuple[Hashable, int]] = ()) -> None:
        """Expect re-read tuples: ``(last_expired, last_evaluated]`` per source gets re-added.

        Args:
            held: ``(source, id)`` of tuples the restored state still holds (never re-added).
        """
        self._replayed = {k: m[_EXPIRED] for k, m in self._marks.items()
                          if m[_EVALUATED] > m[_EXPIRED]}
        self._skip = set(held)
        if not self._replayed:
            self._replayed, self._skip = None, set()

    @property
    def recovering(self) -> bool:
        """Whether some evaluated tuples have not been re-read yet."""
        return self._replayed is not None

    def replay_ranges(self) -> dict[Hashable, tuple[int | None, int]]:
        """Per source, the inclusive id range still to re-read (seek the source to its start).

        A start of ``None`` means from the beginning (nothing of that source expired yet).
        """
        if self._replayed is None:
            return {}
        return {k: (int(last) + 1 if last != _NONE else None, self._marks[k][_EVALUATED])
                for k, last in self._replayed.items()}

    def state(self) -> dict[Hashable, tuple[int | None, int | None]]:
        """Storm's ``WindowState`` per source: ``(last_expired, last_evaluated)``."""
        return {k: (None if m[_EXPIRED] == _NONE else m[_EXPIRED],
                    None if m[_EVALUATED] == _NONE else m[_EVALUATED])
                for k, m in self._marks.items()}

    def snapshot(self) -> dict[str, Any]:
        """Plain, picklable state."""
        return {"marks": {k: tuple(m) for k, m in self._marks.items()},
                "late": {k: list(v) for k, v in self._late.items() if v},
                "replayed": None if self._replayed is None else dict(self._replayed),
                "skip": list(self._skip)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace the state with a :meth:`snapshot`."""
        self._marks = {k: list(m) for k, m in snapshot["marks"].items()}
        self._late = {k: list(v) for k, v in snapshot["late"].items()}
        replayed = snapshot["replayed"]
        self._replayed = None if replayed is None else dict(replayed)
        self._skip = set(snapshot["skip"])
