"""The standard benchmark's events: deterministic, seeded, and produced fast.

Event ``i`` of ``n`` (``i`` is its position in production order):

- ``key``: one of ``keys`` names ``k0000``..``k0999``, uniform at random;
- ``ts``: event time in epoch ms, ``start_ms + i`` (1 ms per event: about 1000 events per
  second of event time), except that ~1% are pulled back by 1..3000 ms (out of order, still on
  time with a 5 s lag) and ~0.1% by 10001..20000 ms (later than 10 s: late);
- ``value``: an int in 0..999.

The partition is chosen explicitly: ``key index % partitions``, so a key always goes to the
same partition. Values are compact JSON: ``{"key":"k0042","ts":1700000000123,"value":17}``.

Example:
    >>> ev = generate(5, seed=1)
    >>> ev.n, len(ev.payloads()), ev.payloads()[0][:8]
    (5, 5, b'{"key":"')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

START_MS = 1_700_000_000_000  # a multiple of 10 s
OUT_OF_ORDER = 0.01
VERY_LATE = 0.001


@dataclass(frozen=True, eq=False)
class Events:
    """Columns of the generated events, in production order (NumPy int64 arrays)."""

    key: np.ndarray        # key index, 0..keys-1
    ts: np.ndarray         # event time, epoch ms
    value: np.ndarray
    partition: np.ndarray  # key % partitions

    def __post_init__(self) -> None:
        sizes = {len(self.key), len(self.ts), len(self.value), len(self.partition)}
        if len(sizes) != 1:
            raise ValueError(f"Events columns differ in length: {sorted(sizes)}")

    @property
    def n(self) -> int:
        """Number of events."""
        return len(self.key)

    def key_names(self) -> list[str]:
        """The key of each event as a string (``k0042``)."""
        return [f"k{k:04d}" for k in self.key.tolist()]

    def payloads(self) -> list[bytes]:
        """The JSON value of each event."""
        return [f'{{"key":"k{k:04d}","ts":{t},"value":{v}}}'.encode()
                for k, t, v in zip(self.key.tolist(), self.ts.tolist(), self.value.tolist(),
                                   strict=True)]


def generate(n: int, *, seed: int = 42, keys: int = 1000, partitions: int = 4,
             start_ms: int = START_MS) -> Events:
    """``n`` events (see the module docstring); the same arguments give the same events."""
    if n < 0 or keys < 1 or partitions < 1:
        raise ValueError(f"generate: need n >= 0, keys >= 1, partitions >= 1; got n={n}, "
                         f"keys={keys}, partitions={partitions}")
    rng = np.random.default_rng(seed)
    key = rng.integers(0, keys, n, dtype=np.int64)
    value = rng.integers(0, 1000, n, dtype=np.int64)
    ts = start_ms + np.arange(n, dtype=np.int64)
    draw = rng.random(n)
    shifted = draw < OUT_OF_ORDER
    late = (draw >= OUT_OF_ORDER) & (draw < OUT_OF_ORDER + VERY_LATE)
    ts[shifted] -= rng.integers(1, 3001, int(shifted.sum()), dtype=np.int64)
    ts[late] -= rng.integers(10_001, 20_001, int(late.sum()), dtype=np.int64)
    return Events(key, ts, value, key % partitions)


def produce(bootstrap: str, topic: str, events: Events,
            on_progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Produce ``events`` to ``topic`` in order; returns the Kafka offset of each event.

    Each partition's delivery reports arrive in production order; they must show strictly
    increasing offsets (else the log's order differs from the production order and a
    ``RuntimeError`` says so).
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10_000, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 500_000,
                         "queue.buffering.max.kbytes": 262_144, "acks": "all"})
    reported: dict[int, list[int]] = {}
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            reported.setdefault(msg.partition(), []).append(msg.offset())

    for i, (payload, p) in enumerate(zip(events.payloads(), events.partition.tolist(),
                                         strict=True)):
        while True:
            try:
                producer.produce(topic, payload, partition=p, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        if on_progress is not None and i % 100_000 == 0:
            on_progress(i)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    if left or errors:
        raise RuntimeError(f"produce to {topic}: {left} undelivered, errors {errors[:3]}")
    return _offsets_of(events, reported, topic)


def _offsets_of(events: Events, reported: dict[int, list[int]], topic: str) -> np.ndarray:
    offsets = np.empty(events.n, dtype=np.int64)
    for p in np.unique(events.partition).tolist():
        got = np.asarray(reported.get(p, []), dtype=np.int64)
        where = np.nonzero(events.partition == p)[0]
        if len(got) != len(where) or (len(got) > 1 and np.any(np.diff(got) <= 0)):
            raise RuntimeError(f"produce to {topic}[{p}]: {len(where)} records sent, "
                               f"{len(got)} delivery reports, offsets not strictly increasing "
                               "in production order")
        offsets[where] = got
    return offsets
