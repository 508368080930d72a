"""Parallelism means tasks (issue 15, item 2): a bolt with parallelism N runs as N tasks.

A shuffle-like grouping spreads tuples round robin over the bolt's tasks, from each Spark
partition's own start (so a replay sends each tuple to the same task), whether the bolt
reads a spout's rows in the same stage or another bolt's output. Before, a task was the
Spark partition modulo the parallelism, so 2 partitions never reached tasks 2 and 3.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kstorm import BaseBasicBolt, BaseStatefulBolt, BaseWindowedBolt, Fields, TopologyBuilder
from kstorm.testing import ListSpout, run_to_completion
from kstorm.windowing import Count


class WhichTask(BaseBasicBolt):
    """Emits ``(task_index, n)`` for every tuple."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.task = context.task_index
        self.tasks = context.num_tasks

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "n"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        assert self.tasks == 4
        collector.emit([self.task, tuple_.values[-1]])


class Pass(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.values[0]])


def test_a_shuffle_grouped_bolt_with_parallelism_4_over_2_partitions_runs_4_tasks(
        spark: Any, tmp_path: Any) -> None:
    batches = [[(i,) for i in range(b * 40, b * 40 + 40)] for b in range(3)]
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout(batches, Fields("n"), partitions=2))
    builder.set_bolt("direct", WhichTask(), 4).shuffle_grouping("numbers")  # spout's rows
    builder.set_bolt("pass", Pass(), 1).shuffle_grouping("numbers")
    builder.set_bolt("after", WhichTask(), 4).local_or_shuffle_grouping("pass")
    result = run_to_completion(builder.create_topology(),
                               {"kstorm.checkpoint.dir": str(tmp_path / "cp")})
    for bolt in ("direct", "after"):
        rows = result.emitted[bolt]["default"]
        per_task = Counter(task for task, _ in rows)
        assert sorted(per_task) == [0, 1, 2, 3], (bolt, per_task)
        assert sorted(n for _, n in rows) == list(range(120))  # each tuple once
        assert max(per_task.values()) - min(per_task.values()) <= 6, (bolt, per_task)


class WhichPartition(BaseBasicBolt):
    """Emits ``(task_index, Spark partition, n)``: where each task ran."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.task = context.task_index

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "partition", "n"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        from kstorm._spark.stage import _partition  # the partition this tuple's task runs in

        collector.emit([self.task, _partition(), tuple_.values[0]])


def test_each_task_of_a_fields_grouped_bolt_runs_in_a_partition_of_its_own(
        spark: Any, tmp_path: Any) -> None:
    """Spark's hash of the task index sent both tasks of a 2-task bolt to one partition."""
    for parallelism in (2, 4):
        assert where_tasks_ran(WhichPartition(), parallelism, tmp_path / f"cp{parallelism}"
                               ) == {(t, t) for t in range(parallelism)}


def where_tasks_ran(bolt: Any, parallelism: int, checkpoint: Any) -> set[tuple[int, int]]:
    """``(task, Spark partition)`` pairs of ``bolt`` (fields-grouped) over 200 numbers."""
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout([[(i,) for i in range(200)]], Fields("n"),
                                           partitions=2))
    builder.set_bolt("where", bolt, parallelism).fields_grouping("numbers", Fields("n"))
    result = run_to_completion(builder.create_topology(),
                               {"kstorm.checkpoint.dir": str(checkpoint)})
    rows = result.emitted["where"]["default"]
    assert sorted(r[2] for r in rows) == list(range(200))
    return {(task, part) for task, part, _ in rows}


class StatefulWhichPartition(BaseStatefulBolt):
    """A stateful bolt emitting ``(task_index, Spark partition, n)``."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.task, self.collector = context.task_index, collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "partition", "n"))

    def execute(self, tuple_: Any) -> None:
        from kstorm._spark.stage import _partition

        n = tuple_.values[0]
        self.state.put(n, self.task)
        self.collector.emit([self.task, _partition(), n], anchors=tuple_)
        self.collector.ack(tuple_)


def test_the_tasks_of_a_stateful_bolt_spread_over_sparks_partitions(
        spark: Any, tmp_path: Any) -> None:
    """Grouped on the task index, both tasks of a 2-task stateful bolt ran in one partition."""
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    for parallelism in (2, 4):
        assert where_tasks_ran(StatefulWhichPartition(), parallelism,
                               tmp_path / f"cp{parallelism}"
                               ) == {(t, t % partitions) for t in range(parallelism)}


class WindowedWhichPartition(BaseWindowedBolt):
    """A windowed bolt (windows of one tuple) emitting ``(task_index, Spark partition, n)``."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.task, self.collector = context.task_index, collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "partition", "n"))

    def execute(self, window: Any) -> None:
        from kstorm._spark.stage import _partition

        for tuple_ in window.get():
            self.collector.emit([self.task, _partition(), tuple_.values[0]])


def test_the_tasks_of_a_windowed_bolt_spread_over_sparks_partitions(
        spark: Any, tmp_path: Any) -> None:
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    bolt = WindowedWhichPartition().with_tumbling_window(Count(1))
    assert where_tasks_ran(bolt, 2, tmp_path / "cp") == {(t, t % partitions) for t in range(2)}
