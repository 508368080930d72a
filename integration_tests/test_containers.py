"""The container set's own checks: the services really run in containers.

Run with ``KSTORM_TEST_SERVICES=docker`` (``.ci/run`` does, after
``scripts/container-engine.sh``); with the local services these tests are skipped, so a
container run can never pass on embedded processes by mistake.
"""

from __future__ import annotations

from typing import Any

import pytest
from _services import KAFKA_IMAGE, REDIS_IMAGE, KafkaService, RedisService


def _running_images() -> set[str]:
    import docker

    client = docker.from_env()
    try:
        return {tag for c in client.containers.list() for tag in c.image.tags}
    finally:
        client.close()


def test_the_broker_and_redis_are_the_local_images_in_containers(
        kafka: KafkaService, redis_server: RedisService, produce: Any, topic_name: str) -> None:
    if kafka.kind != "docker" or redis_server.kind != "docker":
        pytest.skip(f"services are {kafka.kind}/{redis_server.kind}, not containers")
    import redis

    assert {KAFKA_IMAGE, REDIS_IMAGE} <= _running_images()
    assert produce(kafka.bootstrap_servers, topic_name, ["a", "b"], partition=0) == [(0, 0), (0, 1)]
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        assert client.info("server")["redis_version"].startswith("7.")  # Debian's 7.0
    finally:
        client.close()


@pytest.mark.skip(reason="docker/Dockerfile.app from localhost/debian:bookworm installs offline but "
                  "fails at `RUN kstorm warm-up` (JAVA_GATEWAY_EXITED) under podman build; "
                  "not yet diagnosed (issue 44, item 4)")
def test_the_app_image_built_without_a_registry_runs_kstorm(kafka: KafkaService) -> None:
    # docker/Dockerfile.app FROM localhost/debian:bookworm, pip offline from docker/wheelhouse;
    # the first build takes minutes, later runs find the image. (Killing a topology running in
    # this image and checking its windows exactly is issue 44's item 4, not done yet.)
    if kafka.kind != "docker":
        pytest.skip(f"services are {kafka.kind}, not containers")
    import docker

    from _services import APP_IMAGE, ensure_image

    ensure_image(APP_IMAGE)
    client = docker.from_env()
    try:
        out = client.containers.run(APP_IMAGE, ["--help"], remove=True, network_mode="host")
    finally:
        client.close()
    assert b"run" in out and b"demo" in out
