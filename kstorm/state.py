"""Stateful bolt state (seed 000): :class:`KeyValueState` and the in-memory provider."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class KeyValueState(Protocol):
    """Key-value state of one stateful bolt task, saved with each batch's commit.

    Keys and values must be picklable. Changes made while processing a batch become durable
    when the batch commits, and are rolled back if the batch is replayed.
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
