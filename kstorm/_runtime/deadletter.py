"""Where records that could not be processed go: a Kafka topic, with the reason in headers.

Every dead letter is also counted in the topology's progress and kept (up to a bound) on
the handle, so nothing is dropped silently. Fields of a dead-letter record are
``kstorm._runtime.envelope.DEAD_LETTER_FIELDS``.

A dead letter must never be what stops a topology: a record larger than the producer may
send (``kstorm.dead.letter.max.bytes``, below librdkafka's 1,000,000-byte default and most
brokers' topic limit) is published truncated, with the headers ``kstorm.truncated`` =
``true`` and ``kstorm.original.bytes`` = its size, so the topology gets past it. A publish
the broker rejects fails the commit (the batch is retried), never silently.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from kstorm._runtime.envelope import DEAD_LETTER_FIELDS
from kstorm.kafka.connection import KafkaConnection

log = logging.getLogger("kstorm.dead_letter")


def as_record(values: Sequence[Any]) -> dict[str, Any]:
    """A dead-letter row as a dict keyed by ``DEAD_LETTER_FIELDS``."""
    return dict(zip(DEAD_LETTER_FIELDS, values, strict=True))


def given_up_letter(spout: str, stream: str, reason: str, shown: Any,
                    where: Sequence[Any] = (None, None, None), raw: Any = None) -> list[Any]:
    """A spout tuple of a given-up transaction as dead-letter values (both orchestrations).

    ``shown``: what the record shows of it (a spout's typed row by field name, an envelope
    tuple's values); ``where``: its Kafka topic, partition and offset, if it has them.
    """
    return [spout, stream, "TransactionFailed", reason, repr(shown)[:10_000], *where, raw]


class DeadLetterWriter:
    """Writes dead letters to ``topic`` (when a broker is configured) and keeps the last few.

    ``connection``: the topology's Kafka connection (with its security settings), or None
    when the topology has no Kafka (dead letters are then counted and kept on the handle).
    """

    def __init__(self, topology: str, connection: KafkaConnection | None, topic: str | None,
                 keep: int = 10_000, max_bytes: int = 900_000) -> None:
        self.topology = topology
        self.max_bytes = max_bytes
        self.connection = connection
        self.topic = topic
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.count = 0
        self._producer: Any = None

    def write(self, batch_id: int, records: list[dict[str, Any]]) -> None:
        """Record and publish one batch's dead letters (flushes before returning)."""
        if not records:
            return
        self.count += len(records)
        self.recent.extend(records)
        for r in records[:3]:
            log.warning("dead letter from %s (%s:%s@%s): %s: %s", r["component"], r["topic"],
                        r["partition"], r["offset"], r["error_type"],
                        str(r["message"]).splitlines()[0][:300])
        if self.connection is None or self.topic is None:
            return
        producer = self._get_producer(self.connection)
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        for r in records:
            value, headers = self.message(batch_id, r)
            producer.produce(self.topic, value=value, headers=headers, on_delivery=delivered)
            producer.poll(0)
        remaining = producer.flush(30)
        if remaining or failed:
            from kstorm.errors import SinkError

            msg = (f"could not deliver {remaining + len(failed)} dead letters to "
                   f"{self.topic!r} at {self.connection.bootstrap_servers}: "
                   f"{failed[0] if failed else 'not acknowledged within 30 s'}")
            raise SinkError(msg, hint="check the dead-letter topic exists and is writable "
                            "(kstorm.dead.letter.topic)")

    def message(self, batch_id: int, r: dict[str, Any]) -> tuple[bytes, list[tuple[str, bytes]]]:
        """A dead letter's value and headers, the value truncated to fit ``max_bytes``.

        Example:
            >>> w = DeadLetterWriter("t", None, None, max_bytes=1024)
            >>> rec = dict.fromkeys(DEAD_LETTER_FIELDS)
            >>> rec.update(component="spout", message="bad", raw=b"x" * 5000)
            >>> value, headers = w.message(0, rec)
            >>> len(value) < 1024, dict(headers)["kstorm.original.bytes"]
            (True, b'5000')
        """
        headers = [(k, str(r[k]).encode()) for k in
                   ("component", "stream", "error_type", "topic", "partition", "offset")
                   if r[k] is not None]
        headers += [("message", str(r["message"]).encode()[:min(16_384, self.max_bytes // 4)]),
                    ("topology", self.topology.encode()),
                    ("batch_id", str(batch_id).encode())]
        value = r["raw"] if r["raw"] is not None else str(r["values"]).encode()
        room = self.max_bytes - sum(len(k) + len(v) for k, v in headers) - 256
        if len(value) > room:
            headers += [("kstorm.truncated", b"true"),
                        ("kstorm.original.bytes", str(len(value)).encode())]
            value = value[:max(room, 0)]
        return value, headers

    def close(self) -> None:
        """Flush and drop the producer (if one was created)."""
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None

    def _get_producer(self, connection: KafkaConnection) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(connection.client_config("producer"))
        return self._producer
