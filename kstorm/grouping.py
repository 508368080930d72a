"""Stream groupings: how a stream's tuples are spread over a bolt's tasks.

On Spark (see ``kstorm/_runtime/plan.py``): shuffle, local-or-shuffle and none keep tuples in
the partition they arrive in (the bolt fuses into the upstream Python stage); fields becomes
a hash partitioning on the grouping fields; global a single partition; all a broadcast (one
copy per task).
"""

from __future__ import annotations

import enum
import io
import pickle
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kstorm.tuple import DEFAULT_STREAM, Fields


class GroupingKind(enum.Enum):
    """The Storm grouping kinds kstorm supports."""

    SHUFFLE = "shuffle"
    LOCAL_OR_SHUFFLE = "local_or_shuffle"
    NONE = "none"
    FIELDS = "fields"
    GLOBAL = "global"
    ALL = "all"

    @property
    def repartitions(self) -> bool:
        """Whether the grouping needs tuples moved between tasks (a Spark exchange)."""
        return self in (GroupingKind.FIELDS, GroupingKind.GLOBAL, GroupingKind.ALL)


@dataclass(frozen=True)
class Grouping:
    """A subscription of a bolt to ``component``'s ``stream``."""

    kind: GroupingKind
    component: str
    stream: str = DEFAULT_STREAM
    fields: Fields | None = None

    def __str__(self) -> str:
        extra = f" on {self.fields.to_list()}" if self.fields is not None else ""
        return f"{self.kind.value} grouping of {self.component}:{self.stream}{extra}"


def stable_hash(values: Sequence[Any]) -> int:
    """A hash of field values that is the same in every process (unlike ``hash()``).

    Fields grouping routes a tuple to task ``stable_hash(grouping values) % tasks``, so a
    change moves keys between tasks (stateful bolts' state in existing checkpoints would be
    split): it is pinned by a test. It is CRC-32 of the values pickled *without pickle's
    memo* -- with it, ``("a", "a")`` holding one string object twice pickles differently
    from two equal strings, and the same key could go to two tasks -- then MurmurHash3's
    32-bit finalizer: CRC-32 is linear, so keys differing in a few bits (``"k0"``,
    ``"k1"``, ...) shared their low bits, and 8 of ``k0``..``k9`` went to one of 2 tasks.

    Example:
        >>> stable_hash(["cat", 1])
        1554906866
    """
    return _mix(zlib.crc32(canonical_bytes(values)))


def canonical_bytes(values: Sequence[Any]) -> bytes:
    """``values`` pickled without the memo: equal values, equal bytes, whatever the objects."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=5)
    pickler.fast = True  # no memo (values are never self-referential)
    pickler.dump(tuple(values))
    return buf.getvalue()


def _mix(h: int) -> int:
    """MurmurHash3's fmix32: every input bit affects every output bit."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


_HASHES: dict[Any, int] = {}  # exact str / int value -> stable_hash([value])
_HASHES_MAX = 1 << 16


def stable_hash_one(value: Any) -> int:
    """``stable_hash([value])``, remembered for ``str`` and ``int`` values (grouping keys repeat).

    Only exact ``str`` and ``int`` are remembered: equal values of those types pickle to the
    same bytes (``1 == 1.0 == True`` pickle differently, but are never both cached).

    Example:
        >>> stable_hash_one("cat") == stable_hash(["cat"])
        True
    """
    kind = type(value)
    if kind is not str and kind is not int:
        return stable_hash((value,))
    h = _HASHES.get(value)
    if h is None:
        h = stable_hash((value,))
        if len(_HASHES) >= _HASHES_MAX:
            _HASHES.clear()
        _HASHES[value] = h
    return h


def task_for(grouping: Grouping, parallelism: int, values_hash: int | None,
             partition: int) -> list[int]:
    """Target task(s) of one tuple on one subscription.

    Args:
        grouping: the subscription.
        parallelism: number of tasks of the subscribing bolt.
        values_hash: stable hash of the grouping fields' values (fields grouping only).
        partition: the Spark partition the tuple is in (shuffle groupings keep it there).

    The executor spreads shuffle-like groupings round robin over the tasks itself (every
    task runs); this partition-based choice is the fallback for a single task.
    """
    kind = grouping.kind
    if kind is GroupingKind.FIELDS:
        return [values_hash % parallelism]  # type: ignore[operator]
    if kind is GroupingKind.GLOBAL:
        return [0]
    if kind is GroupingKind.ALL:
        return list(range(parallelism))
    return [partition % parallelism]
