"""A fresh kstorm process for test_startup_planners.py: which of Spark's planners ran.

Runs a small ListSpout topology with ``run_to_completion`` (planners kept), counting the
read-planner workers kstorm started ahead, and prints one JSON line: the rows the sink got,
the planner modules Spark has, the workers of the read planner, kstorm's starts, the
name of each Python process a bolt ran in (``ks:worker`` when forked from kstorm's zygote),
whether MLlib's vector functions worked before the topology ran (its session extension
is applied after the first batch: ``session.DEFERRED_EXTENSIONS``) and after, and the JVM's
temporary directory (``jvm_tmp.py``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import kstorm._spark.session as session
import kstorm._spark.speedups.planners as planners
from kstorm import BaseBasicBolt, Fields, TopologyBuilder
from kstorm.testing import CaptureSink, ListSpout, run_to_completion

started: list[str] = []
_worker_calls = planners._worker_calls


def counting_worker_calls(spark: Any) -> tuple[Any, Any]:
    """kstorm's create/release calls, recording each worker it starts."""
    create, release = _worker_calls(spark)

    def counted(*args: Any) -> Any:
        started.append(args[1])
        return create(*args)
    return counted, release


class Where(BaseBasicBolt):
    """Emits each number with the name of the process that ran it."""

    def execute(self, tuple_: Any, collector: Any) -> None:
        with open("/proc/self/comm") as comm:
            collector.emit([tuple_.get_value(0), comm.read().strip()])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n", "process"))


def ml_functions_work(spark: Any) -> bool:
    """Whether MLlib's vector_to_array / array_to_vector (its session extension) work."""
    from pyspark.ml.functions import array_to_vector, vector_to_array

    df = spark.createDataFrame([([1.0, 2.0],)], ["a"])
    try:
        return df.select(vector_to_array(array_to_vector("a"))).first()[0] == [1.0, 2.0]
    except Exception:  # noqa: BLE001 - UNRESOLVED_ROUTINE: not registered
        return False


def main() -> None:
    planners._worker_calls = counting_worker_calls
    conf = {"kstorm.spark.master": "local[2]"}
    spark = session.get_session(session.TopologyConfig.from_conf(conf))
    ml_before = ml_functions_work(spark)
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout([[[i] for i in range(5)], [[5]]], Fields("n")))
    builder.set_bolt("where", Where(), 2).shuffle_grouping("numbers")
    builder.set_bolt("out", CaptureSink(), 1).shuffle_grouping("where")
    result = run_to_completion(builder.create_topology(), conf)
    deadline = time.monotonic() + 60
    while not (ml_after := ml_functions_work(spark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    _, found = planners._planner_factories(spark, (planners.LOOKUP_PLANNER,
                                                   *planners.QUERY_PLANNERS))
    workers = planners._daemon_workers(spark)
    read = [workers.get(f).size() for key, f in found if key.workerModule() == planners.PLAN_READ]
    print(json.dumps({"rows": sorted(v[0] for v in result.sinks["out"].values),
                      "planners": sorted(key.workerModule() for key, _ in found),
                      "read_workers": read, "started": started,
                      "processes": sorted({v[1] for v in result.sinks["out"].values}),
                      "ml_before": ml_before, "ml_after": ml_after,
                      "jvm_tmpdir": spark.sparkContext._jvm.java.lang.System.getProperty(
                          "java.io.tmpdir"),
                      "driver_tmpdir": str(session.jvm_tmp.driver_tmpdir())}))


if __name__ == "__main__":
    main()
