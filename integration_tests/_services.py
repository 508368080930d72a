"""Kafka and Redis for integration tests: Docker containers when possible, else local processes.

``KSTORM_TEST_SERVICES`` chooses where the services run:

- ``docker``: testcontainers ``DockerContainer`` s of two images built here, without a
  registry, from ``docker/Dockerfile.broker`` (the tansu broker kstorm embeds) and
  ``docker/Dockerfile.redis`` (Debian's ``redis-server``), on the base image
  ``$KSTORM_BASE_IMAGE`` (``localhost/debian:bookworm``, made by
  ``scripts/container-engine.sh``). Fails with "no container engine: ..." if no engine
  answers, and asks for ``pip install 'kstorm[docker]'`` if testcontainers is missing.
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
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from kstorm.embedded import EmbeddedKafka, EmbeddedRedis, free_port, tansu_binary
from kstorm.errors import ConfigError, EmbeddedServiceError, MissingDependencyError

ENV_VAR = "KSTORM_TEST_SERVICES"
MODES = ("auto", "docker", "local")
Kind = Literal["docker", "local"]

DOCKER_DIR = Path(__file__).resolve().parent.parent / "docker"
# The base every image here is built from; scripts/container-engine.sh makes it by debootstrap.
BASE_IMAGE = os.environ.get("KSTORM_BASE_IMAGE") or "localhost/debian:bookworm"
KAFKA_IMAGE = "localhost/kstorm-broker:tansu"  # docker/Dockerfile.broker
REDIS_IMAGE = "localhost/kstorm-redis:bookworm"  # docker/Dockerfile.redis
APP_IMAGE = "localhost/kstorm-app:0.1.0"  # docker/Dockerfile.app
TOPOLOGY_IMAGE = "localhost/kstorm-page-views:0.1.0"  # docker/examples/Dockerfile.topology
# Downloaded besides kstorm's own requirements for an offline build: pyproject.toml's
# [build-system], and what Debian's Python 3.11.2 needs that the host's newer 3.11 does not
# (redis requires async-timeout below 3.11.3).
BUILD_REQUIRES = ("setuptools>=68", "wheel", "async-timeout>=4.0.3")
# What scripts/container-engine.sh exports when it found no engine: the one-line reason.
ENGINE_ERROR_VAR = "KSTORM_CONTAINER_ENGINE_ERROR"
PING_TIMEOUT = 2.0  # seconds for the Docker engine to answer a ping
START_TIMEOUT = 60.0  # seconds from container start to a service that answers
BUILD_TIMEOUT = 1800  # seconds the engine may stay silent during an image build
_TESTCONTAINERS_MODULES = ("testcontainers.core.docker_client", "testcontainers.core.container")


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


def no_engine_reason(environ: Mapping[str, str] | None = None) -> str:
    """Why no engine answers, for "no container engine: <reason>"."""
    env = os.environ if environ is None else environ
    if env.get(ENGINE_ERROR_VAR):
        return env[ENGINE_ERROR_VAR]
    where = env.get("DOCKER_HOST") or "the default Docker socket"
    return (
        f"nothing answers at {where}; run `eval \"$(bash scripts/container-engine.sh)\"` "
        f"first, or set {ENV_VAR}=local"
    )


def requested_mode(environ: Mapping[str, str] | None = None) -> str:
    """``KSTORM_TEST_SERVICES`` normalised to one of :data:`MODES` (unset or empty: ``auto``)."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "")
    mode = raw.strip().lower() or "auto"
    if mode not in MODES:
        msg = f"{ENV_VAR} must be one of {', '.join(MODES)}; got {raw!r}"
        raise ConfigError(msg)
    return mode


def service_kind(environ: Mapping[str, str] | None = None) -> Kind:
    """Where the services run: the requested mode, with ``auto`` resolved by a Docker ping.

    ``docker`` asked for explicitly with no engine answering raises EmbeddedServiceError
    "no container engine: ...": the tests error, they are never reported as passed.
    """
    mode = requested_mode(environ)
    if mode == "local":
        return "local"
    if docker_available():
        return "docker"
    if mode == "auto":
        return "local"
    _testcontainers("testcontainers.core.container")  # missing: say what to install
    raise EmbeddedServiceError(f"no container engine: {no_engine_reason(environ)}")


@contextmanager
def kafka_service() -> Iterator[KafkaService]:
    """A broker for the duration of the ``with`` block (see the module docstring)."""
    if service_kind() == "local":
        with EmbeddedKafka() as broker:
            yield KafkaService(broker.bootstrap_servers, "local")
        return
    ensure_image(KAFKA_IMAGE)
    container = kafka_container()
    try:
        _start(container, KAFKA_IMAGE)
        bootstrap = f"{_host(container)}:{container.kafka_port}"
        _wait(KAFKA_IMAGE, container, lambda: _kafka_answers(bootstrap))
        yield KafkaService(bootstrap, "docker")
    finally:
        container.stop()


@contextmanager
def redis_service(appendonly: bool = False) -> Iterator[RedisService]:
    """A Redis for the duration of the ``with`` block; ``appendonly=True`` turns on the AOF."""
    if service_kind() == "local":
        with EmbeddedRedis(appendonly=appendonly) as server:
            yield RedisService(server.host, server.port, "local")
        return
    ensure_image(REDIS_IMAGE)
    container = redis_container(appendonly)
    try:
        _start(container, REDIS_IMAGE)
        host, port = _host(container), int(container.get_exposed_port(6379))
        _wait(REDIS_IMAGE, container, lambda: _redis_answers(host, port))
        yield RedisService(host, port, "docker")
    finally:
        container.stop()


def kafka_container(port: int | None = None) -> Any:
    """A not yet started tansu broker container whose advertised port is its published port.

    Kafka clients dial the address the broker advertises, so the container listens on the
    same port number it is published on (``port``, a free one by default): ``P:P``, with
    ``ADVERTISED_LISTENER_URL=tcp://127.0.0.1:P`` (``EmbeddedKafka._command``'s arguments,
    as tansu's environment variables).
    """
    module = _testcontainers("testcontainers.core.container")
    port = port or free_port()
    container = (
        module.DockerContainer(KAFKA_IMAGE)
        .with_bind_ports(port, port)
        .with_env("LISTENER_URL", f"tcp://0.0.0.0:{port}")
        .with_env("ADVERTISED_LISTENER_URL", f"tcp://127.0.0.1:{port}")
        .with_env("STORAGE_ENGINE", "memory://tansu/")
    )
    container.kafka_port = port
    return container


def redis_container(appendonly: bool) -> Any:
    """A not yet started Redis container run with the same flags as ``EmbeddedRedis``."""
    module = _testcontainers("testcontainers.core.container")
    return (
        module.DockerContainer(REDIS_IMAGE)
        .with_exposed_ports(6379)
        .with_command(redis_command(appendonly))
    )


def redis_command(appendonly: bool) -> list[str]:
    """``redis-server`` arguments: no RDB snapshots; AOF fsynced on every write if enabled."""
    return [
        "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data", "--save", "",
        "--appendonly", "yes" if appendonly else "no", "--appendfsync", "always",
    ]  # fmt: skip


# -- images ------------------------------------------------------------------------------------


def ensure_image(tag: str) -> str:
    """Build ``tag`` from its Dockerfile here unless the engine has it already; returns ``tag``.

    No registry is needed: every Dockerfile builds ``FROM $BASE_IMAGE``. The broker's build
    context is a temporary directory holding only the tansu binary; the app's is the
    repository root after ``docker/Dockerfile.app.dockerignore``.
    """
    import docker

    client = docker.from_env(timeout=BUILD_TIMEOUT)
    try:
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        with tempfile.TemporaryDirectory(prefix="kstorm-image-") as scratch:
            _build(client, tag, Path(scratch))
        return tag
    finally:
        client.close()


def _build(client: Any, tag: str, scratch: Path) -> None:
    from docker.utils.build import tar

    args = {"BASE_IMAGE": BASE_IMAGE}
    if tag == KAFKA_IMAGE:
        shutil.copy(tansu_binary(), scratch / "tansu")
        shutil.copy(DOCKER_DIR / "Dockerfile.broker", scratch / "Dockerfile")
        context, dockerfile = scratch, "Dockerfile"
    elif tag == REDIS_IMAGE:
        shutil.copy(DOCKER_DIR / "Dockerfile.redis", scratch / "Dockerfile")
        context, dockerfile = scratch, "Dockerfile"
    elif tag == APP_IMAGE:
        context, dockerfile = DOCKER_DIR.parent, "docker/Dockerfile.app"
        # The host's pip reaches PyPI (its proxy's CA is trusted here, not in the image):
        # download on the host, install offline in the build (docker/wheelhouse/README.md).
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "-d", str(DOCKER_DIR / "wheelhouse"),
             f"{DOCKER_DIR.parent}[avro,redis]", *BUILD_REQUIRES],
            check=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        args["PIP_NO_INDEX"] = "1"
        # `RUN kstorm warm-up` dies in podman 4.3's build containers (JAVA_GATEWAY_EXITED)
        # while the same command runs in `podman run` of the image: not diagnosed yet.
        args["WARM_UP"] = "0"
    elif tag == TOPOLOGY_IMAGE:
        ensure_image(APP_IMAGE)
        context, dockerfile = DOCKER_DIR.parent, "docker/examples/Dockerfile.topology"
        args = {"KSTORM_IMAGE": APP_IMAGE}
    else:
        msg = f"no Dockerfile known for {tag}"
        raise ConfigError(msg)
    ignore = DOCKER_DIR.parent / f"{dockerfile}.dockerignore"
    patterns = [
        line.strip() for line in (ignore.read_text().splitlines() if ignore.exists() else [])
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    started = time.monotonic()
    with tar(str(context), exclude=patterns, dockerfile=(dockerfile, None)) as archive:
        output = client.api.build(
            fileobj=archive, custom_context=True, dockerfile=dockerfile, tag=tag,
            buildargs=args, rm=True, forcerm=True, decode=True,
        )  # fmt: skip
        log = []
        for chunk in output:
            log.append(chunk.get("stream", "") or chunk.get("error", ""))
            if "error" in chunk:
                tail = "".join(log)[-2000:]
                msg = f"building {tag} from {dockerfile} failed: {chunk['error']}\n{tail}"
                raise EmbeddedServiceError(msg)
    print(f"built {tag} in {time.monotonic() - started:.0f} s")  # noqa: T201 (pytest -s shows it)


# -- starting ----------------------------------------------------------------------------------


def _host(container: Any) -> str:
    host = container.get_container_host_ip()
    return "127.0.0.1" if host in ("localhost", "::1") else host


def _kafka_answers(bootstrap: str) -> bool:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from kstorm._kafka.client import client_config

    try:
        AdminClient(client_config(bootstrap)).list_topics(timeout=1.0)
    except KafkaException:
        return False
    return True


def _redis_answers(host: str, port: int) -> bool:
    import redis

    client = redis.Redis(host=host, port=port, socket_timeout=1.0)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
        return False
    finally:
        client.close()


def _wait(image: str, container: Any, ready: Any, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            logs = b"".join(container.get_logs()).decode(errors="replace")[-1500:]
            msg = f"the {image} container did not answer within {timeout:.0f} s; its log:\n{logs}"
            raise EmbeddedServiceError(msg)
        time.sleep(0.2)


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
