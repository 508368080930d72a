"""The stage executor, without Spark: routing, fusion, errors, batch lifecycle."""

import pickle
from collections import Counter

import pytest

from kstorm import (
    BaseBasicBolt,
    BaseRichBolt,
    FailedException,
    Fields,
    TopologyBuilder,
    TopologyError,
    Tuple,
)
from kstorm._ids import DEAD_LETTER_STREAM
from kstorm._runtime.envelope import CAPTURE as CAPTURE_DEST
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import compile_plan
from kstorm.grouping import stable_hash
from kstorm.testing import CaptureSink, ListSpout


class Split(BaseBasicBolt):
    def declare_output_fields(self, d):
        d.declare(Fields("word"))
        d.declare_stream("long", Fields("word", "length"))

    def execute(self, t, c):
        for w in t.get_string(0).split():
            if w == "boom":
                raise ValueError("cannot split boom")
            if w == "nope":
                raise FailedException("nope")
            c.emit([w])
            if len(w) > 4:
                c.emit([w, len(w)], stream="long")


class Upper(BaseBasicBolt):
    def declare_output_fields(self, d):
        d.declare(Fields("word"))

    def execute(self, t, c):
        c.emit([t.get_string(0).upper()])


class BatchCount(BaseRichBolt):
    """Counts a batch's tuples and emits once in finish_batch (Storm BatchBolt style)."""

    def prepare(self, conf, context, collector):
        self.collector, self.n, self.task = collector, 0, context.task_index

    def declare_output_fields(self, d):
        d.declare(Fields("task", "n"))

    def execute(self, t):
        self.n += 1
        self.collector.ack(t)

    def finish_batch(self):
        self.collector.emit([self.task, self.n])


def build(**conf):
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("sentence")))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("upper", Upper(), 2).shuffle_grouping("split")
    b.set_bolt("count", BatchCount(), 3).fields_grouping("upper", Fields("word"))
    b.set_bolt("longs", CaptureSink()).shuffle_grouping("split", stream="long")
    topo = b.create_topology()
    plan = compile_plan(topo)
    ex = StageExecutor(topo, plan, plan.stage_of["split"], topology_name="t", conf=conf,
                       batch_id=7, partition=1)
    return topo, plan, ex


def lines(*texts):
    return [(1, Tuple([s], Fields("sentence"), "lines", "default", ("topic", 0, i)))
            for i, s in enumerate(texts)]


def test_fused_bolts_and_fields_routing():
    topo, plan, ex = build()
    assert plan.stage("upper") is plan.stage("split")
    out = list(ex.process(lines("the cat", "the hippo"))) + list(ex.finish())
    to_count = [o for o in out if o.dest == "count"]
    assert [pickle.loads(o.values) for o in to_count] == [["THE"], ["CAT"], ["THE"], ["HIPPO"]]
    # equal grouping values -> equal task, task = stable hash mod parallelism
    tasks = {pickle.loads(o.values)[0]: o.task for o in to_count}
    assert tasks["THE"] == stable_hash(["THE"]) % 3
    assert all(o.src == "upper" for o in to_count)
    longs = [pickle.loads(o.values) for o in out if o.dest == "longs"]
    assert longs == [["hippo", 5]]
    assert ex.counters["split.executed"] == 2 and ex.counters["upper.executed"] == 4
    assert ex.counters["split.acked"] == 2


def test_bolt_exception_becomes_a_dead_letter_and_processing_goes_on():
    _, _, ex = build()
    out = list(ex.process(lines("ok", "boom", "fine"))) + list(ex.finish())
    dead = [pickle.loads(o.values) for o in out if o.dest == DEAD_LETTER_STREAM]
    assert len(dead) == 1
    component, stream, etype, message, values, topic, part, offset, raw = dead[0]
    assert (component, etype, topic, part, offset) == ("split", "ValueError", "topic", 0, 1)
    assert "cannot split boom" in message and "boom" in values
    words = [pickle.loads(o.values)[0] for o in out if o.dest == "count"]
    assert words == ["OK", "FINE"]


def test_error_policy_fail_raises_a_bolt_error_naming_the_bolt():
    from kstorm.errors import BoltError

    _, _, ex = build(**{"kstorm.bolt.error.policy": "fail"})
    expected = "bolt 'split' raised ValueError: cannot split boom"
    with pytest.raises(BoltError, match=expected) as info:
        list(ex.process(lines("boom")))
    assert isinstance(info.value.__cause__, ValueError)


def test_failed_exception_fails_the_tuple_at_most_once():
    _, _, ex = build(**{"topology.guarantee": "at-most-once"})
    list(ex.process(lines("nope")))
    assert ex.counters["split.failed"] == 1 and ex.counters["split.acked"] == 0


def test_exactly_once_a_failed_tuple_fails_its_batch():
    from kstorm.errors import FailedException

    _, _, ex = build()
    with pytest.raises(FailedException, match="bolt 'split' failed a tuple of batch 7"):
        list(ex.process(lines("nope")))


def test_undeclared_stream_and_wrong_arity_are_clear_errors():
    class Bad(BaseBasicBolt):
        def __init__(self, stream, values):
            self.stream, self.values = stream, values

        def declare_output_fields(self, d):
            d.declare(Fields("a", "b"))

        def execute(self, t, c):
            c.emit(self.values, stream=self.stream)

    for bolt, match in [(Bad("other", [1, 2]), "undeclared stream 'other'"),
                        (Bad("default", [1]), "emitted 1 values on stream 'default'.*2 fields")]:
        b = TopologyBuilder()
        b.set_spout("lines", ListSpout([[("x",)]], Fields("sentence")))
        b.set_bolt("bad", bolt).shuffle_grouping("lines")
        topo = b.create_topology()
        plan = compile_plan(topo)
        ex = StageExecutor(topo, plan, plan.stage_of["bad"], topology_name="t", conf={},
                           batch_id=0, partition=0)
        with pytest.raises(TopologyError, match=match):
            list(ex.process(lines("x")))


def test_finish_batch_runs_per_task_and_capture():
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("sentence")))
    b.set_bolt("count", BatchCount(), 2).shuffle_grouping("lines")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("count")
    topo = b.create_topology()
    plan = compile_plan(topo)
    ex = StageExecutor(topo, plan, plan.stage_of["count"], topology_name="t",
                       conf={"kstorm.capture.emitted": True}, batch_id=3, partition=0)
    tuples = [(i % 2, t) for i, (_, t) in enumerate(lines("a", "b", "c"))]
    out = list(ex.process(tuples)) + list(ex.finish())
    sent = sorted(pickle.loads(o.values) for o in out if o.dest == "out")
    assert sent == [[0, 2], [1, 1]]
    captured = [(o.src, pickle.loads(o.values)) for o in out if o.dest == CAPTURE_DEST]
    assert sorted(v for _, v in captured) == [[0, 2], [1, 1]]


def test_stable_hash_is_stable():
    # task assignment (and so where state lives) must never change between releases
    assert stable_hash(["cat", 1]) == stable_hash(("cat", 1)) == 1554906866


def test_stable_hash_spreads_keys_that_differ_in_a_few_bits():
    # plain CRC-32 is linear: keys differing only in their last digits shared their low
    # bits, so runs of 8 consecutive keys (k0..k7, ...) all went to one of 2 tasks (13 of 32
    # runs); a well-mixed hash puts a run of 8 on one task with probability 1/128
    for prefix in ("k", "user", "sensor-"):
        one_task = sum(len({stable_hash([f"{prefix}{run * 8 + i}"]) % 2 for i in range(8)}) == 1
                       for run in range(32))
        assert one_task <= 3, (prefix, one_task)
    tasks = Counter(stable_hash([f"k{i}"]) % 4 for i in range(1000))
    assert min(tasks.values()) > 200


def test_stable_hash_depends_on_values_not_on_which_objects_hold_them():
    # pickle's memo writes a repeated object as a back-reference: ("a", "a") with one string
    # object twice pickled unlike two equal strings, so one key could go to two tasks
    one = "user-" + str(42)
    other = "user-" + str(42)
    assert one is not other
    assert stable_hash([one, one]) == stable_hash([one, other])
    assert stable_hash([(one, one)]) == stable_hash([(one, other)])
