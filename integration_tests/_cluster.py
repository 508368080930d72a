"""A Spark standalone cluster on localhost: a master and workers as separate JVMs.

Started from the installed pyspark (``spark-class ...deploy.master.Master`` / ``...Worker``),
each in a process session of its own so a test can SIGKILL a worker with its executors, as a
lost machine would. Every process is stopped by pid when the cluster closes. The JVMs'
temporary files (Spark's local directories, unpacked native libraries, sockets) go to one
directory of the cluster's own (``tmp``), removed when it closes: a SIGKILLed JVM cleans up
nothing itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kstorm.embedded import free_port


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


@dataclass
class StandaloneCluster:
    """``url`` (spark://127.0.0.1:PORT) and the worker processes."""

    url: str
    master: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: Path = Path()
    tmp: Path | None = None

    @classmethod
    def start(cls, logs: Path, n_workers: int = 2, cores: int = 1,
              memory: str = "2g", timeout: float = 90.0) -> StandaloneCluster:
        import pyspark

        logs.mkdir(parents=True, exist_ok=True)
        port = free_port()
        tmp = Path(tempfile.mkdtemp(prefix="kcl-"))  # short: the JVMs' Unix sockets go here
        tool = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} -Djava.io.tmpdir={tmp}".strip()
        env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent),
               "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_LOCAL_DIRS": str(tmp), "JAVA_TOOL_OPTIONS": tool}  # executors too
        try:
            master = _launch([_spark_class(), "org.apache.spark.deploy.master.Master",
                              "--host", "127.0.0.1", "--port", str(port), "--webui-port",
                              str(free_port())], env, logs / "master.log")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        cluster = cls(f"spark://127.0.0.1:{port}", master, [], logs, tmp)
        try:
            _wait_for(logs / "master.log", "I have been elected leader", timeout, master)
            for i in range(n_workers):
                log = logs / f"worker{i}.log"
                worker = _launch([_spark_class(), "org.apache.spark.deploy.worker.Worker",
                                  cluster.url, "--cores", str(cores), "--memory", memory,
                                  "--host", "127.0.0.1", "--webui-port", str(free_port()),
                                  "--work-dir", str(logs / f"work{i}")], env, log)
                cluster.workers.append(worker)
                _wait_for(log, "Successfully registered with master", timeout, worker)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker JVM and its executors (its whole session), as a lost machine."""
        _kill(self.workers[index])

    def close(self) -> None:
        """Stop every process of the cluster, then remove its temporary directory."""
        for process in [*self.workers, self.master]:
            _kill(process)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _launch(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - the child keeps it; closed with the process
    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _wait_for(log: Path, text: str, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            msg = f"{log.name}: no {text!r} within {timeout}s:\n{log.read_text()[-3000:]}"
            raise RuntimeError(msg)
        time.sleep(0.2)


def _kill(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        pass
