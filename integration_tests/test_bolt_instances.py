"""Bolt instances live as long as their task's Python worker (issue 15, item 1).

Over a 20-batch run, each bolt instance is prepared once and reused by later batches of its
task in the same worker process: ``prepare`` runs at most once per task and worker process
(Spark may run a task in either of its workers), not once per batch. Progress counts the
preparations. ``cleanup`` is not called between batches.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from typing import Any

from kstorm import BaseBasicBolt, Fields, TopologyBuilder
from kstorm.testing import ListSpout, run_to_completion

BATCHES = 20


class PrepareCounter(BaseBasicBolt):
    """Emits ``(task, instance id, pid, prepares of this instance, batch, n)``."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.prepares = getattr(self, "prepares", 0) + 1
        self.instance = uuid.uuid4().hex
        self.context = context
        self.cleaned = False

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "instance", "pid", "prepares", "batch", "n"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        assert not self.cleaned, "cleanup ran before the instance was used again"
        collector.emit([self.context.task_index, self.instance, os.getpid(), self.prepares,
                        self.context.batch_id, tuple_.values[0]])

    def cleanup(self) -> None:
        self.cleaned = True


def test_a_bolt_is_prepared_once_per_task_and_worker_not_per_batch(spark: Any,
                                                                    tmp_path: Any) -> None:
    batches = [[(b * 10 + i,) for i in range(10)] for b in range(BATCHES)]
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout(batches, Fields("n"), partitions=2))
    builder.set_bolt("counter", PrepareCounter(), 2).shuffle_grouping("numbers")
    result = run_to_completion(builder.create_topology(),
                               {"kstorm.checkpoint.dir": str(tmp_path / "cp")})
    rows = result.emitted["counter"]["default"]
    assert sorted(r[5] for r in rows) == list(range(BATCHES * 10))
    assert {r[4] for r in rows} == set(range(BATCHES))
    instances: dict[int, set[tuple[str, int]]] = defaultdict(set)
    for task, instance, pid, prepares, _, _ in rows:
        assert prepares == 1  # an instance is prepared once
        instances[task].add((instance, pid))
    for task, seen in instances.items():
        pids = {pid for _, pid in seen}
        assert len(seen) == len(pids), (task, seen)  # one instance per task and process
    prepared = result.progress["components"]["counter"]["prepared"]
    assert prepared == sum(len(s) for s in instances.values())
    assert prepared <= 2 * 2 * 2  # tasks x partitions x worker processes, far below 2 x 20
