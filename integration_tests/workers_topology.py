"""``topology.workers`` on a standalone cluster: run in a subprocess (one SparkSession each).

Runs a ListSpout -> ``Where`` (4 tasks, shuffle) -> CaptureSink topology to completion on
``--master`` with ``topology.workers = --workers`` and prints one JSON line: the executors
the application got and the ``(task, daemon pid, n)`` every tuple ran with.

Run it (``PYTHONPATH`` must hold the repo and ``integration_tests``)::

    python -m workers_topology --master spark://127.0.0.1:7077 --workers 2 --checkpoint /tmp/c
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from kstorm import BaseRichBolt, Fields, TopologyBuilder


class Where(BaseRichBolt):
    """``(task, daemon pid, n)``: where each tuple ran (each executor JVM starts its own
    Python daemon, whose forked workers run the tasks)."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.task = collector, context.task_index

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "daemon", "n"))

    def execute(self, tuple_: Any) -> None:
        self.collector.emit([self.task, os.getppid(), tuple_.values[0]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="workers_topology")
    parser.add_argument("--master", required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from kstorm.testing import CaptureSink, ListSpout, run_to_completion

    b = TopologyBuilder()
    b.set_spout("numbers", ListSpout([[(i,) for i in range(40)]], Fields("n"), partitions=4))
    b.set_bolt("where", Where(), 4).shuffle_grouping("numbers")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("where")
    conf = {"kstorm.spark.master": args.master, "topology.workers": args.workers,
            "kstorm.checkpoint.dir": args.checkpoint, "kstorm.shuffle.partitions": 4}
    result = run_to_completion(b.create_topology(), conf, name="workers")
    sc = SparkSession.getActiveSession().sparkContext
    executors = sc._jsc.sc().getExecutorIds().size()  # noqa: SLF001 - no public count
    print(json.dumps({"executors": executors,
                      "conf": sc.getConf().get("spark.executor.instances"),
                      "tuples": [t.values for t in result.sinks["out"].tuples]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
