"""A topology running as a container: killed or stopped mid-stream, restarted, windows exact.

``docker/examples/Dockerfile.topology`` (examples/page_views.py on the app image) runs
against the broker and Redis containers of the session (``KSTORM_TEST_SERVICES=docker``),
on the host network so that it dials the same ``127.0.0.1`` addresses as the tests. The
checkpoint is a host directory mounted into both containers, the "same volume".
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _services import TOPOLOGY_IMAGE, KafkaService, RedisService, ensure_image
from page_views_truth import page_views_truth

from kstorm._kafka.client import create_topic

pytestmark = pytest.mark.integration

BASE = 1_700_000_000_000
PAGES, USERS = ["/home", "/cart", "/help"], [f"u-{i}" for i in range(10)]
DB = 7  # a Redis database of its own: the session's Redis is shared with other tests
FIRST, MORE = 160, 200  # rows per partition before the start, and before the kill


@pytest.fixture
def engine(kafka: KafkaService, redis_server: RedisService) -> Iterator[Any]:
    if kafka.kind != "docker" or redis_server.kind != "docker":
        pytest.skip(f"services are {kafka.kind}/{redis_server.kind}, not containers")
    import docker

    ensure_image(TOPOLOGY_IMAGE)
    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


def _run(engine: Any, kafka: KafkaService, redis_url: str, topic: str, checkpoint: Path,
         trigger: str) -> Any:
    return engine.containers.run(
        TOPOLOGY_IMAGE,
        ["run", "examples.page_views:topology",
         "-c", f"kafka.bootstrap.servers={kafka.bootstrap_servers}",
         "-c", "kstorm.checkpoint.dir=/checkpoint", "-c", f"kstorm.trigger={trigger}"],
        environment={"PAGE_VIEWS_TOPIC": topic, "REDIS_URL": redis_url},
        volumes={str(checkpoint): {"bind": "/checkpoint", "mode": "rw"}},
        network_mode="host", detach=True,
    )  # fmt: skip


@pytest.mark.parametrize("how, exit_code", [("kill", 137), ("stop", 0)])
def test_a_topology_container_ended_mid_stream_resumes_exactly(
        engine: Any, kafka: KafkaService, redis_server: RedisService, topic_name: str,
        produce: Any, tmp_path: Path, how: str, exit_code: int) -> None:
    # kill: SIGKILL, nothing runs after it. stop: SIGTERM through tini, kstorm stops the
    # query (a batch it interrupts is replayed on the next start) and exits 0.
    import redis

    from sinks.redis import RedisConfig, RedisSink

    create_topic(kafka.bootstrap_servers, topic_name, partitions=2)
    rng = random.Random(44)
    views = {p: [{"user": rng.choice(USERS), "page": rng.choice(PAGES), "ts": BASE + i * 100 + 7}
                 for i in range(300)] for p in range(2)}  # 30 s of event time per partition

    def produce_rows(start: int, stop: int) -> None:
        for partition, rows in views.items():
            produce(kafka.bootstrap_servers, topic_name,
                    [json.dumps(v) for v in rows[start:stop]], partition=partition)

    # The first 16 s of event time: enough to close the first window (watermark 11 s).
    produce_rows(0, FIRST)
    url = f"redis://{redis_server.host}:{redis_server.port}/{DB}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir(mode=0o777)
    checkpoint.chmod(0o777)  # the app runs as uid 10001

    # Run 1: until the sink committed the first window; then more records arrive, and the
    # container gets SIGKILL or SIGTERM while it reads them.
    first = _run(engine, kafka, url, topic_name, checkpoint, "continuous")
    try:
        deadline = time.monotonic() + 240
        while not client.keys("page-views:*"):
            first.reload()
            assert first.status == "running", first.logs()[-3000:].decode(errors="replace")
            assert time.monotonic() < deadline, "no window reached Redis within 240 s"
            time.sleep(0.5)
        produce_rows(FIRST, MORE)
        time.sleep(1.0)  # the next micro-batch is picking them up
        if how == "kill":
            first.kill(signal="SIGKILL")
        else:
            first.stop(timeout=90)
        status = first.wait(timeout=120)["StatusCode"]
        assert status == exit_code, first.logs()[-3000:].decode(errors="replace")
        written_before_kill = len(client.keys("page-views:*"))
    finally:
        first.remove(force=True)

    # Run 2: the rest of the stream, and a new container on the same checkpoint drains it.
    produce_rows(MORE, len(views[0]))
    second = _run(engine, kafka, url, topic_name, checkpoint, "available-now")
    try:
        status = second.wait(timeout=300)["StatusCode"]
        logs = second.logs()[-3000:].decode(errors="replace")
    finally:
        second.remove(force=True)
    assert status == 0, logs

    expected = page_views_truth(views)
    sink = RedisSink(RedisConfig.from_url(url), key="page-views:{page}:{window_start}",
                     value=lambda row: row, merge="set", mode="transactional")
    assert sink.read_all("page-views:") == expected
    assert len(expected) == 6  # 3 pages x the 2 windows the final watermark closed
    assert written_before_kill == 3  # the first window's pages: the second came after
    client.flushdb()
    client.close()
