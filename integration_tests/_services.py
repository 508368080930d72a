"""Kafka and Redis for integration tests: Docker containers when possible, else local processes.

``KSTORM_TEST_SERVICES`` chooses where the services run:

- ``docker``: testcontainers' ``KafkaContainer`` (Confluent image, KRaft) and ``RedisContainer``;
  fails if testcontainers is missing (``pip install 'kstorm[docker]'``) or the engine is down.
- ``local``: :class:`kstorm.embedded.EmbeddedKafka` (tansu) and
  :class:`kstorm.embedded.EmbeddedRedis` (``redis-server``) as child processes.
- ``auto`` (the default): ``docker`` if :func:`docker_available`, else ``local``.

testcontainers is imported lazily: it is an optional extra, and this module must import (and
the local path must work) without it.

Example:
    >>> with kafka_service() as kafka, redis_service(appendonly=True) as redis:  # doctest: +SKIP
    ...     print(kafka.kind, kafka.bootstrap_servers, redis.url)
    local 127.0.0.1:40311 redis://127.0.0.1:38021/0
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from kstorm.embedded import EmbeddedKafka, EmbeddedRedis
from kstorm.errors import ConfigError, EmbeddedServiceError, MissingDependencyError

ENV_VAR = "KSTORM_TEST_SERVICES"
MODES = ("auto", "docker", "local")
Kind = Literal["docker", "local"]

# testcontainers' KafkaContainer (4.15) boots through the Confluent image's own scripts
# (/etc/confluent/docker/...), so apache/kafka images do not work with it.
KAFKA_IMAGE = "confluentinc/cp-kafka:7.7.1"  # Apache Kafka 3.7.1
REDIS_IMAGE = "redis:7.4.2"
# KafkaContainer leaves these at Kafka's defaults (replication 3, min ISR 2), with which
# a one-broker cluster cannot create __transaction_state: every transactional producer
# (the Kafka sink) would fail in init_transactions().
KAFKA_BROKER_ENV = {
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "true",
}
PING_TIMEOUT = 2.0  # seconds for the Docker engine to answer a ping
KAFKA_START_TIMEOUT = 120  # seconds from container start to "Kafka Server started"
_TESTCONTAINERS_MODULES = (
    "testcontainers.core.docker_client",
    "testcontainers.community.kafka",  # this layout is new in testcontainers 4.15
    "testcontainers.community.redis",
)


@dataclass(frozen=True)
class KafkaService:
    """A running broker: where clients connect and what runs it."""

    bootstrap_servers: str
    kind: Kind


@dataclass(frozen=True)
class RedisService:
    """A running Redis: its address and what runs it."""

    host: str
    port: int
    kind: Kind

    @property
    def url(self) -> str:
        """``redis://<host>:<port>/0``."""
        return f"redis://{self.host}:{self.port}/0"


def docker_available(timeout: float = PING_TIMEOUT) -> bool:
    """Whether testcontainers is installed and a Docker engine answers a ping within ``timeout``.

    Never raises: a missing (or too old) testcontainers, an unreachable engine or any error
    from the Docker client means False.
    """
    try:
        for name in _TESTCONTAINERS_MODULES:
            importlib.import_module(name)
        from testcontainers.core.docker_client import DockerClient

        client = DockerClient(timeout=timeout)  # same host resolution as the containers
    except Exception:
        return False
    try:
        return bool(client.client.ping())
    except Exception:
        return False
    finally:
        client.client.close()


def requested_mode(environ: Mapping[str, str] | None = None) -> str:
    """``KSTORM_TEST_SERVICES`` normalised to one of :data:`MODES` (unset or empty: ``auto``)."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "")
    mode = raw.strip().lower() or "auto"
    if mode not in MODES:
        msg = f"{ENV_VAR} must be one of {', '.join(MODES)}; got {raw!r}"
        raise ConfigError(msg)
    return mode


def service_kind(environ: Mapping[str, str] | None = None) -> Kind:
    """Where the services run: the requested mode, with ``auto`` resolved by a Docker ping."""
    mode = requested_mode(environ)
    if mode == "auto":
        return "docker" if docker_available() else "local"
    return "docker" if mode == "docker" else "local"


@contextmanager
def kafka_service() -> Iterator[KafkaService]:
    """A broker for the duration of the ``with`` block (see the module docstring)."""
    if service_kind() == "local":
        with EmbeddedKafka() as broker:
            yield KafkaService(broker.bootstrap_servers, "local")
        return
    container = kafka_container()
    try:
        _start(container, KAFKA_IMAGE, timeout=KAFKA_START_TIMEOUT)
        yield KafkaService(container.get_bootstrap_server(), "docker")
    finally:
        container.stop()


@contextmanager
def redis_service(appendonly: bool = False) -> Iterator[RedisService]:
    """A Redis for the duration of the ``with`` block; ``appendonly=True`` turns on the AOF."""
    if service_kind() == "local":
        with EmbeddedRedis(appendonly=appendonly) as server:
            yield RedisService(server.host, server.port, "local")
        return
    container = redis_container(appendonly)
    try:
        _start(container, REDIS_IMAGE)
        host = container.get_container_host_ip()
        yield RedisService(host, int(container.get_exposed_port(container.port)), "docker")
    finally:
        container.stop()


def kafka_container() -> Any:
    """A not yet started single-broker KRaft ``KafkaContainer`` on which transactions work."""
    module = _testcontainers("testcontainers.community.kafka")
    container = module.KafkaContainer(KAFKA_IMAGE).with_kraft()
    for key, value in KAFKA_BROKER_ENV.items():
        container.with_env(key, value)
    return container


def redis_container(appendonly: bool) -> Any:
    """A not yet started ``RedisContainer`` run with the same flags as ``EmbeddedRedis``."""
    module = _testcontainers("testcontainers.community.redis")
    return module.RedisContainer(REDIS_IMAGE).with_command(redis_command(appendonly))


def redis_command(appendonly: bool) -> list[str]:
    """``redis-server`` arguments: no RDB snapshots; AOF fsynced on every write if enabled."""
    return [
        "redis-server", "--save", "",
        "--appendonly", "yes" if appendonly else "no", "--appendfsync", "always",
    ]  # fmt: skip


def _start(container: Any, image: str, **options: Any) -> None:
    try:
        container.start(**options)
    except Exception as exc:
        msg = (
            f"the {image} container did not start ({type(exc).__name__}: {exc}); "
            f"set {ENV_VAR}=local to use the embedded processes instead"
        )
        raise EmbeddedServiceError(msg) from exc


def _testcontainers(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        msg = (
            f"Docker test services need testcontainers>=4.15 (`pip install 'kstorm[docker]'`), "
            f"or set {ENV_VAR}=local; could not import {name}: {exc}"
        )
        raise MissingDependencyError(msg) from exc
