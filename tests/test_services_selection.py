"""Which services the integration tests get: Docker containers or the embedded processes.

No Docker and no network: testcontainers is replaced by fakes in ``sys.modules`` and the
embedded services by fakes in the module under test.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest

from kstorm.errors import ConfigError, EmbeddedServiceError, MissingDependencyError

PATH = Path(__file__).resolve().parent.parent / "integration_tests" / "_services.py"


@pytest.fixture
def services(monkeypatch):
    spec = importlib.util.spec_from_file_location("kstorm_test_services", PATH)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.delenv(module.ENV_VAR, raising=False)
    return module


# -- fakes -------------------------------------------------------------------------------------


class FakeContainer:
    started: list[FakeContainer] = []

    def __init__(self, image, fail=None):
        self.image, self.fail = image, fail
        self.env, self.command, self.ports, self.exposed = {}, None, {}, []
        self.start_options, self.stopped = None, False

    def with_env(self, key, value):
        self.env[key] = value
        return self

    def with_command(self, command):
        self.command = command
        return self

    def with_bind_ports(self, container, host):
        self.ports[container] = host
        return self

    def with_exposed_ports(self, *ports):
        self.exposed.extend(ports)
        return self

    def start(self, **options):
        if self.fail:
            raise self.fail
        self.start_options = options
        FakeContainer.started.append(self)
        return self

    def get_container_host_ip(self):
        return "docker-host"

    def get_exposed_port(self, port):
        return 32772 if port in self.exposed else None

    def get_logs(self):
        return (b"", b"")

    def stop(self):
        self.stopped = True


class FakeDockerClient:
    def __init__(self, answer=True, error=None):
        self.answer, self.error, self.closed, self.options = answer, error, False, None

    def __call__(self, **options):  # the class: DockerClient(timeout=...)
        self.options = options
        return self

    @property
    def client(self):  # testcontainers' wrapper exposes the docker SDK client as .client
        return self

    def ping(self):
        if self.error:
            raise self.error
        return self.answer

    def close(self):
        self.closed = True


def install_fake_testcontainers(monkeypatch, docker_client=None, fail=None):
    FakeContainer.started = []
    modules = {
        name: ModuleType(name)
        for name in (
            "testcontainers", "testcontainers.core", "testcontainers.core.docker_client",
            "testcontainers.core.container",
        )
    }  # fmt: skip
    modules["testcontainers.core.docker_client"].DockerClient = docker_client or FakeDockerClient()
    modules["testcontainers.core.container"].DockerContainer = partial(FakeContainer, fail=fail)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def hide_testcontainers(monkeypatch):
    monkeypatch.setitem(sys.modules, "testcontainers", None)  # import raises ImportError


class FakeEmbeddedKafka:
    bootstrap_servers = "127.0.0.1:40311"
    entered = exited = 0

    def __enter__(self):
        FakeEmbeddedKafka.entered += 1
        return self

    def __exit__(self, *exc):
        FakeEmbeddedKafka.exited += 1


class FakeEmbeddedRedis:
    host, port = "127.0.0.1", 38021

    def __init__(self, appendonly=False):
        FakeEmbeddedRedis.appendonly = appendonly

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.fixture(autouse=True)
def no_engine_io(services, monkeypatch):
    """No image builds and no network: the containers' readiness checks answer at once."""
    monkeypatch.setattr(services, "ensure_image", lambda tag: tag)
    monkeypatch.setattr(services, "_kafka_answers", lambda bootstrap: True)
    monkeypatch.setattr(services, "_redis_answers", lambda host, port: True)
    monkeypatch.delenv(services.ENGINE_ERROR_VAR, raising=False)


@pytest.fixture
def embedded(services, monkeypatch):
    FakeEmbeddedKafka.entered = FakeEmbeddedKafka.exited = 0
    monkeypatch.setattr(services, "EmbeddedKafka", FakeEmbeddedKafka)
    monkeypatch.setattr(services, "EmbeddedRedis", FakeEmbeddedRedis)


def docker_probe(monkeypatch, services, answer):
    calls = []

    def probe():
        calls.append(1)
        return answer

    monkeypatch.setattr(services, "docker_available", probe)
    return calls


# -- choosing ----------------------------------------------------------------------------------


def test_auto_is_the_default_and_uses_docker_when_the_engine_answers(
    services, embedded, monkeypatch
):
    install_fake_testcontainers(monkeypatch)
    docker_probe(monkeypatch, services, True)
    with services.kafka_service() as kafka, services.redis_service() as redis:
        port = FakeContainer.started[0].kafka_port
        assert (kafka.kind, kafka.bootstrap_servers) == ("docker", f"docker-host:{port}")
        assert (redis.kind, redis.url) == ("docker", "redis://docker-host:32772/0")
    assert FakeEmbeddedKafka.entered == 0


def test_auto_falls_back_to_the_embedded_processes_without_docker(services, embedded, monkeypatch):
    hide_testcontainers(monkeypatch)
    calls = docker_probe(monkeypatch, services, False)
    with services.kafka_service() as kafka, services.redis_service() as redis:
        assert (kafka.kind, kafka.bootstrap_servers) == ("local", "127.0.0.1:40311")
        assert (redis.kind, redis.host, redis.port) == ("local", "127.0.0.1", 38021)
        assert redis.url == "redis://127.0.0.1:38021/0"
    assert len(calls) == 2  # one probe per service
    assert FakeEmbeddedKafka.exited == 1  # the broker is stopped after the block


def test_local_never_probes_docker(services, embedded, monkeypatch):
    monkeypatch.setenv(services.ENV_VAR, "local")
    calls = docker_probe(monkeypatch, services, True)
    with services.kafka_service() as kafka:
        assert kafka.kind == "local"
    assert calls == []


def test_docker_is_used_when_forced_and_the_engine_answers(services, embedded, monkeypatch):
    monkeypatch.setenv(services.ENV_VAR, " Docker ")  # case and spaces do not matter
    install_fake_testcontainers(monkeypatch)
    docker_probe(monkeypatch, services, True)
    with services.kafka_service() as kafka:
        assert kafka.kind == "docker"
    assert FakeEmbeddedKafka.entered == 0


def test_forced_docker_without_an_engine_fails_saying_so(services, embedded, monkeypatch):
    monkeypatch.setenv(services.ENV_VAR, "docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere/podman.sock")
    install_fake_testcontainers(monkeypatch)
    docker_probe(monkeypatch, services, False)
    with pytest.raises(EmbeddedServiceError, match=r"^no container engine: .*/nowhere/podman.sock.*"
                       r"scripts/container-engine.sh"):
        with services.kafka_service():
            pass
    assert FakeEmbeddedKafka.entered == 0  # never quietly the local broker


def test_forced_docker_reports_the_engine_scripts_reason(services, embedded, monkeypatch):
    monkeypatch.setenv(services.ENV_VAR, "docker")
    monkeypatch.setenv(services.ENGINE_ERROR_VAR, "no Docker engine answers and no apt-get")
    install_fake_testcontainers(monkeypatch)
    docker_probe(monkeypatch, services, False)
    with pytest.raises(EmbeddedServiceError, match="^no container engine: no Docker engine"):
        services.service_kind()


def test_forced_docker_without_testcontainers_says_what_to_install(services, embedded, monkeypatch):
    monkeypatch.setenv(services.ENV_VAR, "docker")
    hide_testcontainers(monkeypatch)
    docker_probe(monkeypatch, services, False)
    with pytest.raises(MissingDependencyError, match=r"pip install 'kstorm\[docker\]'"):
        with services.kafka_service():
            pass


@pytest.mark.parametrize("value", ["podman", "yes", "1"])
def test_unknown_mode_is_a_config_error_naming_the_variable(services, monkeypatch, value):
    monkeypatch.setenv(services.ENV_VAR, value)
    with pytest.raises(ConfigError, match=rf"KSTORM_TEST_SERVICES .*auto, docker, local.*{value}"):
        services.service_kind()


def test_empty_mode_means_auto(services):
    assert services.requested_mode({services.ENV_VAR: ""}) == "auto"
    assert services.requested_mode({}) == "auto"


# -- the containers ----------------------------------------------------------------------------


def test_kafka_container_advertises_the_port_it_is_published_on(services, monkeypatch):
    install_fake_testcontainers(monkeypatch)
    monkeypatch.setenv(services.ENV_VAR, "docker")
    docker_probe(monkeypatch, services, True)
    with services.kafka_service() as kafka:
        (container,) = FakeContainer.started
    port = container.kafka_port
    assert container.image == services.KAFKA_IMAGE == "localhost/kstorm-broker:tansu"
    assert container.ports == {port: port}
    assert container.env["LISTENER_URL"] == f"tcp://0.0.0.0:{port}"
    assert container.env["ADVERTISED_LISTENER_URL"] == f"tcp://127.0.0.1:{port}"
    assert kafka.bootstrap_servers.endswith(f":{port}")
    assert container.stopped


@pytest.mark.parametrize("appendonly, aof", [(True, "yes"), (False, "no")])
def test_redis_container_runs_with_the_requested_durability(services, monkeypatch, appendonly, aof):
    install_fake_testcontainers(monkeypatch)
    monkeypatch.setenv(services.ENV_VAR, "docker")
    docker_probe(monkeypatch, services, True)
    with services.redis_service(appendonly=appendonly):
        (container,) = FakeContainer.started
    assert container.image == services.REDIS_IMAGE == "localhost/kstorm-redis:bookworm"
    assert container.command[container.command.index("--appendonly") + 1] == aof
    assert container.stopped


def test_local_redis_gets_the_requested_durability(services, embedded, monkeypatch):
    monkeypatch.setenv(services.ENV_VAR, "local")
    with services.redis_service(appendonly=True):
        assert FakeEmbeddedRedis.appendonly is True


def test_container_is_stopped_when_the_test_body_fails(services, monkeypatch):
    install_fake_testcontainers(monkeypatch)
    monkeypatch.setenv(services.ENV_VAR, "docker")
    docker_probe(monkeypatch, services, True)
    with pytest.raises(RuntimeError, match="boom"):
        with services.kafka_service():
            raise RuntimeError("boom")
    assert FakeContainer.started[0].stopped


def test_a_container_that_does_not_start_names_the_image_and_the_way_out(services, monkeypatch):
    install_fake_testcontainers(monkeypatch, fail=ConnectionError("engine went away"))
    monkeypatch.setenv(services.ENV_VAR, "docker")
    docker_probe(monkeypatch, services, True)
    with pytest.raises(EmbeddedServiceError) as caught:
        with services.redis_service():
            pass
    message = str(caught.value)
    assert services.REDIS_IMAGE in message and "engine went away" in message
    assert "KSTORM_TEST_SERVICES=local" in message
    assert isinstance(caught.value.__cause__, ConnectionError)


# -- docker_available --------------------------------------------------------------------------


def test_docker_available_pings_with_a_short_timeout_and_closes_the_client(services, monkeypatch):
    client = FakeDockerClient(answer=True)
    install_fake_testcontainers(monkeypatch, docker_client=client)
    assert services.docker_available() is True
    assert client.options == {"timeout": services.PING_TIMEOUT}
    assert client.closed


def test_docker_available_is_false_when_the_ping_fails(services, monkeypatch):
    client = FakeDockerClient(error=ConnectionRefusedError("no engine"))
    install_fake_testcontainers(monkeypatch, docker_client=client)
    assert services.docker_available() is False
    assert client.closed


def test_docker_available_is_false_when_the_client_cannot_be_made(services, monkeypatch):
    def no_socket(**options):
        raise FileNotFoundError("/var/run/docker.sock")

    install_fake_testcontainers(monkeypatch, docker_client=no_socket)
    assert services.docker_available() is False


def test_docker_available_is_false_without_testcontainers(services, monkeypatch):
    hide_testcontainers(monkeypatch)
    assert services.docker_available() is False


def test_docker_available_is_false_with_a_testcontainers_too_old_for_kstorm(services, monkeypatch):
    install_fake_testcontainers(monkeypatch)
    monkeypatch.setitem(sys.modules, "testcontainers.core.container", None)
    assert services.docker_available() is False


def test_local_redis_is_a_real_server_at_the_given_url(services, monkeypatch):
    import redis

    monkeypatch.setenv(services.ENV_VAR, "local")
    with services.redis_service() as server:
        client = redis.Redis.from_url(server.url)
        try:
            assert client.ping() is True
        finally:
            client.close()
    assert server.kind == "local"
