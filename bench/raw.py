"""The raw limit: a plain confluent-kafka consumer aggregating in a Python dict.

What a hand-written single-process Python job does at best: assign every partition, consume
in batches, ``json.loads`` each value, and keep ``[count, sum]`` per (key, window start) of a
10 s tumbling window in a dict. No lateness, no state, no sink: an upper bound for plain
Python on one core.

Example:
    >>> r = consume_and_aggregate("127.0.0.1:9092", "events", {0: 10})  # doctest: +SKIP
    >>> r.events, round(r.rate)                                         # doctest: +SKIP
    (10, 98000)
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

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


def consume_and_aggregate(bootstrap: str, topic: str, ends: Mapping[int, int], *,
                          batch: int = 10_000, timeout_s: float = 120.0) -> RawResult:
    """Read ``topic`` (partition -> end offset ``ends``, from offset 0) and aggregate."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-raw",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 10, "max.partition.fetch.bytes": 8_388_608})
    loads = json.loads
    windows: dict[tuple[str, int], list[int]] = {}
    total = sum(ends.values())  # a fresh topic: exactly these records, from offset 0
    events = 0
    started = time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
    try:
        while events < total:
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"raw consumer: read {events:,} of {total:,} records of "
                                   f"{topic} in {timeout_s}s")
            for msg in consumer.consume(batch, 1.0):
                if msg.error() is not None:
                    continue
                event = loads(msg.value())  # type: ignore[arg-type]  # values are never null
                ts = event["ts"]
                k = (event["key"], -(-ts // WINDOW_MS) * WINDOW_MS - WINDOW_MS)
                acc = windows.get(k)
                if acc is None:
                    windows[k] = [1, event["value"]]
                else:
                    acc[0] += 1
                    acc[1] += event["value"]
                events += 1
        seconds = time.monotonic() - started
    finally:
        consumer.close()
    return RawResult(events, seconds, windows)
