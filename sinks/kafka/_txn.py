"""The sink's Kafka clients: one transactional producer and one never-joining consumer.

librdkafka reports transactional errors in four kinds (see ``classify``): *retriable* (the
same call may be repeated, e.g. a timeout), *abortable* (abort the transaction, then start
again), *fatal* (the producer is unusable) and, among the fatal ones on Apache Kafka,
*fenced*: another producer with the same ``transactional.id`` called
``init_transactions()`` after this one, so this one is a zombie and must stop. tansu reports
fencing as abortable, hence the error codes are checked first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from kstorm.errors import SinkError
from kstorm.kafka.connection import KafkaConnection

log = logging.getLogger("kstorm.sinks.kafka")
Kind = Literal["fenced", "fatal", "abortable", "retriable", "error"]
T = TypeVar("T")

FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH})
RESERVED = {  # librdkafka key -> the KafkaSink argument (or reason) that owns it
    "bootstrap.servers": "bootstrap_servers",
    "transactional.id": "transactional_id",
    "enable.idempotence": "nothing: a transactional producer is always idempotent",
    "group.id": "transactional_id (the sink's group has the same name)",
}


def classify(error: KafkaError) -> Kind:
    """The kind of a transactional error (module docstring).

    Example:
        >>> classify(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
        'fenced'
        >>> classify(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True))
        'retriable'
    """
    if error.code() in FENCED_CODES:
        return "fenced"
    if error.fatal():
        return "fatal"
    if error.txn_requires_abort():
        return "abortable"
    if error.retriable():
        return "retriable"
    return "error"


class KafkaCallError(SinkError):
    """A Kafka client call failed; ``kind`` says what the sink may do next."""

    def __init__(self, message: str, kind: Kind) -> None:
        super().__init__(message)
        self.kind = kind


def call(what: str, fn: Callable[[float], T], timeout: float,
         clock: Callable[[], float] = time.monotonic) -> T:
    """``fn(remaining seconds)``, repeated while it fails with a retriable error.

    Raises:
        KafkaCallError: any other failure, or still failing when ``timeout`` is spent.
    """
    deadline = clock() + timeout
    retried = False
    while True:
        try:
            return fn(max(deadline - clock(), 0.1))
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None:
                msg = f"{what} failed: {exc}"
                raise KafkaCallError(msg, "error") from exc
            kind = classify(error)
            if kind == "retriable" and clock() < deadline:
                log.log(logging.WARNING if not retried else logging.DEBUG,
                        "%s: %s (retrying for up to %.0fs)", what, error.str(), timeout)
                retried = True
                continue
            msg = f"{what} failed: {error.name()}: {error.str()}"
            raise KafkaCallError(msg, kind) from exc


def as_call_error(exc: BaseException, what: str) -> KafkaCallError:
    """``exc`` as a KafkaCallError (a KafkaException classified, anything else an "error")."""
    if isinstance(exc, KafkaCallError):
        return exc
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(error, KafkaError):
        return KafkaCallError(f"{what}: {error.name()}: {error.str()}", classify(error))
    return KafkaCallError(f"{what}: {type(exc).__name__}: {exc}", "error")


def make_producer(connection: KafkaConnection, name: str, extra: Mapping[str, Any]
                  ) -> Producer:
    """The sink's transactional producer (``init_transactions`` not called yet)."""
    return Producer(connection.client_config("transactional_producer", transactional_id=name,
                                             role_config=extra))


def make_consumer(connection: KafkaConnection, group: str) -> Consumer:
    """A consumer of ``group`` that never subscribes (nor joins the group).

    It reads the group's committed offsets and hands ``consumer_group_metadata()`` to
    ``send_offsets_to_transaction``.
    """
    return Consumer(connection.client_config("sink_consumer", group_id=group))


def produce(producer: Producer, topic: str, key: bytes | None, value: bytes | None,
            headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
    """Queue one record, waiting for room in librdkafka's queue when it is full."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)
