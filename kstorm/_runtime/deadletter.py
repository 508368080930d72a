"""Where records that could not be processed go: a Kafka topic, with the reason in headers.

Every dead letter is also counted in the topology's progress and kept (up to a bound) on
the handle, so nothing is dropped silently. Fields of a dead-letter record are
``kstorm._runtime.envelope.DEAD_LETTER_FIELDS``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from kstorm._kafka.connection import KafkaConnection
from kstorm._runtime.envelope import DEAD_LETTER_FIELDS

log = logging.getLogger("kstorm.dead_letter")


def as_record(values: Sequence[Any]) -> dict[str, Any]:
    """A dead-letter row as a dict keyed by ``DEAD_LETTER_FIELDS``."""
    return dict(zip(DEAD_LETTER_FIELDS, values, strict=True))


class DeadLetterWriter:
    """Writes dead letters to ``topic`` (when a broker is configured) and keeps the last few.

    ``connection``: the topology's Kafka connection (with its security settings), or None
    when the topology has no Kafka (dead letters are then counted and kept on the handle).
    """

    def __init__(self, topology: str, connection: KafkaConnection | None, topic: str | None,
                 keep: int = 10_000) -> None:
        self.topology = topology
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
        for r in records:
            headers = [(k, str(r[k]).encode()) for k in
                       ("component", "stream", "error_type", "topic", "partition", "offset")
                       if r[k] is not None]
            headers += [("message", str(r["message"]).encode()[:16_384]),
                        ("topology", self.topology.encode()),
                        ("batch_id", str(batch_id).encode())]
            value = r["raw"] if r["raw"] is not None else str(r["values"]).encode()
            producer.produce(self.topic, value=value, headers=headers)
            producer.poll(0)
        remaining = producer.flush(30)
        if remaining:
            from kstorm.errors import SinkError

            msg = (
                f"could not deliver {remaining} dead letters to {self.topic!r} "
                            f"at {self.connection.bootstrap_servers} within 30 s"
            )
            raise SinkError(msg)

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
