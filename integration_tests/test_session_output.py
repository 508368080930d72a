"""Where output goes while kstorm starts Spark: the JVM's to Spark's log, the program's stays.

The JVM and the Python processes it starts write to Spark's log (``KSTORM_SPARK_LOG``);
the driver process's own stdout and stderr stay on its console the whole time, Spark's start
included (they used to point at the log while the JVM started, so a program's messages of
those seconds, from any of its threads, went to the log).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

PROBE = """
import sys, threading, time
from kstorm._spark.session import get_session
from kstorm.config import TopologyConfig

stop = threading.Event()

def tick():
    while not stop.is_set():
        print("tick", file=sys.stderr, flush=True)
        time.sleep(0.05)

ticker = threading.Thread(target=tick)
ticker.start()
spark = get_session(TopologyConfig.from_conf({"kstorm.spark.master": "local[1]"}))
stop.set()
ticker.join()
print("program: session ready", flush=True)

def worker(batches):
    import sys
    print("from a Python worker", file=sys.stderr, flush=True)
    yield from batches

print("rows", spark.range(3).mapInArrow(worker, "id long").count(), flush=True)
"""


def test_the_jvm_writes_to_spark_s_log_the_program_to_its_console(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    log = tmp_path / "spark.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "KSTORM_SPARK_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "program: session ready" in done.stdout and "rows 3" in done.stdout
    # the program's thread went on printing to its own stderr while the JVM started
    assert done.stderr.count("tick") >= 5, done.stderr[-3000:]
    assert "log4j" not in done.stderr and "tick" not in log.read_text()
    spark_log = log.read_text()
    assert "log4j" in spark_log  # the JVM's own output
    assert "from a Python worker" in spark_log  # and its Python workers'
