"""Seed 002's update rules for one key, as plain Python.

The commit's Lua script (``_lua.py``) runs the same rules inside Redis; this module
runs them for Python merges (``_optimistic.py``) and is the model the tests compare Redis
against.

* transactional: the stored value carries the txid that last wrote it. A write
  with that same txid is skipped (it is already in the value); any other txid
  gives ``value = merge(value, new)``.
* opaque: the stored value also carries ``prev``, the value before the txid that
  last wrote it. A write with that same txid recomputes ``value = merge(prev,
  new)`` (the replayed batch may hold different tuples); any other txid sets
  ``prev = value`` and then ``value = merge(value, new)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["transactional", "opaque"]
MODES: tuple[str, ...] = ("transactional", "opaque")


class _Absent:
    """No value stored (distinct from a stored JSON ``null``)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True, slots=True)
class Stored:
    """What Redis holds for one key: its value, the txid that wrote it, and prev."""

    value: Any = ABSENT
    txid: int | None = None
    prev: Any = ABSENT


def replays(mode: Mode, recorded: int, txid: int) -> bool:
    """Whether batch ``txid`` is applied when the sink's record says ``recorded``.

    A batch after the record is new; one before it is in Redis already; the recorded txid
    itself is applied again only in opaque mode (an opaque spout's replay may differ, and
    the prev values let it be recomputed: seed 002's opaque rule, batch by batch).

    Example:
        >>> replays("transactional", 7, 7), replays("opaque", 7, 7), replays("opaque", 8, 7)
        (False, True, False)
    """
    return txid > recorded or (txid == recorded and mode == "opaque")


def fold(base: Any, news: Sequence[Any], merge: Callable[[Any, Any], Any]) -> Any:
    """``merge`` each new value into ``base`` in order; an absent base takes the first.

    Example:
        >>> fold(ABSENT, [2, 3], lambda old, new: old + new)
        5
    """
    value = base
    for new in news:
        value = new if value is ABSENT else merge(value, new)
    return value


def update(mode: Mode, txid: int, stored: Stored, news: Sequence[Any],
           merge: Callable[[Any, Any], Any]) -> Stored | None:
    """The key's new contents after batch ``txid``, or ``None`` to leave it as it is.

    Example:
        >>> add = lambda old, new: old + new
        >>> update("opaque", 7, Stored(10, 7, prev=4), [3], add)   # replay of txid 7
        Stored(value=7, txid=7, prev=4)
        >>> update("transactional", 7, Stored(10, 7), [3], add) is None
        True
    """
    replay = stored.txid == txid
    if replay and mode == "transactional":
        return None
    base = stored.prev if replay else stored.value
    prev = base if mode == "opaque" else ABSENT
    return Stored(fold(base, news, merge), txid, prev)


__all__ = ["ABSENT", "MODES", "Mode", "Stored", "fold", "update"]
