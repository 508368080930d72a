"""The standard windowed topology, exactly once to Redis, on a real Spark standalone cluster.

A master and two workers (separate JVMs, one core each) run the exactly-once kill tests'
topology (``eo_topology``: KafkaSpout -> WindowedAggregate -> RedisSink) with
``kstorm.spark.master = spark://127.0.0.1:PORT``; the checkpoint is a local path the driver
and both workers see. Once batches commit, one worker JVM is SIGKILLed with its executors:
Spark reschedules on the other, and every window in Redis must still equal the ground truth.
On a cluster master the sinks' commit overlaps the next batch (``kstorm.commit.overlap =
auto``), so that path runs on executors elsewhere too.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cluster import StandaloneCluster
from test_exactly_once_kill import Dataset, Scenario, dataset  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    started = StandaloneCluster.start(tmp_path / "cluster")
    try:
        yield started
    finally:
        started.close()


def test_a_worker_killed_mid_run_changes_no_result(kafka: Any, redis_server: Any,
                                                   dataset: Dataset,  # noqa: F811
                                                   cluster: StandaloneCluster,
                                                   tmp_path: Path) -> None:
    name = f"cluster-{uuid.uuid4().hex[:6]}"
    s = Scenario(name, kafka.bootstrap_servers, redis_server.url, dataset.topic, tmp_path,
                 random.Random(7), extra_argv=["--master", cluster.url])
    started = time.monotonic()
    run = s.start()
    try:
        assert s.await_commit(run, -1), s.report()  # a batch committed: both workers busy
        assert any((cluster.logs / "work0").rglob("stderr")), "worker 0 ran no executor"
        s.note(f"first commit after {time.monotonic() - started:.1f} s; killing worker 0")
        cluster.kill_worker(0)
        code = run.wait(600)
        s.note(f"run1 exited with {code} after {time.monotonic() - started:.1f} s")
        assert code == 0, s.report()
    finally:
        run.kill()
    s.check(dataset, kills=0)
    executors = (cluster.logs / "work1").rglob("stderr")
    assert any(executors), "the surviving worker ran no executor"
    # a cluster master leaves the driver its cores: kstorm.commit.overlap = auto overlaps
    assert "each batch's sinks commit while the next batch runs" in run.log.read_text(
        errors="replace"), s.report()


def test_topology_workers_are_the_applications_executors(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``topology.workers = 2`` on one 2-core worker: two executors, tasks on both."""
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    path = os.pathsep.join([str(repo), str(repo / "integration_tests"),
                            os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)  # the worker JVMs pass it to their executors
    cluster = StandaloneCluster.start(tmp_path / "cluster", n_workers=1, cores=2)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workers_topology", "--master", cluster.url, "--workers",
             "2", "--checkpoint", str(tmp_path / "checkpoint")],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, check=False)
    finally:
        cluster.close()
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["executors"] == 2 and report["conf"] == "2"
    assert sorted(n for _, _, n in report["tuples"]) == list(range(40))
    assert {task for task, _, _ in report["tuples"]} == {0, 1, 2, 3}
    executors = [d for d in (tmp_path / "cluster" / "work0").glob("app-*/*") if d.is_dir()]
    assert len(executors) == 2, executors
