"""Reading a whole topic back in the integration tests (dead letters, sink outputs)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every record of every partition of ``topic`` (assigned from 0, read to the end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in partitions])
    out, pending = [], set(partitions)
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                error = msg.error()
                if error is None:
                    out.append(msg)
                elif error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
    finally:
        consumer.close()
    assert not pending, f"{topic}: partitions {sorted(pending)} not read to the end"
    return out


def committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]
              ) -> dict[tuple[str, int], int]:
    """The group's committed offset of each partition (-1001: none), without joining it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        answer = consumer.committed([KafkaTopicPartition(t, p) for t, p in partitions],
                                    timeout=10)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in answer}
