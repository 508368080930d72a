"""Seed 002's global count stays exact through kill -9 and a deleted checkpoint.

``python -m tx_topology`` runs TransactionalGlobalCount (partial counts in batch bolts, the
sum in a committer, the total added to Redis under the txid) over a
``MemoryTransactionalSpout`` or a ``KafkaSpout``, in a subprocess with small batches. Each
test SIGKILLs the whole process session three times -- at a seeded random moment after a
commit, inside the sink's commit (``KSTORM_TEST_PAUSE_IN_COMMIT``), and at a random moment
again, after which the checkpoint is deleted -- and lets a last run finish. The stored total
must equal the number of tuples the spout holds (computed here), and the txids must have
gone on after the lost checkpoint (the sinks' records carry the txid and the spout's
transactional metadata).
"""

from __future__ import annotations

import random
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from eo_topology import TopologyProcess
from tx_topology import GLOBAL_KEY, PARTITIONS, memory_data

from kstorm._kafka.client import create_topic
from kstorm._testhooks import PAUSE_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 300          # per partition (+13 p): 1,278 tuples, 34 transactions of 10 per partition
KAFKA_RECORDS = 1_600
START_TIMEOUT = 180.0
RUN_TIMEOUT = 240.0


class Runs:
    """Starts, kills and restarts ``python -m tx_topology``; reads the sink's record."""

    def __init__(self, argv: list[str], name: str, redis_url: str, directory: Path) -> None:
        self.argv, self.name, self.dir = argv, name, directory
        self.client = redis.Redis.from_url(redis_url, socket_timeout=2)
        self.rng = random.Random(20_261_124)
        self.timeline: list[str] = []
        self.count = 0

    def txid(self) -> int:
        raw = self.client.hget(f"kstorm:{self.name}:store:offsets", "txid")
        return -1 if raw is None else int(raw)

    def start(self, env: dict[str, str] | None = None) -> TopologyProcess:
        self.count += 1
        run = TopologyProcess.start(self.argv + ["--timeout", str(RUN_TIMEOUT)], self.dir,
                                    f"run{self.count}", env, module="tx_topology")
        self.timeline.append(f"run{self.count} started at txid {self.txid()}")
        return run

    def await_commit(self, run: TopologyProcess, after: int) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while self.txid() <= after:
            if run.exited() is not None:
                return False
            assert time.monotonic() < deadline, self.report(run)
            time.sleep(0.05)
        return True

    def kill_at_random(self) -> None:
        before = self.txid()
        run = self.start()
        if self.await_commit(run, before):
            time.sleep(self.rng.uniform(0.0, 1.5))
        run.kill()
        self.timeline.append(f"run{self.count} killed at a random moment, txid {self.txid()}")

    def kill_in_commit(self) -> None:
        marker = self.dir / "in-commit.marker"
        run = self.start({PAUSE_ENV: str(marker)})
        deadline = time.monotonic() + START_TIMEOUT
        while not marker.exists() and run.exited() is None:
            assert time.monotonic() < deadline, self.report(run)
            time.sleep(0.02)
        what = marker.read_text().strip() if marker.exists() else "(exited first)"
        run.kill()
        marker.unlink(missing_ok=True)
        self.timeline.append(f"run{self.count} killed inside the commit: {what}")

    def finish(self) -> int:
        run = self.start()
        code = run.wait(RUN_TIMEOUT + 60)
        self.timeline.append(f"run{self.count} exited {code} at txid {self.txid()}")
        return code

    def report(self, run: TopologyProcess) -> str:
        return "\n".join(self.timeline) + "\n--- last run ---\n" + run.tail()


def _kill_three_times_and_lose_the_checkpoint(runs: Runs, checkpoint: Path) -> None:
    runs.kill_at_random()
    runs.kill_in_commit()
    runs.kill_at_random()
    before = runs.txid()
    shutil.rmtree(checkpoint, ignore_errors=True)
    runs.timeline.append(f"checkpoint deleted at txid {before}")
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert runs.txid() > before, "\n".join(runs.timeline)


def test_memory_spout_global_count_exact_after_kills_and_lost_checkpoint(
        spark: Any, redis_server: Any, tmp_path: Path) -> None:
    name = f"txk-{uuid.uuid4().hex[:6]}"
    checkpoint = tmp_path / "checkpoint"
    argv = ["--spout", "memory", "--rows", str(ROWS), "--redis-url", redis_server.url,
            "--checkpoint", str(checkpoint), "--name", name]
    runs = Runs(argv, name, redis_server.url, tmp_path)
    _kill_three_times_and_lose_the_checkpoint(runs, checkpoint)
    expected = sum(len(rows) for rows in memory_data(ROWS).values())
    total = int(runs.client.get(f"{name}:{GLOBAL_KEY}"))
    assert total == expected, "\n".join(runs.timeline)


def test_kafka_spout_global_count_exact_after_kills_and_lost_checkpoint(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    name = f"txkk-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-words"
    create_topic(kafka.bootstrap_servers, topic, PARTITIONS)
    for p in range(PARTITIONS):
        produce(kafka.bootstrap_servers, topic,
                [f"w{i}" for i in range(KAFKA_RECORDS // PARTITIONS)], partition=p)
    checkpoint = tmp_path / "checkpoint"
    argv = ["--spout", "kafka", "--bootstrap", kafka.bootstrap_servers, "--topic", topic,
            "--expected", str(KAFKA_RECORDS), "--redis-url", redis_server.url,
            "--checkpoint", str(checkpoint), "--name", name]
    runs = Runs(argv, name, redis_server.url, tmp_path)
    _kill_three_times_and_lose_the_checkpoint(runs, checkpoint)
    assert int(runs.client.get(f"{name}:{GLOBAL_KEY}")) == KAFKA_RECORDS
