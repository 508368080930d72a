"""Session fixtures for integration tests: one broker, one Redis, one SparkSession.

Every test gets its own topic name and checkpoint directory, so tests never share state
through the shared services. Kafka and Redis run in containers (testcontainers, images built
here without a registry: the tansu broker, Debian's ``redis-server``) when
``KSTORM_TEST_SERVICES`` is ``docker``, or ``auto`` (the default) and a Docker engine answers;
else as the embedded child processes (tansu, ``redis-server``). ``_services.py`` decides;
``kafka.kind`` / ``redis_server.kind`` say which ran. ``docker`` with no engine fails every
test that needs them with "no container engine: ..." (run
``eval "$(bash scripts/container-engine.sh)"`` first). Tests that crash and restart Redis
start their own ``EmbeddedRedis``.

Fixtures:
    kafka           KafkaService (session); ``kafka.bootstrap_servers``
    redis_server    RedisService (session); ``redis_server.url`` / ``.host`` / ``.port``
    spark           SparkSession, local[2] (session)
    topic_name      a unique topic name (function; the topic is not created)
    checkpoint_dir  a fresh checkpoint directory path (function)
    produce         ``produce(bootstrap, topic, records, partition=None)``
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _services import KafkaService, RedisService, kafka_service, redis_service

from kstorm.errors import EmbeddedServiceError, SourceError

REPO = Path(__file__).resolve().parent.parent

Record = bytes | str | tuple[bytes | str | None, bytes | str | None]


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaService]:
    from kstorm._kafka.client import close_driver_consumers

    with _reported(kafka_service()) as broker:
        yield broker
        close_driver_consumers()  # before the broker goes: no reconnect noise at exit


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisService]:
    with _reported(redis_service()) as server:
        yield server


@contextmanager
def _reported(service: Any) -> Iterator[Any]:
    """``service`` entered; "no container engine: ..." becomes a pytest failure saying so."""
    try:
        running = service.__enter__()
    except EmbeddedServiceError as exc:
        if str(exc).startswith("no container engine"):
            pytest.fail(str(exc), pytrace=False)
        raise
    try:
        yield running
    except BaseException:
        if not service.__exit__(*sys.exc_info()):
            raise
    else:
        service.__exit__(None, None, None)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Python workers must import kstorm, serdes and sinks from this checkout.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # (and the test modules themselves: bolts defined in a test are pickled by reference)
    paths = [str(REPO), str(REPO / "integration_tests"),
             *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    from kstorm._spark.session import launch_options, zygote_after_launch, zygote_before_launch
    from kstorm.config import TopologyConfig

    settings = TopologyConfig.from_conf(
        {"kstorm.spark.master": "local[2]", "kstorm.shuffle.partitions": 4}
    )
    options = {
        **launch_options(settings),  # what kstorm itself runs with
        "spark.app.name": "kstorm-integration-tests",
        "spark.driver.memory": "1g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.minBatchesToRetain": "10",
    }
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    forked = zygote_before_launch(settings)  # Python processes forked, as kstorm's are
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    zygote_after_launch(session, forked)
    yield session
    session.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """``<test name>-<random>``, legal as a Kafka topic name."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:120]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    """A checkpoint location that does not exist yet (Spark creates it)."""
    return tmp_path / "checkpoint"


def _bytes(data: bytes | str | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    partition: int | None = None,
    *,
    headers: list[tuple[str, bytes]] | None = None,
) -> list[tuple[int, int]]:
    """Produce ``records`` (values, or ``(key, value)`` pairs) and wait for every ack.

    Returns the ``(partition, offset)`` of each record, in order. ``partition=None`` lets
    the producer choose (by key when there is one).
    """
    from confluent_kafka import Producer

    from kstorm._kafka.client import client_config

    producer = Producer({**client_config(bootstrap), "linger.ms": 5, "acks": "all"})
    acks: list[tuple[int, int] | None] = []
    errors: list[str] = []

    def on_delivery(slot: int) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{topic}: {err}")
            else:
                acks[slot] = (msg.partition(), msg.offset())

        return report

    for record in records:
        key, value = record if isinstance(record, tuple) else (None, record)
        acks.append(None)
        options: dict[str, Any] = {"key": _bytes(key), "value": _bytes(value), "headers": headers}
        if partition is not None:
            options["partition"] = partition
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery(len(acks) - 1), **options)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(30)
    if left or errors or any(ack is None for ack in acks):
        msg = f"produce to {topic}: {left} undelivered, errors {errors[:3]}"
        raise SourceError(msg)
    return [ack for ack in acks if ack is not None]


@pytest.fixture
def produce() -> Callable[..., list[tuple[int, int]]]:
    """The :func:`produce_records` helper."""
    return produce_records
