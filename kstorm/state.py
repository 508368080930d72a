"""Stateful bolt state (seed 000): :class:`KeyValueState` and the in-memory provider."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable


def canonical_key(key: Any, _seen: dict[Any, Any] | None = None) -> Any:
    """``key`` rebuilt so that equal keys pickle to equal bytes.

    Pickle writes an object met twice as a back-reference, so ``("a", "a")`` built from one
    string object and from two equal strings would be two keys in a store keyed by bytes.
    Equal strings, bytes and tuples inside a key are made one object (by type and value, so
    ``1`` and ``True`` stay apart); a key without repeated parts is returned as it is, and
    pickles exactly as before.

    Example:
        >>> one, other = "word", "".join(["wo", "rd"])
        >>> pickle.dumps((one, one)) == pickle.dumps((one, other))
        False
        >>> encode_key((one, one)) == encode_key((one, other))
        True
    """
    seen = {} if _seen is None else _seen
    if type(key) is tuple:
        key = tuple(canonical_key(part, seen) for part in key)
    if type(key) in (str, bytes, tuple):
        return seen.setdefault((type(key), key), key)
    return key


def encode_key(key: Any) -> bytes:
    """The bytes a state store keys ``key`` by (canonical: see :func:`canonical_key`)."""
    return pickle.dumps(canonical_key(key), protocol=5)


@runtime_checkable
class KeyValueState(Protocol):
    """Key-value state of one stateful bolt task, saved with each batch's commit.

    Keys must be hashable and picklable (str, int, bytes, tuples of them...: equal keys are
    one entry, see :func:`canonical_key`); values picklable, and they come back with their
    types (``None`` included). Changes made while processing a batch become durable when the
    batch commits, and are rolled back if the batch is replayed.
    """

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``."""
        ...

    def get(self, key: Any, default: Any = None) -> Any:
        """Value of ``key``, or ``default``."""
        ...

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its old value (or None)."""
        ...

    def __iter__(self) -> Iterator[tuple[Any, Any]]: ...


class InMemoryKeyValueState:
    """A dict-backed :class:`KeyValueState` that records what changed since :meth:`take_changes`.

    The Spark runtime loads a task's state into one of these before a batch and writes the
    changes back to the state store when the batch's task finishes.
    """

    __slots__ = ("_data", "_dirty", "_deleted")

    def __init__(self, data: dict[Any, Any] | None = None) -> None:
        self._data: dict[Any, Any] = dict(data or {})
        self._dirty: set[Any] = set()
        self._deleted: set[Any] = set()

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``."""
        self._data[key] = value
        self._dirty.add(key)
        self._deleted.discard(key)

    def get(self, key: Any, default: Any = None) -> Any:
        """Value of ``key``, or ``default``."""
        return self._data.get(key, default)

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its old value (or None)."""
        self._dirty.discard(key)
        if key in self._data:
            self._deleted.add(key)
        return self._data.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._data.items()))

    def __len__(self) -> int:
        return len(self._data)

    def take_changes(self) -> tuple[dict[Any, Any], set[Any]]:
        """Entries written and keys deleted since the last call; resets the record."""
        changed = {k: self._data[k] for k in self._dirty}
        deleted = set(self._deleted)
        self._dirty.clear()
        self._deleted.clear()
        return changed, deleted
