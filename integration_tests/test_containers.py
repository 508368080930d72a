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

