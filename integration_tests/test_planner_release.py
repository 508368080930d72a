"""``kstorm.spark.release.planners``: Spark's idle Python planner processes are stopped.

Spark plans a query's Python data sources (the spouts) in helper processes (a daemon and a
worker per planner) and keeps them for the life of the JVM, ~200-350 MiB (docs/speedups.md,
"Memory"). Once a topology's first batch ran, kstorm stops them: the lookup planner always
(Spark runs it once per JVM), the query's own planners with the key (default on; off in
``run_to_completion``). A topology started later in the same session plans and runs as
before (Spark starts new planners).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from kstorm import Fields, TopologyBuilder, submit_topology
from kstorm._spark.speedups.planners import LOOKUP_PLANNER, QUERY_PLANNERS
from kstorm.testing import CaptureSink, ListSpout, run_to_completion

pytestmark = pytest.mark.integration


def planners(spark: Any) -> dict[str, list[int]]:
    """Spark's Python worker factories by module, with the pids of their daemon processes."""
    jvm = spark.sparkContext._jvm
    field = jvm.java.lang.Class.forName("org.apache.spark.SparkEnv").getDeclaredField(
        "pythonWorkers")
    field.setAccessible(True)
    daemon = jvm.java.lang.Class.forName(
        "org.apache.spark.api.python.PythonWorkerFactory").getDeclaredField("daemon")
    daemon.setAccessible(True)
    out: dict[str, list[int]] = {}
    entries = field.get(spark.sparkContext._jsc.sc().env()).iterator()
    while entries.hasNext():
        entry = entries.next()
        process = daemon.get(entry._2())
        out.setdefault(entry._1().workerModule(), []).append(
            process.pid() if process is not None else -1)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def topology(rows: int = 6) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout([[[i]] for i in range(rows)], Fields("n")))
    builder.set_bolt("out", CaptureSink(), 1).shuffle_grouping("numbers")
    return builder.create_topology()


def run_once(conf: dict[str, Any], name: str, tmp_path: Any) -> list[int]:
    """Submit, wait for every row in the sink, stop; the values the sink got."""
    handle = submit_topology(name, {"kstorm.spark.master": "local[2]",
                                    "kstorm.trigger": "available-now",
                                    "kstorm.checkpoint.dir": str(tmp_path / name), **conf},
                             topology())
    assert handle.await_termination(120)
    return sorted(v[0] for v in handle.sinks["out"].values)


def wait_for(check: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def planner_workers(spark: Any) -> dict[str, tuple[int, int]]:
    """(idle, all) workers of each planner: what decides whether kstorm may stop it."""
    from kstorm._spark.speedups.planners import _daemon_workers, _planner_factories

    _, found = _planner_factories(spark, (LOOKUP_PLANNER, *QUERY_PLANNERS))
    workers = _daemon_workers(spark)
    return {key.workerModule(): (factory.idleWorkers().size(), workers.get(factory).size())
            for key, factory in found}


def fresh_planners(spark: Any) -> None:
    """Stop every planner earlier tests of the session left, busy or not (a clean slate)."""
    from kstorm._spark.speedups.planners import _planner_factories

    factories, found = _planner_factories(spark, (LOOKUP_PLANNER, *QUERY_PLANNERS))
    for key, factory in found:
        factories.remove(key)
        factory.stop()


def test_planners_stop_after_the_first_batch_and_start_again_for_the_next(spark, tmp_path):
    for query in spark.streams.active:  # left running by earlier tests of the session: a
        query.stop()                    # query still planning holds every planner back
    # Earlier topologies' release threads end within seconds of their query (settle_s);
    # until then they may stop planners that this test's first topology keeps.
    assert wait_for(lambda: not any(t.name.startswith("kstorm-planners-")
                                    for t in threading.enumerate()), timeout=60)
    fresh_planners(spark)  # (one stopped while planning may never give its worker back)
    run_to_completion(topology(), {"kstorm.spark.master": "local[2]"}, name="plan-warm")
    before = planners(spark)
    for module in QUERY_PLANNERS:  # run_to_completion keeps them for the next query
        assert module in before, before
    assert LOOKUP_PLANNER not in before  # once per JVM: always stopped
    daemons = [pid for m in QUERY_PLANNERS for pid in before[m]]

    assert run_once({}, "plan-release", tmp_path) == list(range(6))
    assert wait_for(lambda: not set(QUERY_PLANNERS) & set(planners(spark))), (
        planners(spark), planner_workers(spark))
    assert wait_for(lambda: not any(alive(pid) for pid in daemons if pid > 0))
    assert "pyspark.worker" in planners(spark)  # the workers that run bolts stay

    # The next topology plans with new planners and runs exactly as before.
    assert run_once({"kstorm.spark.release.planners": False}, "plan-again",
                    tmp_path) == list(range(6))
    assert set(QUERY_PLANNERS) <= set(planners(spark))
