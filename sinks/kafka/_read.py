"""Reading the sink's records back: its group's committed offsets and its bookkeeping topic.

Used when a topology starts (reconcile asks the sink where it stopped), not in
the commit path. The bookkeeping topic is created here too.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from kstorm.errors import SinkError
from kstorm.kafka.connection import KafkaConnection, as_connection

from ._book import Offsets, assemble_state

log = logging.getLogger("kstorm.sinks.kafka")
BOOK_TOPIC_CONFIG = {"cleanup.policy": "compact"}


def create_book_topic(connection: KafkaConnection | str, name: str, timeout: float) -> None:
    """Create the bookkeeping topic ``name`` (1 partition, compacted) unless it exists.

    A broker where clients may not create topics needs it created beforehand, e.g.
    ``kafka-topics --create --topic <name> --partitions 1 --config cleanup.policy=compact``.
    """
    admin = AdminClient(as_connection(connection).client_config("admin"))
    if _partitions(admin, name, timeout):
        return
    futures = admin.create_topics([NewTopic(name, 1, 1, config=BOOK_TOPIC_CONFIG)],
                                  operation_timeout=timeout)
    try:
        futures[name].result(timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            msg = (f"KafkaSink: cannot create its bookkeeping topic {name!r} on "
                   f"{as_connection(connection).bootstrap_servers} "
                   f"(create it with 1 partition and cleanup.policy=compact): {exc}")
            raise SinkError(msg) from exc
    deadline = time.monotonic() + timeout
    while not _partitions(admin, name, timeout):
        if time.monotonic() > deadline:
            msg = f"KafkaSink: bookkeeping topic {name!r} not in the metadata after {timeout}s"
            raise SinkError(msg)
        time.sleep(0.05)


def require_topic(connection: KafkaConnection | str, topic: str, timeout: float,
                  where: str) -> int:
    """The partition count of ``topic``; SinkError if the brokers do not have it.

    Listing every topic (rather than asking for this one) never auto-creates it: the output
    topic's partition count decides how keys spread, so it should be created on purpose.
    """
    admin = AdminClient(as_connection(connection).client_config("admin"))
    try:
        count = _partitions(admin, topic, timeout)
    except KafkaException as exc:
        servers = as_connection(connection).bootstrap_servers
        msg = f"{where}: cannot reach the brokers at {servers}: {exc}"
        raise SinkError(msg) from exc
    if not count:
        msg = (f"{where}: output topic {topic!r} does not exist on "
               f"{as_connection(connection).bootstrap_servers}; create it first")
        raise SinkError(msg)
    return count


def _partitions(admin: AdminClient, name: str, timeout: float) -> int:
    topic = admin.list_topics(timeout=timeout).topics.get(name)
    return 0 if topic is None or topic.error is not None else len(topic.partitions)


def read_group_offsets(connection: KafkaConnection | str, group: str, timeout: float
                       ) -> tuple[int | None, Offsets]:
    """The marker's committed offset (None if unset) and every other committed offset."""
    admin = AdminClient(as_connection(connection).client_config("admin"))
    request = [ConsumerGroupTopicPartitions(group)]
    try:
        answer = admin.list_consumer_group_offsets(request, request_timeout=timeout)[group]
        partitions = answer.result(timeout).topic_partitions or []
    except KafkaException as exc:
        msg = f"KafkaSink {group!r}: cannot read its group's committed offsets: {exc}"
        raise SinkError(msg) from exc
    marker: int | None = None
    offsets: Offsets = {}
    for tp in partitions:
        if tp.offset < 0:
            continue
        if tp.topic == group and tp.partition == 0:
            marker = tp.offset
        else:
            offsets.setdefault(tp.topic, {})[tp.partition] = tp.offset
    return marker, offsets


def read_state(connection: KafkaConnection | str, name: str, txid: int, timeout: float
               ) -> dict[str, bytes]:
    """The window state committed with ``txid``: the bookkeeping topic read to its end."""
    consumer = Consumer(as_connection(connection).client_config("reader",
                                                         group_id=f"{name}.reader"))
    records = []
    try:
        consumer.assign([TopicPartition(name, 0, 0)])
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                msg = f"KafkaSink {name!r}: bookkeeping topic not read to its end in {timeout}s"
                raise SinkError(msg)
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is None:
                records.append((message.key(), message.value(), message.headers()))
            elif error.code() == KafkaError._PARTITION_EOF:
                break
            else:
                msg = f"KafkaSink {name!r}: reading the bookkeeping topic: {error}"
                raise SinkError(msg)
    finally:
        consumer.close()
    return assemble_state(records, txid)
