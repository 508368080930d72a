"""Random 64-bit tuple ids, seeded so that a replayed batch assigns the same ids.

Storm gives every tuple (and every spout tuple tree) a random 64-bit id
(``MessageId.generateId``). kstorm keeps the ids in Java's signed ``long`` range,
``[-2**63, 2**63)``, so they fit Spark's ``LongType`` and the ack vals can be
combined in the JVM with ``bit_xor``. The XOR of two ids in that range stays in
that range. ``0`` is never an id: an ack val of ``0`` means "tree complete".

Example:
    >>> ids = TupleIdGenerator.for_task(batch_id=7, partition=2, task="split")
    >>> again = TupleIdGenerator.for_task(batch_id=7, partition=2, task="split")
    >>> ids.next_id() == again.next_id()
    True
    >>> acker_for(-5, 2)
    1
"""

from __future__ import annotations

import hashlib
import random
from typing import Protocol

from kstorm.errors import ConfigError, KstormError

MIN_ID = -(1 << 63)
"""Smallest tuple id (Java ``Long.MIN_VALUE``)."""
MAX_ID = (1 << 63) - 1
"""Largest tuple id (Java ``Long.MAX_VALUE``)."""

_SIGN_BIT = 1 << 63
_WORD = 1 << 64


class IdSource(Protocol):
    """Anything that hands out tuple ids (a seeded generator, or a script in tests)."""

    def next_id(self) -> int:
        """Return a fresh non-zero signed 64-bit id."""
        ...


class TupleIdGenerator:
    """Deterministic stream of random non-zero signed 64-bit ids.

    Args:
        seed: Any int; the same seed always yields the same ids.

    Example:
        >>> TupleIdGenerator(1).next_id() == TupleIdGenerator(1).next_id()
        True
    """

    __slots__ = ("_rng", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    @classmethod
    def for_task(cls, batch_id: int, partition: int, task: int | str) -> TupleIdGenerator:
        """Generator for one task's work on one partition of one batch.

        Args:
            batch_id: Spark batch id (the transaction id).
            partition: Spark partition index the task runs on.
            task: Storm task id, or any stable name unique in the topology
                (e.g. ``"split:3"``).

        Returns:
            A generator whose ids are the same every time the batch is replayed.
        """
        return cls(seed_for(batch_id, partition, task))

    def next_id(self) -> int:
        """Return the next id: uniform over signed 64-bit values except 0."""
        while True:
            raw = self._rng.getrandbits(64)
            if raw:
                return raw - _WORD if raw & _SIGN_BIT else raw


def seed_for(batch_id: int, partition: int, task: int | str) -> int:
    """Stable 64-bit seed for ``(batch_id, partition, task)``.

    Uses BLAKE2b rather than ``hash()``, whose value for strings changes
    between Python processes.

    Example:
        >>> seed_for(1, 0, 3) == seed_for(1, 0, 3) != seed_for(2, 0, 3)
        True
    """
    key = f"{batch_id}\x1f{partition}\x1f{type(task).__name__}:{task}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def root_id_for(spout_task: int, topic: str, partition: int, offset: int, attempt: int) -> int:
    """Root id of one attempt of a Kafka spout tuple (the same on every replay of its batch).

    Each attempt (0 for the first emit, n for the n-th retry) is a new tuple tree, so a
    late ack from an earlier attempt can never complete a later one.

    Example:
        >>> first = root_id_for(0, "t", 1, 7, 0)
        >>> first == root_id_for(0, "t", 1, 7, 0) != root_id_for(0, "t", 1, 7, 1)
        True
    """
    key = f"{spout_task}\x1f{topic}\x1f{partition}\x1f{offset}\x1f{attempt}".encode()
    raw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    value = raw - _WORD if raw & _SIGN_BIT else raw
    return value or 1


def emit_root_id(spout_task: int, seq: int, index: int) -> int:
    """Root id of a free-form spout's emit: tuple ``index`` of its logged batch ``seq``.

    Every emit (a re-emit of a failed message id too) is a new tuple tree, with a root id
    that is the same on every replay of the logged batch. (Kafka tuples use
    :func:`root_id_for`; the ``@`` keeps the two key spaces apart.)

    Example:
        >>> emit_root_id(0, 3, 1) == emit_root_id(0, 3, 1) != emit_root_id(0, 3, 2)
        True
    """
    key = f"{spout_task}\x1f@{seq}\x1f{index}".encode()
    raw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    value = raw - _WORD if raw & _SIGN_BIT else raw
    return value or 1


def acker_for(root_id: int, n_ackers: int) -> int:
    """Index of the acker task that tracks ``root_id`` (Storm's mod hashing).

    Python's ``%`` is a floor modulo, so this equals Spark's
    ``pmod(root_id, n_ackers)`` and the acker partition can be computed in the JVM.

    Args:
        root_id: Id of the spout tuple tree.
        n_ackers: Number of acker tasks (``topology.acker.executors``).

    Raises:
        ConfigError: If ``n_ackers`` is not a positive int.
    """
    if isinstance(n_ackers, bool) or not isinstance(n_ackers, int) or n_ackers < 1:
        msg = f"topology.acker.executors must be a positive int to route acks, got {n_ackers!r}"
        raise ConfigError(msg)
    return root_id % n_ackers


def check_id(value: int, what: str) -> int:
    """Return ``value`` if it is a valid non-zero signed 64-bit id.

    Raises:
        KstormError: Naming ``what`` and the value, if it is not.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_ID <= value <= MAX_ID:
        msg = f"{what} must be a signed 64-bit int, got {value!r}"
        raise KstormError(msg)
    if value == 0:
        msg = f"{what} must be non-zero (0 is the 'tree complete' ack val)"
        raise KstormError(msg)
    return value
