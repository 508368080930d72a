"""The raw limit: a plain confluent-kafka consumer aggregating in a Python dict.

What a hand-written single-process Python job does at best: assign every partition, consume
in batches, ``json.loads`` each value, and keep ``[count, sum]`` per (key, window start) of a
10 s tumbling window in a dict (:func:`consume_and_aggregate`, the standard benchmark's
baseline), or split each sentence and count its words in a ``Counter``
(:func:`consume_and_count_words`, the word-count benchmark's). No lateness, no state, no
sink: an upper bound for plain Python on one core.

Example:
    >>> r = consume_and_aggregate("127.0.0.1:9092", "events", {0: 10})  # doctest: +SKIP
    >>> r.events, round(r.rate)                                         # doctest: +SKIP
    (10, 98000)
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

WINDOW_MS = 10_000


@dataclass(frozen=True)
class RawResult:
    """Events read, seconds taken, and the aggregates: (key, window start) -> [count, sum]."""

    events: int
    seconds: float
    windows: dict[tuple[str, int], list[int]]

    @property
    def rate(self) -> float:
        """Events per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0


def _records(bootstrap: str, topic: str, ends: Mapping[int, int], batch: int,
             timeout_s: float, started: float) -> Iterator[list[Any]]:
    """Batches of records of ``topic`` until ``sum(ends)`` were read (a fresh topic: exactly
    these records, from offset 0)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-raw",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 10, "max.partition.fetch.bytes": 8_388_608})
    total, read = sum(ends.values()), 0
    consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
    try:
        while read < total:
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"raw consumer: read {read:,} of {total:,} records of "
                                   f"{topic} in {timeout_s}s")
            msgs = [m for m in consumer.consume(batch, 1.0) if m.error() is None]
            read += len(msgs)
            yield msgs
    finally:
        consumer.close()


def consume_and_aggregate(bootstrap: str, topic: str, ends: Mapping[int, int], *,
                          batch: int = 10_000, timeout_s: float = 120.0) -> RawResult:
    """Read ``topic`` (partition -> end offset ``ends``, from offset 0) and aggregate."""
    loads = json.loads
    windows: dict[tuple[str, int], list[int]] = {}
    events = 0
    started = time.monotonic()
    for msgs in _records(bootstrap, topic, ends, batch, timeout_s, started):
        for msg in msgs:
            event = loads(msg.value())  # values are never null
            ts = event["ts"]
            k = (event["key"], -(-ts // WINDOW_MS) * WINDOW_MS - WINDOW_MS)
            acc = windows.get(k)
            if acc is None:
                windows[k] = [1, event["value"]]
            else:
                acc[0] += 1
                acc[1] += event["value"]
            events += 1
    return RawResult(events, time.monotonic() - started, windows)


@dataclass(frozen=True)
class RawWordCount:
    """Sentences read, seconds taken, and the word counts."""

    sentences: int
    seconds: float
    counts: Counter[str]

    @property
    def words(self) -> int:
        """Words counted."""
        return sum(self.counts.values())

    @property
    def rate(self) -> float:
        """Words per second."""
        return self.words / self.seconds if self.seconds > 0 else 0.0


def consume_and_count_words(bootstrap: str, topic: str, ends: Mapping[int, int], *,
                            field: str = "sentence", batch: int = 10_000,
                            timeout_s: float = 120.0) -> RawWordCount:
    """Read ``topic`` (JSON records with a ``field`` string) and count its words."""
    loads = json.loads
    counts: Counter[str] = Counter()
    sentences = 0
    started = time.monotonic()
    for msgs in _records(bootstrap, topic, ends, batch, timeout_s, started):
        for msg in msgs:
            counts.update(loads(msg.value())[field].split())
        sentences += len(msgs)
    return RawWordCount(sentences, time.monotonic() - started, counts)
