"""Persistent windows (``with_persistence()``): window tuples in a state backend, not in memory.

With persistence, a task's :class:`~kstorm.windowing.WindowManager` holds integer *refs*; the
tuples themselves are written to a key-value backend (on Spark a TWS map state, versioned
with the batch like everything else) in chunks of consecutive refs, and read back lazily
while ``execute`` iterates ``window.get_iter()``. At most ``max_events_in_memory`` stored
tuples are cached (least recently used chunks go first), so a window larger than memory
evaluates correctly. Chunks none of whose refs the manager still holds are deleted after
each batch.

Example:
    >>> backend = DictBackend()
    >>> store = PersistentTuples(backend, max_in_memory=2)
    >>> refs = [store.new_ref() for _ in "abc"]
    >>> for ref, t in zip(refs, "abc"): store.put(ref, t)
    >>> store.flush(); [store.load(r) for r in refs], store.cached <= 2
    (['a', 'b', 'c'], True)
"""

from __future__ import annotations

import pickle
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from kstorm.windowing.window import TupleWindow, UnsupportedOperationError

DEFAULT_MAX_IN_MEMORY = 25_000  # Storm's example value for withMaxEventsInMemory


class ChunkBackend(Protocol):
    """Where chunks of tuples live (keyed by their first ref)."""

    def get(self, key: int) -> bytes | None:
        """The chunk stored under ``key``."""

    def put(self, key: int, blob: bytes) -> None:
        """Store a chunk."""

    def remove(self, key: int) -> None:
        """Delete a chunk."""


class DictBackend:
    """A :class:`ChunkBackend` in a dict (tests); counts reads."""

    def __init__(self) -> None:
        self.data: dict[int, bytes] = {}
        self.reads = 0

    def get(self, key: int) -> bytes | None:
        """The chunk stored under ``key``."""
        self.reads += 1
        return self.data.get(key)

    def put(self, key: int, blob: bytes) -> None:
        """Store a chunk."""
        self.data[key] = blob

    def remove(self, key: int) -> None:
        """Delete a chunk."""
        self.data.pop(key, None)


class PersistentTuples:
    """Refs -> tuples through a :class:`ChunkBackend`, with a bounded cache."""

    def __init__(self, backend: ChunkBackend, max_in_memory: int | None = None) -> None:
        self.backend = backend
        self.max_in_memory = max_in_memory or DEFAULT_MAX_IN_MEMORY
        self.chunk_size = min(self.max_in_memory, 1_000)
        self.next_ref = 0
        self.chunks: list[tuple[int, int]] = []  # (first ref, last ref), sorted
        self._pending: dict[int, Any] = {}  # put, not flushed yet (this batch's tuples)
        self._cache: OrderedDict[int, dict[int, Any]] = OrderedDict()
        self.cached = 0  # stored tuples held in the cache

    def new_ref(self) -> int:
        """A fresh ref for the next tuple."""
        ref = self.next_ref
        self.next_ref += 1
        return ref

    def put(self, ref: int, tuple_: Any) -> None:
        """Keep ``tuple_`` under ``ref`` (written to the backend by :meth:`flush`)."""
        self._pending[ref] = tuple_

    def flush(self) -> None:
        """Write the tuples put since the last flush, in chunks."""
        refs = sorted(self._pending)
        for at in range(0, len(refs), self.chunk_size):
            part = refs[at:at + self.chunk_size]
            chunk = [(r, self._pending[r]) for r in part]
            self.backend.put(part[0], pickle.dumps(chunk, protocol=5))
            self.chunks.append((part[0], part[-1]))
        self._pending.clear()

    def load(self, ref: int) -> Any:
        """The tuple under ``ref``."""
        if ref in self._pending:
            return self._pending[ref]
        i = bisect_right(self.chunks, (ref, float("inf"))) - 1
        if i < 0 or not self.chunks[i][0] <= ref <= self.chunks[i][1]:
            msg = f"persistent window: no stored tuple for ref {ref}"
            raise KeyError(msg)
        key = self.chunks[i][0]
        chunk = self._cache.get(key)
        if chunk is None:
            blob = self.backend.get(key)
            if blob is None:
                msg = f"persistent window: chunk {key} is missing from the state store"
                raise KeyError(msg)
            chunk = dict(pickle.loads(blob))
            self._cache[key] = chunk
            self.cached += len(chunk)
            while self.cached > self.max_in_memory and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self.cached -= len(old)
        else:
            self._cache.move_to_end(key)
        return chunk[ref]

    def collect(self, live: Iterable[int]) -> None:
        """Delete the chunks holding none of the ``live`` refs."""
        alive = set(live)
        keep = []
        for first, last in self.chunks:
            if any(r in alive for r in range(first, last + 1)):
                keep.append((first, last))
            else:
                self.backend.remove(first)
                dropped = self._cache.pop(first, None)
                if dropped is not None:
                    self.cached -= len(dropped)
        self.chunks = keep

    def snapshot(self) -> dict[str, Any]:
        """The index (tuples are in the backend)."""
        return {"next_ref": self.next_ref, "chunks": list(self.chunks)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Go on from a :meth:`snapshot`."""
        self.next_ref = snapshot["next_ref"]
        self.chunks = [tuple(c) for c in snapshot["chunks"]]  # type: ignore[misc]


class PersistentWindow:
    """What ``execute`` gets for a persistent window: tuples are read lazily by ref.

    ``get_new`` and ``get_expired`` are unsupported, as in Storm.
    """

    _persistent = True

    def __init__(self, refs: TupleWindow, store: PersistentTuples) -> None:
        self._refs, self._store = refs, store

    def get_iter(self) -> Iterator[Any]:
        """The tuples, loaded chunk by chunk (at most ``max_events_in_memory`` cached)."""
        load = self._store.load
        for ref in self._refs.get_iter():
            yield load(ref)

    def get(self) -> list[Any]:
        """All tuples in a list (loads the whole window: prefer :meth:`get_iter`)."""
        return list(self.get_iter())

    def get_new(self) -> list[Any]:
        """Unsupported for persistent windows."""
        msg = "get_new() is not supported for persistent windows; iterate get_iter()"
        raise UnsupportedOperationError(msg)

    def get_expired(self) -> list[Any]:
        """Unsupported for persistent windows."""
        msg = "get_expired() is not supported for persistent windows (with_persistence())"
        raise UnsupportedOperationError(msg)

    def get_start_timestamp(self) -> int | None:
        """Window start (exclusive), in ms."""
        return self._refs.get_start_timestamp()

    def get_end_timestamp(self) -> int | None:
        """Window end (inclusive), in ms."""
        return self._refs.get_end_timestamp()

    def __len__(self) -> int:
        return len(self._refs)

    def __iter__(self) -> Iterator[Any]:
        return self.get_iter()

    def __repr__(self) -> str:
        return f"Persistent{self._refs!r}"
