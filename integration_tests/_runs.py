"""Start, SIGKILL and restart a killable topology runner (``python -m <module>``).

The runner writes through a RedisSink with id ``store``; :meth:`Runs.txid` reads its record.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import redis
from eo_topology import TopologyProcess

from kstorm.failpoints import PAUSE_AFTER_ENV, PAUSE_ENV

START_TIMEOUT = 180.0
RUN_TIMEOUT = 240.0


class Runs:
    """Starts, kills and restarts ``python -m tx_topology``; reads the sink's record."""

    def __init__(self, argv: list[str], name: str, redis_url: str, directory: Path, *,
                 module: str, env: dict[str, str] | None = None) -> None:
        """``env``: set in every run's environment (on top of this process's)."""
        self.argv, self.name, self.dir, self.module = argv, name, directory, module
        self.env = dict(env or {})
        self.client = redis.Redis.from_url(redis_url, socket_timeout=2)
        self.rng = random.Random(20_261_124)
        self.timeline: list[str] = []
        self.count = 0
        self.logs: list[Path] = []
        self.cwd: Path | None = None  # the runs' working directory (default: this process's)

    def txid(self) -> int:
        raw = self.client.hget(f"kstorm:{self.name}:store:offsets", "txid")
        return -1 if raw is None else int(raw)

    def start(self, env: dict[str, str] | None = None) -> TopologyProcess:
        self.count += 1
        run = TopologyProcess.start(self.argv + ["--timeout", str(RUN_TIMEOUT)], self.dir,
                                    f"run{self.count}", {**self.env, **(env or {})},
                                    module=self.module, cwd=self.cwd)
        self.logs.append(run.log)
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

    def kill_in_commit(self, after: bool = False) -> None:
        """SIGKILL inside a sink's commit (just before its atomic step), or right after it."""
        marker = self.dir / "in-commit.marker"
        run = self.start({PAUSE_AFTER_ENV if after else PAUSE_ENV: str(marker)})
        deadline = time.monotonic() + START_TIMEOUT
        while not marker.exists() and run.exited() is None:
            assert time.monotonic() < deadline, self.report(run)
            time.sleep(0.02)
        what = marker.read_text().strip() if marker.exists() else "(exited first)"
        run.kill()
        marker.unlink(missing_ok=True)
        where = "right after" if after else "inside"
        self.timeline.append(f"run{self.count} killed {where} the sink's commit: {what}")

    def finish(self) -> int:
        run = self.start()
        code = run.wait(RUN_TIMEOUT + 60)
        self.timeline.append(f"run{self.count} exited {code} at txid {self.txid()}")
        return code

    def report(self, run: TopologyProcess) -> str:
        return "\n".join(self.timeline) + "\n--- last run ---\n" + run.tail()
