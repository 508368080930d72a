"""A windowed bolt task's windows in a state provider's ``KeyValueState``, stored as changes.

With ``topology.state.provider`` other than ``spark``, a user windowed bolt's windows are
state like a stateful bolt's ``KeyValueState`` (seed 000): they live in the provider under
the task's window namespace (:func:`window_namespace`), the task prepares a batch's changes
under the batch's txid, and the driver commits them after the batch's sinks, so the windows
are restored at the sinks' txid after a lost checkpoint -- persistent windows, windows with
or without a message-id field alike. A batch writes what changed, not the whole window:

- ``("t", seq)``: one held tuple, written once when it enters the task and deleted once the
  windows are done with it (evicted, or it never joined one);
- ``("c", first_ref)``: a persistent window's chunk of tuples (:mod:`.window_store`), written when
  the chunk is new and deleted when none of its tuples is held;
- ``("meta",)``: everything else, small: the positions ``(timestamp, seq)`` of the held
  tuples, the window bounds and triggers, the watermark, the message-id ledger, the
  persistent store's index.

Example:
    >>> from kstorm.state import InMemoryKeyValueState
    >>> from kstorm.tuple import Fields
    >>> from kstorm.windowing import Count, WindowConfig
    >>> from kstorm._runtime.window_task import Collect, WindowedTask
    >>> kv = InMemoryKeyValueState("doc:w:0")
    >>> task = WindowedTask("w", WindowConfig(Count(3), tumbling=True))
    >>> task.process([Tuple([x], Fields("x"), "s") for x in "ab"], 1_000, Collect())
    >>> WindowKV(kv, "w").save(task)
    2
    >>> again = WindowedTask("w", WindowConfig(Count(3), tumbling=True))
    >>> WindowKV(kv, "w").load(again), again.manager.size
    (True, 2)
"""

from __future__ import annotations

from typing import Any

from kstorm._runtime.window_task import WindowedTask
from kstorm.errors import StateError
from kstorm.state import state_namespace
from kstorm.tuple import Tuple

META = ("meta",)
_PARTS = ("entries", "pending", "heap", "replayed")
_VERSION = 1


def window_namespace(topology: str, component: str, task: int) -> str:
    """The namespace of one windowed bolt task's windows (its user state has the task's)."""
    return state_namespace(topology, component, task) + ":window"


def internal_state(provider: Any, namespace: str, conf: Any, context: Any) -> Any:
    """A state for kstorm's own data: the provider's, with its default (pickle) serializers.

    A user's ``keySerializerClass``/``valueSerializerClass`` are for the user's keys and
    values; windows hold tuples and kstorm's bookkeeping, which they need not handle.
    """
    make = getattr(provider, "internal_state", None)
    if callable(make):
        return make(namespace, conf, context)
    return provider.new_state(namespace, conf, context)


def _discard(kv: Any, key: Any) -> None:
    """Delete ``key`` without reading its old value when the state can."""
    discard = getattr(kv, "discard", None)
    (discard if callable(discard) else kv.delete)(key)


class KVChunks:
    """A persistent window's chunk backend (:class:`.window_store.ChunkBackend`) in a state."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv

    def get(self, key: int) -> bytes | None:
        """The chunk stored under ``key``."""
        return self.kv.get(("c", key))

    def put(self, key: int, blob: bytes) -> None:
        """Store a chunk."""
        self.kv.put(("c", key), blob)

    def remove(self, key: int) -> None:
        """Delete a chunk."""
        _discard(self.kv, ("c", key))


class WindowKV:
    """Loads a :class:`WindowedTask` from a state and saves what a batch changed (module doc).

    One instance follows one task across batches: it remembers which tuples the state holds,
    so :meth:`save` writes only the new ones and deletes the ones the windows let go.
    """

    def __init__(self, kv: Any, component: str) -> None:
        self.kv = kv
        self.component = component
        self.stored: set[int] = set()

    def load(self, windowed: WindowedTask) -> bool:
        """Restore ``windowed`` from the state; False (and ``windowed`` untouched) when empty.

        A persistent window reads only its index here (chunks are read as windows need
        them); otherwise one pass over the state reads every held tuple.
        """
        if windowed.store is not None:
            meta, tuples = self.kv.get(META), {}
        else:
            meta, tuples = None, {}
            for key, value in self.kv:
                if key == META:
                    meta = value
                elif isinstance(key, tuple) and len(key) == 2 and key[0] == "t":
                    tuples[key[1]] = value
        if meta is None:
            if tuples:
                self._corrupt(f"{len(tuples)} held tuples but no window index")
            return False
        if meta.get("version") != _VERSION:
            self._corrupt(f"window state version {meta.get('version')!r}, expected "
                          f"{_VERSION}")
        snapshot = meta["snapshot"]
        if not meta["inline"]:
            manager = snapshot["manager"]
            missing = [seq for part in _PARTS for _, seq in manager[part] if seq not in tuples]
            if missing:
                self._corrupt(f"{len(missing)} held tuples are missing (seq {missing[:5]})")
            for part in _PARTS:
                manager[part] = [(ts, seq, tuples[seq]) for ts, seq in manager[part]]
            self.stored = set(tuples)
        windowed.restore(snapshot)
        return True

    def save(self, windowed: WindowedTask) -> int:
        """Put the batch's changes to the state (not prepared yet); the tuples written."""
        snapshot = windowed.snapshot()
        inline = windowed.store is not None  # refs: the tuples are in chunks already
        written = 0
        if not inline:
            manager = snapshot["manager"]
            live: dict[int, Tuple] = {}
            for part in _PARTS:
                entries = manager[part]
                manager[part] = [(ts, seq) for ts, seq, _ in entries]
                live.update((seq, item) for _, seq, item in entries)
            for seq in live.keys() - self.stored:
                self.kv.put(("t", seq), live[seq])
                written += 1
            for seq in self.stored - live.keys():
                _discard(self.kv, ("t", seq))
            self.stored = set(live)
        self.kv.put(META, {"version": _VERSION, "inline": inline, "snapshot": snapshot})
        return written

    def _corrupt(self, what: str) -> None:
        msg = f"windowed bolt {self.component!r}: its window state is damaged: {what}"
        raise StateError(msg, hint="restore the state provider's data, or delete the bolt's "
                         "state and the topology's checkpoint and sinks' records to start over")


__all__ = ["KVChunks", "WindowKV", "internal_state", "window_namespace"]
