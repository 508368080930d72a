"""Start-up: Spark's Python planners on the path to a topology's first result.

In a process of its own (a JVM kstorm starts): Spark's lookup of pip-installed Python data
sources is not run, and the read planner's worker, started by kstorm while the query
starts, is the one Spark plans the first batch with (no second worker); every row arrives;
the bolts run in Python workers forked from kstorm's zygote (kstorm/_spark/speedups/zygote.py);
MLlib's session extension is applied after the topology's first batch, not as the session
is built, and its functions then work (``session.DEFERRED_EXTENSIONS``); the JVM's
temporary files go to a directory of its driver's own (``jvm_tmp.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kstorm._spark.speedups.planners import CREATE_SOURCE, LOOKUP_PLANNER, PLAN_READ

pytestmark = pytest.mark.integration


def test_a_kstorm_session_skips_the_lookup_and_plans_with_the_read_planner_started_ahead(
        tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": os.pathsep.join(
        [str(repo), str(repo / "integration_tests"), os.environ.get("PYTHONPATH", "")]),
        "KSTORM_SPARK_LOG": str(tmp_path / "spark.log")}
    done = subprocess.run([sys.executable, "-m", "startup_planners_job"], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, env=env,
                          cwd=repo / "integration_tests", check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rows"] == list(range(6))
    assert LOOKUP_PLANNER not in report["planners"]
    assert CREATE_SOURCE in report["planners"]
    assert report["started"] == [PLAN_READ]  # kstorm started it, once
    assert report["read_workers"] == [1]  # and Spark planned with that worker
    assert report["processes"] == ["ks:worker"]  # Python workers forked from the zygote
    assert not report["ml_before"]  # deferred: not on the path to the first result
    assert report["ml_after"]
    tmpdir = Path(report["jvm_tmpdir"])  # the driver's own, which the next start sweeps
    assert report["jvm_tmpdir"] == report["driver_tmpdir"]
    assert tmpdir.parent.name == f"kstorm-jvm-{os.getuid()}"
