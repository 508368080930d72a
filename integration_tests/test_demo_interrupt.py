"""``kstorm demo`` stopped with Ctrl-C: its topology stops, then its services, and it says so.

A terminal's Ctrl-C sends SIGINT to every process of the foreground group: the demo, its
embedded broker and Redis, the JVM and Spark's Python processes. The broker and Redis run in
sessions of their own so that they outlive it until the topology using them has stopped, and
pyspark's SIGINT handler (which raised ``KeyboardInterrupt`` inside py4j calls) does not
replace the demo's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


def test_ctrl_c_stops_the_demo_and_everything_it_started(tmp_path: Path) -> None:
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
            deadline = time.monotonic() + 240
            while "kstorm demo: broker" not in log.read_text():
                assert process.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            services = _children_in_other_sessions(process.pid)
            assert len(services) == 2, services  # the broker and redis-server
            time.sleep(8.0)  # Spark is starting, or the topology runs
            assert process.poll() is None, log.read_text()[-3000:]
            os.killpg(process.pid, signal.SIGINT)
            assert process.wait(120) == 130, log.read_text()[-3000:]
            deadline = time.monotonic() + 60  # the JVM, the zygote and the workers follow
            while _group_alive(process.pid) or any(_alive(p) for p in services):
                assert time.monotonic() < deadline, "processes of the demo are left"
                time.sleep(0.2)
        finally:
            for pid in services:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            if _group_alive(process.pid):
                os.killpg(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait(30)
    text = log.read_text()
    assert "interrupted; stopping the topology" in text
    assert "stopped (Ctrl-C); nothing is left running" in text
    assert "Traceback" not in text and "Fatal Python error" not in text, text[-3000:]
    assert not list(tmp_path.glob("kstorm-demo-*"))  # its checkpoint is removed


def _children_in_other_sessions(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and int(fields[3]) != pid:  # parent, session
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
