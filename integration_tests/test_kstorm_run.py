"""``kstorm run pkg.module:attr`` runs a user's topology from the command line.

Config from a TOML file, ``KSTORM_*`` environment variables and ``-c``; available-now returns
0 once the topic is drained; SIGTERM stops a continuous run and exits 0, and a restart from
its checkpoint finishes with every window exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from eo_topology import kill_session, wait_for_output, wait_session_gone

from kstorm._kafka.client import create_topic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
BASE = 1_700_000_000_000


def _env(kafka: Any, redis_server: Any, topic: str, checkpoint: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
            "REDIS_URL": redis_server.url, "PAGE_VIEWS_TOPIC": topic,
            "KSTORM_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "KSTORM_CHECKPOINT_DIR": str(checkpoint)}


def _produce_views(kafka: Any, topic: str, produce: Any) -> None:
    create_topic(kafka.bootstrap_servers, topic, 1)
    produce(kafka.bootstrap_servers, topic,
            [json.dumps({"user": f"u{i % 3}", "page": "/cart", "ts": BASE + i * 100})
             for i in range(300)])  # 30 s of event time: windows [0, 10) and [10, 20) close


def test_run_drains_the_topic_with_config_from_a_file_env_and_c(
        kafka: Any, redis_server: Any, topic_name: str, tmp_path: Path, produce: Any) -> None:
    _produce_views(kafka, topic_name, produce)
    conf = tmp_path / "kstorm.toml"
    conf.write_text('[kstorm]\ntrigger = "continuous"\n')
    done = subprocess.run(
        [sys.executable, "-m", "kstorm.cli", "run", "examples.page_views:topology",
         "--conf", str(conf), "-c", "kstorm.trigger=available-now", "--name", topic_name],
        env=_env(kafka, redis_server, topic_name, tmp_path / "ck"), cwd=tmp_path,
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"topology '{topic_name}' finished" in done.stderr
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    stored = {k: json.loads(client.get(k)) for k in client.keys("page-views:/cart:*")
              if int(k.rsplit(":", 1)[1]) in (BASE, BASE + 10_000)}
    assert {v["views"] for v in stored.values()} == {100} and len(stored) == 2


@contextlib.contextmanager
def _continuous_run(kafka: Any, redis_server: Any, topic: str, tmp_path: Path
                    ) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """``kstorm run`` of the page-views example, continuous, in a session of its own.

    Yields once it says it runs; whatever of its session is left at the end is killed.
    """
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kstorm.cli", "run", "examples.page_views:topology",
             "--name", topic],
            env=_env(kafka, redis_server, topic, tmp_path / "ck"), cwd=tmp_path,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        try:
            wait_for_output(log, "running", process)
            time.sleep(2.0)
            yield process, log
        finally:
            kill_session(process.pid)
            process.wait(30)


def test_sigterm_stops_a_continuous_run_and_exits_0(
        kafka: Any, redis_server: Any, topic_name: str, tmp_path: Path, produce: Any) -> None:
    _produce_views(kafka, topic_name, produce)
    with _continuous_run(kafka, redis_server, topic_name, tmp_path) as (process, log):
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()[-3000:]
    assert f"stopping topology '{topic_name}'" in log.read_text()

    # started again from its checkpoint, it finishes exactly: no window counted twice
    done = subprocess.run(
        [sys.executable, "-m", "kstorm.cli", "run", "examples.page_views:topology",
         "--name", topic_name, "-c", "kstorm.trigger=available-now"],
        env=_env(kafka, redis_server, topic_name, tmp_path / "ck"), cwd=tmp_path,
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    stored = {k: json.loads(client.get(k)) for k in client.keys("page-views:/cart:*")
              if int(k.rsplit(":", 1)[1]) in (BASE, BASE + 10_000)}
    assert {v["views"] for v in stored.values()} == {100} and len(stored) == 2


def test_ctrl_c_to_the_process_group_stops_a_continuous_run_cleanly(
        kafka: Any, redis_server: Any, topic_name: str, tmp_path: Path, produce: Any) -> None:
    # A terminal's Ctrl-C sends SIGINT to every process of the foreground group. pyspark's
    # SparkContext used to replace kstorm run's handler with its own, which raised
    # KeyboardInterrupt inside a py4j call: tracebacks, "aborted", exit 130.
    _produce_views(kafka, topic_name, produce)
    with _continuous_run(kafka, redis_server, topic_name, tmp_path) as (process, log):
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(120) == 0, log.read_text()[-3000:]
        wait_session_gone(process.pid)  # the JVM, the zygote and the workers follow
    text = log.read_text()
    assert f"stopping topology '{topic_name}'" in text
    assert "Traceback" not in text and "Fatal Python error" not in text, text[-3000:]
