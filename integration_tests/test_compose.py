"""``docker/compose.local.yaml`` comes up, the demo's results reach Redis, ``down`` leaves nothing.

podman-compose (``pip install podman-compose``) drives podman itself, so this runs where
``scripts/container-engine.sh`` set podman up; ``docker compose`` would do the same where
present. The app image and the service images come from ``_services.ensure_image``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from _services import APP_IMAGE, KAFKA_IMAGE, REDIS_IMAGE, ensure_image, service_kind

pytestmark = pytest.mark.integration

COMPOSE = Path(__file__).resolve().parent.parent / "docker" / "compose.local.yaml"
PROJECT = "kstorm-local"  # compose.local.yaml's name


def _compose(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman-compose", "-f", str(COMPOSE), *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def _podman(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def _healthy(service: str, deadline: float) -> None:
    # No systemd here, so podman runs no health-check timers: run the check by hand until it
    # passes (what the timer would do), which also marks the container healthy.
    while _podman("healthcheck", "run", f"{PROJECT}_{service}_1").returncode != 0:
        assert time.monotonic() < deadline, f"{service} not healthy within the deadline"
        time.sleep(1)


def test_the_local_compose_stack_runs_the_demo_and_comes_down_clean() -> None:
    tools = all(shutil.which(tool) for tool in ("podman", "podman-compose"))
    if service_kind() != "docker" or not tools:
        pytest.skip("needs the container engine of scripts/container-engine.sh and podman-compose")
    import redis

    for image in (KAFKA_IMAGE, REDIS_IMAGE, APP_IMAGE):
        ensure_image(image)
    try:
        up = _compose("up", "-d", "kafka", "redis")
        assert up.returncode == 0, up.stderr[-2000:]
        deadline = time.monotonic() + 60
        _healthy("kafka", deadline)
        _healthy("redis", deadline)
        up = _compose("up", "-d", "app")
        assert up.returncode == 0, up.stderr[-2000:]
        waited = _podman("wait", f"{PROJECT}_app_1", timeout=300)
        printed = _podman("logs", f"{PROJECT}_app_1")
        logs = printed.stdout + printed.stderr
        assert waited.stdout.strip() == "0", logs[-3000:]
        assert "every window count equals the ground truth" in logs
        client = redis.Redis(host="127.0.0.1", port=16379)  # compose.local.yaml's host port
        try:
            assert sum(1 for _ in client.scan_iter(count=1000)) > 0
        finally:
            client.close()
    finally:
        down = _compose("down", "-v")
    assert down.returncode == 0, down.stderr[-2000:]
    label = f"label=io.podman.compose.project={PROJECT}"
    left = _podman("ps", "-a", "--filter", label, "-q")
    assert left.stdout.strip() == ""
    volumes = _podman("volume", "ls", "-q", "--filter", label)
    assert volumes.stdout.strip() == ""
