"""The compiled plan: which bolts fuse, which groupings become which partitioning."""

from kstorm import BaseBasicBolt, BaseStatefulBolt, Fields, TopologyBuilder
from kstorm._runtime.plan import PartitionKind, compile_plan
from kstorm.grouping import Grouping, GroupingKind, task_for
from kstorm.testing import CaptureSink, ListSpout


class Bolt(BaseBasicBolt):
    def declare_output_fields(self, d):
        d.declare(Fields("word", "n"))

    def execute(self, t, c):
        c.emit([t.get_value(0), 1])


class Stateful(BaseStatefulBolt):
    def init_state(self, state):
        self.state = state

    def declare_output_fields(self, d):
        d.declare(Fields("word", "n"))


def spout():
    return ListSpout([[("a", 1)]], Fields("word", "n"))


def test_word_count_plan():
    b = TopologyBuilder()
    b.set_spout("lines", spout())
    b.set_bolt("split", Bolt(), 2).shuffle_grouping("lines")
    b.set_bolt("lower", Bolt(), 2).local_or_shuffle_grouping("split")
    b.set_bolt("count", Stateful(), 4).fields_grouping("lower", Fields("word"))
    b.set_bolt("report", Bolt()).global_grouping("count")
    b.set_bolt("store", CaptureSink()).shuffle_grouping("report")
    plan = compile_plan(b.create_topology())

    src, split, count, report = plan.stages
    assert src.is_source and src.raw_spout == "lines"
    # the first bolt reads the spout's raw rows; consecutive stateless bolts fuse
    assert split.bolts == ["split", "lower"] and split.raw_spout == "lines"
    assert split.partitioning.kind is PartitionKind.KEEP
    # a fields grouping becomes a hash partitioning on those fields, one task per bolt task
    assert count.partitioning.kind is PartitionKind.HASH
    assert count.partitioning.fields == ("word",) and count.partitioning.tasks == 4
    assert count.stateful and count.bolts == ["count"]
    # a global grouping is one partition
    assert report.partitioning.kind is PartitionKind.SINGLE
    # sinks run on the driver in the commit phase
    assert plan.sinks == ["store"] and plan.stage_of["store"] == -1
    assert plan.consumers_of_stage(count.index) == [report.index]


def test_fields_grouping_on_spout_hashes_raw_columns():
    b = TopologyBuilder()
    b.set_spout("events", spout())
    b.set_bolt("by_word", Bolt(), 3).fields_grouping("events", Fields("word"))
    stage = compile_plan(b.create_topology()).stage("by_word")
    assert stage.raw_spout == "events"
    assert stage.partitioning.kind is PartitionKind.HASH and stage.partitioning.fields == ("word",)


def test_all_grouping_broadcasts_and_multi_input_unions():
    b = TopologyBuilder()
    b.set_spout("a", spout())
    b.set_spout("b", spout())
    b.set_bolt("pa", Bolt()).shuffle_grouping("a")
    b.set_bolt("pb", Bolt()).shuffle_grouping("b")
    b.set_bolt("everyone", Bolt(), 3).all_grouping("pa")
    b.set_bolt("join", Bolt(), 2).fields_grouping("pa", Fields("word")).fields_grouping(
        "pb", Fields("word"))
    plan = compile_plan(b.create_topology())
    assert plan.stage("everyone").partitioning.kind is PartitionKind.BROADCAST
    join = plan.stage("join")
    assert join.raw_spout is None and {c.component for c, _ in join.inputs} == {"pa", "pb"}


def test_stateful_bolt_is_never_fused():
    b = TopologyBuilder()
    b.set_spout("s", spout())
    b.set_bolt("x", Bolt()).shuffle_grouping("s")
    b.set_bolt("st", Stateful(), 2).shuffle_grouping("x")
    plan = compile_plan(b.create_topology())
    assert plan.stage("st").stateful and plan.stage("st") is not plan.stage("x")


def test_task_for_each_grouping():
    fields = Grouping(GroupingKind.FIELDS, "x", fields=Fields("w"))
    assert task_for(fields, 4, 10, 0) == [2]
    assert task_for(Grouping(GroupingKind.GLOBAL, "x"), 4, None, 3) == [0]
    assert task_for(Grouping(GroupingKind.ALL, "x"), 3, None, 0) == [0, 1, 2]
    assert task_for(Grouping(GroupingKind.SHUFFLE, "x"), 2, None, 5) == [1]
