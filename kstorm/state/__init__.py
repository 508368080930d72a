"""Stateful bolt state (seed 000): :class:`KeyValueState` and the in-memory provider."""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from kstorm.errors import StateError


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


# -- seed 000's state protocol and providers ---------------------------------------------------


@runtime_checkable
class State(Protocol):
    """Seed 000's ``State``: changes become durable in two steps keyed by the batch's txid.

    The task's instance calls ``prepare_commit(txid)`` when its batch's tuples are done (the
    changes are saved aside, not yet visible); the driver calls ``commit(txid)`` once the
    batch's sinks committed, or ``rollback()`` to discard a prepared txid. kstorm's recovery
    also needs to know where the state is (``committed_txid``, ``prepared_txid``) and to take
    back the last commit (``rollback_commit``) when Spark replays a batch whose state already
    committed (killed between the state's commit and Spark's commit log).
    """

    @abstractmethod
    def prepare_commit(self, txid: int) -> None:
        """Save the changes made since the last prepare aside under ``txid``."""
        ...

    @abstractmethod
    def commit(self, txid: int) -> None:
        """Make the changes prepared for ``txid`` the committed state (idempotent)."""
        ...

    @abstractmethod
    def rollback(self) -> None:
        """Discard the prepared changes."""
        ...

    def committed_txid(self) -> int | None:
        """The last txid committed (None: never)."""
        ...

    def prepared_txid(self) -> int | None:
        """The txid whose changes are prepared and not committed (None: none)."""
        ...

    def rollback_commit(self, txid: int) -> None:
        """Take back the commit of ``txid``, the last one."""
        ...


# what every state must have: KeyValueState's methods and seed 000's State's three
STATE_METHODS = ("put", "get", "delete", "__iter__", "prepare_commit", "commit", "rollback")
# what a state that knows its txids adds, for kstorm's recovery (BaseState's defaults)
RECOVERY_METHODS = ("committed_txid", "prepared_txid", "rollback_commit")


def tracks_txids(state: Any) -> bool:
    """Whether ``state`` reports its txids (:data:`RECOVERY_METHODS`, ``tracks_txids``).

    A state with only Storm's ``State`` methods (a :class:`BaseState` subclass that does not
    override them, or one without them) does not: recovery trusts the topology's checkpoint.
    """
    return bool(getattr(state, "tracks_txids", True)) and all(
        callable(getattr(state, m, None)) for m in RECOVERY_METHODS)


class BaseState(ABC):
    """Base of a custom state that implements only what Storm's ``State`` needs.

    Implement ``prepare_commit(txid)``, ``commit(txid)`` and ``rollback()`` (seed 000) and
    :class:`KeyValueState`'s ``put``/``get``/``delete``/``__iter__``; the rest has defaults.
    ``commit(txid)`` must commit only what was prepared under ``txid`` and be idempotent,
    as Storm's checkpoint spout may send it again after a restart.

    Such a state does not report its txids (``tracks_txids = False``), so at start kstorm
    recovers it as Storm does, from the topology's checkpoint: ``commit(last)`` for the last
    batch the topology committed (completing a commit a crash cut off), then ``rollback()``
    (discarding what a later batch prepared). One gap remains, logged at start: a crash
    after the state's ``commit(txid)`` and before Spark's commit log replays that batch into
    the committed state. Override :meth:`committed_txid`, :meth:`prepared_txid` and
    :meth:`rollback_commit` (and set ``tracks_txids = True``) to close it, as kstorm's
    Redis and memory states do.

    Example:
        >>> class DictState(BaseState):
        ...     def __init__(self):
        ...         self.data, self.pending, self.prepared = {}, {}, None
        ...     def put(self, key, value): self.pending[key] = value
        ...     def get(self, key, default=None): return self.pending.get(key, self.data.get(
        ...         key, default))
        ...     def delete(self, key): return self.pending.pop(key, self.data.pop(key, None))
        ...     def __iter__(self): return iter({**self.data, **self.pending}.items())
        ...     def prepare_commit(self, txid): self.prepared, self.pending = (txid,
        ...         self.pending), {}
        ...     def commit(self, txid):
        ...         if self.prepared and self.prepared[0] == txid:
        ...             self.data.update(self.prepared[1])
        ...             self.prepared = None
        ...     def rollback(self): self.pending, self.prepared = {}, None
        >>> tracks_txids(DictState())
        False
    """

    tracks_txids: bool = False

    @abstractmethod
    def prepare_commit(self, txid: int) -> None:
        """Save the changes made since the last prepare aside under ``txid`` (implement)."""

    @abstractmethod
    def commit(self, txid: int) -> None:
        """Make the changes prepared for ``txid`` the committed state (implement)."""

    @abstractmethod
    def rollback(self) -> None:
        """Discard the prepared changes (implement)."""

    def committed_txid(self) -> int | None:
        """The last txid committed; the default: not known (None)."""
        return None

    def prepared_txid(self) -> int | None:
        """The txid prepared and not committed; the default: not known (None)."""
        return None

    def rollback_commit(self, txid: int) -> None:
        """Take back the commit of ``txid``; the default cannot (a state without txids).

        Raises:
            NotImplementedError: always; kstorm never calls it on a state that does not
                track its txids.
        """
        msg = (f"{type(self).__name__} does not track its txids, so it cannot take back the "
               f"commit of txid {txid}")
        raise NotImplementedError(msg)


class StateProvider(Protocol):
    """Builds the state of one namespace (seed 000's ``StateProvider``).

    ``new_state(namespace, conf, context)`` returns a :class:`KeyValueState` that also
    implements :class:`State`. It is called on executors (one instance per task and batch,
    which reads the committed state and prepares its changes) and on the driver (which
    commits, rolls back and recovers), so the state must live where both reach it. The
    provider is picklable (it travels with the topology to executors).
    """

    def new_state(self, namespace: str, conf: Any, context: Any) -> Any:
        """The state of ``namespace`` (one task of one component)."""
        ...


def state_namespace(topology: str, component: str, task: int) -> str:
    """The namespace of one task's state: unique per topology, component and task."""
    return f"{topology}:{component}:{task}"


class _Namespace:
    """What the memory provider holds for one namespace."""

    __slots__ = ("committed", "data", "prepared", "prepared_txid", "undo", "undo_prev")

    def __init__(self) -> None:
        self.data: dict[bytes, Any] = {}
        self.committed: int | None = None
        self.prepared: dict[bytes, Any] | None = None
        self.prepared_txid: int | None = None
        self.undo: dict[bytes, Any] | None = None
        self.undo_prev: int | None = None


_ABSENT = object()
_MEMORY: dict[str, _Namespace] = {}


class InMemoryKeyValueState:
    """Storm's ``InMemoryKeyValueState`` (seed 000): the full protocol, in this process only.

    Not durable: everything is gone with the process, and Spark's Python workers are other
    processes than the driver, so the ``memory`` provider is refused on Spark. It is for
    tests of bolts and of the protocol itself in one process.

    Instances of one ``namespace`` share their committed state (as one task's state does
    across its instances); ``InMemoryKeyValueState()``, as Storm's no-argument constructor,
    is a state of its own.

    Example:
        >>> state = InMemoryKeyValueState()
        >>> state.put("cat", 1); state.prepare_commit(1); state.commit(1)
        >>> state.put("cat", 2); state.rollback()
        >>> state.get("cat")
        1
    """

    def __init__(self, namespace: str | None = None) -> None:
        self.namespace = f"<unshared {id(self):#x}>" if namespace is None else namespace
        self._ns = _Namespace() if namespace is None else _MEMORY.setdefault(namespace,
                                                                             _Namespace())
        self._pending: dict[bytes, Any] = {}
        self._keys: dict[bytes, Any] = {}

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` (visible to this instance; durable once committed)."""
        k = encode_key(key)
        self._keys[k] = key
        self._pending[k] = pickle.dumps(value, protocol=5)

    def get(self, key: Any, default: Any = None) -> Any:
        """Value of ``key``, or ``default``."""
        k = encode_key(key)
        value = self._pending.get(k, self._ns.data.get(k, _ABSENT))
        return default if value is _ABSENT else pickle.loads(value)

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its old value (or None)."""
        old = self.get(key)
        self._pending[encode_key(key)] = _ABSENT
        return old

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        merged = {**self._ns.data, **self._pending}
        return iter([(pickle.loads(k), pickle.loads(v)) for k, v in merged.items()
                     if v is not _ABSENT])

    def prepare_commit(self, txid: int) -> None:
        """Save the changes made since the last prepare aside under ``txid``.

        Preparing ``txid`` again adds the changes since; a newer txid while one is prepared
        and not committed is refused, as Storm's ``InMemoryKeyValueState`` refuses it (its
        changes would be lost).
        """
        ns = self._ns
        if ns.prepared_txid is not None and txid > ns.prepared_txid:
            msg = (f"state {self.namespace!r}: cannot prepare txid {txid} while txid "
                   f"{ns.prepared_txid} is prepared and not committed")
            raise StateError(msg, hint="commit or roll back the prepared txid first")
        if ns.prepared_txid == txid and ns.prepared is not None:
            ns.prepared = {**ns.prepared, **self._pending}
        else:
            ns.prepared, ns.prepared_txid = dict(self._pending), txid
        self._pending.clear()

    def commit(self, txid: int) -> None:
        """Make the changes prepared for ``txid`` the committed state (idempotent)."""
        ns = self._ns
        if ns.committed == txid:
            return
        changes = ns.prepared if ns.prepared_txid == txid else {}
        ns.undo = {k: ns.data.get(k, _ABSENT) for k in changes or {}}
        ns.undo_prev = ns.committed
        for k, v in (changes or {}).items():
            if v is _ABSENT:
                ns.data.pop(k, None)
            else:
                ns.data[k] = v
        ns.prepared = ns.prepared_txid = None
        ns.committed = txid

    def rollback(self) -> None:
        """Discard the prepared changes (and this instance's pending ones)."""
        self._pending.clear()
        self._ns.prepared = self._ns.prepared_txid = None

    def committed_txid(self) -> int | None:
        """The last txid committed (None: never)."""
        return self._ns.committed

    def prepared_txid(self) -> int | None:
        """The txid whose changes are prepared and not committed (None: none)."""
        return self._ns.prepared_txid

    def rollback_commit(self, txid: int) -> None:
        """Take back the commit of ``txid``, the last one: the state as before it."""
        ns = self._ns
        if ns.committed != txid or ns.undo is None:
            msg = f"state {self.namespace!r} cannot take back txid {txid} (at {ns.committed})"
            raise RuntimeError(msg)
        for k, v in ns.undo.items():
            if v is _ABSENT:
                ns.data.pop(k, None)
            else:
                ns.data[k] = v
        ns.committed, ns.undo = ns.undo_prev, None


class InMemoryKeyValueStateProvider:
    """``topology.state.provider = memory`` (Storm's ``InMemoryKeyValueStateProvider``)."""

    def new_state(self, namespace: str, conf: Any, context: Any) -> InMemoryKeyValueState:
        """The state of ``namespace`` (one task of one component)."""
        return InMemoryKeyValueState(namespace)

    @staticmethod
    def clear() -> None:
        """Forget every namespace (tests)."""
        _MEMORY.clear()
