"""``kstorm demo`` stopped with Ctrl-C: its topology stops, then its services, and it says so.

A terminal's Ctrl-C sends SIGINT to every process of the foreground group: the demo, its
embedded broker and Redis, the JVM and Spark's Python processes. The broker and Redis run in
sessions of their own so that they outlive it until the topology using them has stopped, and
pyspark's SIGINT handler (which raised ``KeyboardInterrupt`` inside py4j calls) does not
replace the demo's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from eo_topology import kill_session, session_members, wait_for_output, wait_session_gone

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory short enough for the JVM's own under it (``jvm_tmp.MAX_PATH``).

    Under pytest's long ``tmp_path`` the JVM would fall back to ``/tmp``, and an interrupted
    run's Python worker sockets would stay there.
    """
    path = Path(tempfile.mkdtemp(prefix="kdi-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_ctrl_c_stops_the_demo_and_everything_it_started(short_tmp: Path) -> None:
    tmp_path = short_tmp
    env = {k: v for k, v in os.environ.items()
           if k not in ("KSTORM_BOOTSTRAP_SERVERS", "KSTORM_REDIS_URL")}  # its own services
    env.update(PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable, TMPDIR=str(tmp_path))
    log = tmp_path / "demo.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kstorm.cli", "demo", "--events", "400000",
             "--per-batch", "20000"],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        services: list[int] = []
        try:
            wait_for_output(log, "kstorm demo: broker", process)
            services = [pid for pid in _children(process.pid) if pid not in
                        session_members(process.pid)]
            assert len(services) == 2, services  # the broker and redis-server
            time.sleep(8.0)  # Spark is starting, or the topology runs
            assert process.poll() is None, log.read_text()[-3000:]
            os.killpg(process.pid, signal.SIGINT)
            assert process.wait(120) == 130, log.read_text()[-3000:]
            wait_session_gone(process.pid)  # the JVM, the zygote and the workers follow
            for pid in services:
                wait_session_gone(pid)  # each in a session of its own
        finally:
            for pid in services:
                kill_session(pid)
            kill_session(process.pid)
            process.wait(30)
    text = log.read_text()
    assert "interrupted; stopping the topology" in text
    assert "stopped (Ctrl-C); nothing is left running" in text
    assert "Traceback" not in text and "Fatal Python error" not in text, text[-3000:]
    assert not list(tmp_path.glob("kstorm-demo-*"))  # its checkpoint is removed


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
