"""Bolt instances live as long as their task's Python worker (issue 15, item 1).

Over a 20-batch run, each bolt instance is prepared once and reused by later batches: a
stage's partition runs in the Python worker that first ran it, whichever worker Spark gives
it to (``kstorm/_spark/speedups/affinity.py``), so ``prepare`` runs once per task and upstream
partition for a shuffle grouping (its tuples are spread over the tasks within each
partition) and once per task for a fields grouping, not once per batch or per worker.
Progress counts the preparations. ``cleanup`` is not called between batches, and is called
for every instance when the topology stops.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from typing import Any

from kstorm import BaseBasicBolt, BaseRichBolt, Fields, TopologyBuilder
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
    assert prepared <= 2 * 2  # tasks x upstream partitions, whichever workers ran them


class HoldUntilNext(BaseRichBolt):
    """Holds each tuple of its task until the task's next tuple arrives (a later batch).

    A bulk-acking bolt (seed 001): it emits a held tuple's word anchored to it, then acks it,
    only when the next tuple of its task comes; a key's last tuple (``last``) is acked at
    once. ``(task, pid, instance)`` of every ack goes out with it.
    """

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.context = context
        self.instance = uuid.uuid4().hex
        self.held: list[Any] = []

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n", "task", "pid", "instance"))

    def execute(self, tuple_: Any) -> None:
        for held in [*self.held, tuple_] if tuple_.values[2] else self.held:
            self.collector.emit([held.values[0], self.context.task_index, os.getpid(),
                                 self.instance], anchors=[held])
            self.collector.ack(held)
        self.held = [] if tuple_.values[2] else [tuple_]


def test_a_bolt_holding_tuples_across_batches_acks_them_later(spark: Any,
                                                              tmp_path: Any) -> None:
    """Each tuple stays un-acked past its batch, yet none times out or is replayed."""
    keys, per_key = 4, BATCHES  # one tuple of each key per batch
    batches = [[(b * keys + k, k, b == per_key - 1) for k in range(keys)]
               for b in range(per_key)]
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout(batches, Fields("n", "key", "last"), partitions=2))
    builder.set_bolt("holder", HoldUntilNext(), 2).fields_grouping("numbers", Fields("key"))
    result = run_to_completion(builder.create_topology(), {
        "topology.guarantee": "at-least-once", "topology.message.timeout.secs": 30,
        "kstorm.checkpoint.dir": str(tmp_path / "cp")}, name="holder")
    rows = result.emitted["holder"]["default"]
    assert sorted(r[0] for r in rows) == list(range(keys * per_key))  # each exactly once
    spout = result.progress["components"]["numbers"]
    assert spout["acked"] == keys * per_key
    assert spout.get("timed_out", 0) == 0 and spout.get("replayed", 0) == 0
    assert spout.get("failed", 0) == 0
    # one instance per task did all of its task's acks, in one process
    for task in (0, 1):
        assert len({(r[2], r[3]) for r in rows if r[1] == task}) == 1
    assert result.progress["components"]["holder"]["prepared"] == 2


class CleanupMarker(BaseBasicBolt):
    """Writes ``<instance>.prepared`` on prepare and ``<instance>.cleaned`` on cleanup."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.instance = f"{context.task_index}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        with open(os.path.join(self.directory, f"{self.instance}.prepared"), "w"):
            pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.values[0]])

    def cleanup(self) -> None:
        with open(os.path.join(self.directory, f"{self.instance}.cleaned"), "w"):
            pass


def test_every_bolt_instance_is_cleaned_up_when_the_topology_stops(spark: Any,
                                                                    tmp_path: Any) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    batches = [[(b * 10 + i,) for i in range(10)] for b in range(5)]
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout(batches, Fields("n"), partitions=2))
    builder.set_bolt("marker", CleanupMarker(str(marks)), 2).fields_grouping("numbers",
                                                                             Fields("n"))
    result = run_to_completion(builder.create_topology(),
                               {"kstorm.checkpoint.dir": str(tmp_path / "cp")})
    assert sorted(r[0] for r in result.emitted["marker"]["default"]) == list(range(50))
    prepared = {p.stem for p in marks.glob("*.prepared")}
    cleaned = {p.stem for p in marks.glob("*.cleaned")}
    assert len(prepared) == 2  # once per task
    assert cleaned == prepared  # and each let go once the run ended


def test_a_killed_owner_s_partitions_are_taken_over(tmp_path: Any) -> None:
    """SIGKILL the worker that owns a partition mid-batch: Spark runs the failed tasks
    again, another worker takes the partition over (new instances), nothing is lost."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from owner_kill_topology import KILL_AT

    repo = Path(__file__).resolve().parent.parent
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": os.pathsep.join(
        [str(repo), str(repo / "integration_tests"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "owner_kill_topology", "--checkpoint", str(tmp_path / "cp"),
         "--markers", str(markers)], capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL, env=env, cwd=repo / "integration_tests", check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    rows = report["rows"]
    assert sorted(n for n, _ in rows) == list(range(100))  # each once: the batch was redone
    killed = report["killed"]
    assert killed not in {pid for n, pid in rows if n >= KILL_AT - KILL_AT % 10}
    assert report["prepared"] > 2  # the partitions' new owner prepared new instances
