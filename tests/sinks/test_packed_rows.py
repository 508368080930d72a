"""Packed envelope rows: many tuples per row, the same tuples, routes and hashes as before."""

import pickle

from hypothesis import example, given, settings
from hypothesis import strategies as st

from kstorm import BaseBasicBolt, BaseRichBolt, Fields, TopologyBuilder, Tuple
from kstorm._runtime.driver_rows import sink_tuples
from kstorm._runtime.envelope import Packed, dumps, envelope_tuples, pack, to_arrow, unpack_values
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import compile_plan
from kstorm._spark.speedups.gc_control import paused
from kstorm.grouping import stable_hash, stable_hash_one
from kstorm.testing import CaptureSink, ListSpout

atoms = st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none(),
                  st.floats(allow_nan=False), st.binary(max_size=10))


@given(atoms)
def test_the_one_field_hash_is_stable_hash(value):
    # fields grouping routes state keys with it: it must equal the pinned stable_hash
    assert stable_hash_one(value) == stable_hash([value])
    assert stable_hash_one(value) == stable_hash([value])  # remembered: still the same


def test_equal_values_of_other_types_keep_their_own_hash():
    assert stable_hash_one(1) == stable_hash([1]) != stable_hash([True])
    assert stable_hash_one(True) == stable_hash([True])
    assert stable_hash_one(1.0) == stable_hash([1.0])
    assert stable_hash_one("cat") == stable_hash(["cat"])


class Split(BaseBasicBolt):
    def declare_output_fields(self, d):
        d.declare(Fields("word", "extra"))

    def execute(self, t, c):
        for w in t.get_string(0).split():
            c.emit([w, len(w)])


class Reuse(BaseRichBolt):
    """Emits one list value and changes it afterwards (what a bolt may do with a buffer)."""

    def prepare(self, conf, context, collector):
        self.collector, self.seen = collector, []

    def declare_output_fields(self, d):
        d.declare(Fields("word", "seen"))

    def execute(self, t):
        self.seen.append(t.get_string(0))
        self.collector.emit([t.get_string(0), self.seen])


def topology(bolt):
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("sentence")))
    b.set_bolt("split", bolt, 2).shuffle_grouping("lines")
    b.set_bolt("count", CaptureSink(), 3).fields_grouping("split", Fields("word"))
    return b.create_topology()


def lines(*texts):
    return [(0, Tuple([s], Fields("sentence"), "lines", "default", ("topic", 0, i)))
            for i, s in enumerate(texts)]


def run_rows(topo, texts):
    plan = compile_plan(topo)
    ex = StageExecutor(topo, plan, plan.stage_of["split"], topology_name="t", conf={},
                       batch_id=1, partition=0)
    return list(ex.process_rows(lines(*texts))) + list(ex.finish_rows())


def test_one_row_per_task_carries_the_tuples_in_emit_order():
    topo = topology(Split())
    rows = [r for r in run_rows(topo, ["the cat the hippo", "cat nap"]) if r.dest == "count"]
    assert all(isinstance(r, Packed) for r in rows)
    assert len(rows) == len({r.task for r in rows}) <= 3
    words = ["the", "cat", "the", "hippo", "cat", "nap"]
    for row in rows:  # each word went to its fields-grouping task, in order
        got = unpack_values(row.values)
        assert got == [[w, len(w)] for w in words if stable_hash([w]) % 3 == row.task]
    assert sum(len(unpack_values(r.values)) for r in rows) == len(words)


def test_packed_rows_become_the_same_tuples_in_the_next_stage_and_on_the_driver():
    topo = topology(Split())
    rows = [r for r in run_rows(topo, ["a bb ccc", "bb"]) if r.dest == "count"]
    batch = to_arrow(rows)
    received = [(task, t.values, t.source_component, t.source_stream, t.fields.to_list())
                for task, t in envelope_tuples(batch, topo)]
    assert sorted(received) == sorted(
        (stable_hash([w]) % 3, [w, len(w)], "split", "default", ["word", "extra"])
        for w in ["a", "bb", "ccc", "bb"])
    import pyarrow as pa

    tuples = sink_tuples(topo, pa.Table.from_batches([batch]), []).make()
    assert sorted(t.values for t in tuples) == sorted([w, len(w)] for w in
                                                      ["a", "bb", "ccc", "bb"])


def test_a_value_the_bolt_changes_after_emitting_is_sent_as_emitted():
    topo = topology(Reuse())
    rows = [r for r in run_rows(topo, ["one", "two"]) if r.dest == "count"]
    sent = sorted(v for r in rows for v in unpack_values(r.values))
    assert sent == [["one", ["one"]], ["two", ["one", "two"]]]


def test_pack_keeps_values_and_pickled_entries():
    blob = pack([["cat", 1, None, 2.5, b"x", True], dumps([{"a": [1]}])])
    assert unpack_values(blob) == [["cat", 1, None, 2.5, b"x", True], [{"a": [1]}]]


entries = st.one_of(
    st.lists(st.lists(atoms, min_size=0, max_size=4), max_size=30),  # any lengths
    st.integers(0, 4).flatmap(lambda n: st.lists(st.lists(atoms, min_size=n, max_size=n),
                                                 max_size=30)),   # one stream's tuples
)


@settings(max_examples=300)
@given(entries, st.lists(st.integers(0, 29), max_size=3))
@example([["a"], ["b", 2]], [])  # one field first, then two: not columns
@example([["a", 1], ["b"]], [])
def test_pack_gives_back_every_tuple_s_values_as_a_list_of_its_own(rows, pickled):
    # columns (one stream's tuples) or the entries themselves (a pickled entry among them,
    # tuples of no fields or of different lengths): the same values, with their types
    rows = [dumps(r) if i in pickled else r for i, r in enumerate(rows)]
    want = [pickle.loads(r) if type(r) is bytes else r for r in rows]
    got = unpack_values(pack(rows))
    assert got == want
    assert [[type(v) for v in r] for r in got] == [[type(v) for v in r] for r in want]
    assert all(type(r) is list for r in got) and len({id(r) for r in got}) == len(got)


def test_one_stream_s_tuples_are_packed_as_columns():
    words = [["cat"], ["dog"], ["cat"]]
    assert pickle.loads(pack(words)) == (1, ["cat", "dog", "cat"])
    assert pickle.loads(pack([["a", 1], ["b", 2]])) == (2, ("a", "b"), (1, 2))
    assert type(pickle.loads(pack([["a", 1], ["b"]]))) is list
    assert len(pack([[f"w{i % 50}"] for i in range(1000)])) < len(
        pickle.dumps([[f"w{i % 50}"] for i in range(1000)], protocol=5))


def test_paused_restores_the_collector():
    import gc

    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()


def test_each_tuple_of_a_row_keeps_its_anchor_bookkeeping():
    topo = topology(Split())
    metas = [b"ids-1", None, b"ids-3"]
    row = Packed("count", 2, "split", "default", pack([["a", 1], ["b", 1], ["c", 1]]),
                 pickle.dumps(metas, protocol=5))
    got = [(task, t.values, t._ids) for task, t in envelope_tuples(to_arrow([row]), topo)]
    assert got == [(2, ["a", 1], b"ids-1"), (2, ["b", 1], None), (2, ["c", 1], b"ids-3")]


class Emit(BaseRichBolt):
    """Emits the values its input tuple carries (a list of rows to emit)."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def declare_output_fields(self, d):
        d.declare(Fields("word", "extra"))

    def execute(self, t):
        for values in t.get_value(0):
            self.collector.emit(values, anchors=t)


def _by_task(rows):
    got = {}
    for r in rows:
        if isinstance(r, Packed) and r.dest == "count":
            values = unpack_values(r.values)
            metas = [None] * len(values) if r.meta is None else pickle.loads(r.meta)
            assert len(metas) == len(values)
            got.setdefault(r.task, []).extend(zip(map(tuple, map(tuple, values)), metas,
                                                  strict=True))
    return got


grouping_values = st.one_of(st.text(max_size=3), st.integers(-2, 2), st.booleans(),
                            st.floats(-1, 1), st.none())


@given(st.lists(st.lists(st.tuples(grouping_values, st.integers()), max_size=6), max_size=8),
       st.integers(1, 7))
def test_the_plain_emit_path_routes_every_tuple_as_stable_hash_says(batches, row_limit):
    # the hot path (untracked emits to other stages) remembers a task per string value and
    # keeps each packed row's entry list between drains: same rows as hashing each tuple
    import kstorm._runtime.executor as executor

    topo = topology(Emit())
    plan = compile_plan(topo)
    ex = StageExecutor(topo, plan, plan.stage_of["split"], topology_name="t", conf={},
                       batch_id=1, partition=0)
    old, executor.ROW_TUPLES = executor.ROW_TUPLES, row_limit  # drains between emits
    try:
        tuples = [(0, Tuple([[list(v) for v in values]], Fields("sentence"), "lines"))
                  for values in batches]
        rows = list(ex.process_rows(tuples)) + list(ex.finish_rows())
    finally:
        executor.ROW_TUPLES = old
    expected = {}
    for values in batches:
        for v in values:
            expected.setdefault(stable_hash([v[0]]) % 3, []).append(((v[0], v[1]), None))
    assert _by_task(rows) == expected


def test_an_emit_with_anchor_bookkeeping_keeps_the_row_s_metas_in_line():
    # untracked emits take the plain path, an emit anchored to a tuple that carries
    # bookkeeping takes the other one: both append to the same packed row
    topo = topology(Emit())
    plan = compile_plan(topo)
    ex = StageExecutor(topo, plan, plan.stage_of["split"], topology_name="t", conf={},
                       batch_id=1, partition=0)
    inputs = []
    for i, ids in enumerate([None, b"m1", None, b"m2", None]):
        t = Tuple([[["w", i], ["w", 10 + i]]], Fields("sentence"), "lines")
        t._ids = ids
        inputs.append((0, t))
    rows = list(ex.process_rows(inputs)) + list(ex.finish_rows())
    got = _by_task(rows)
    assert list(got) == [stable_hash(["w"]) % 3]
    metas = [None if ids is None else pickle.dumps([ids], protocol=5)
             for ids in [None, b"m1", None, b"m2", None] for _ in range(2)]
    assert [m for _, m in next(iter(got.values()))] == metas
    assert [v for v, _ in next(iter(got.values()))] == [
        ("w", n) for i in range(5) for n in (i, 10 + i)]


def test_a_sink_gets_the_packed_rows_values_and_tuples_only_when_it_asks():
    import pyarrow as pa

    from kstorm.sink import SinkBatch

    topo = topology(Split())
    rows = [r for r in run_rows(topo, ["a bb ccc", "bb"]) if r.dest == "count"]
    other = Packed("count", 0, "lines", "default", pack([["x y"]]), None)
    table = pa.Table.from_batches([to_arrow(rows)])
    batch = SinkBatch(1, 1, sink_tuples(topo, table, []))
    assert "tuples" not in batch.__dict__ and batch.size == 4
    names, values = batch.values_by_fields()
    assert names == ("word", "extra") and "tuples" not in batch.__dict__
    assert sorted(values) == sorted([w, len(w)] for w in ["a", "bb", "ccc", "bb"])
    assert [t.values for t in batch.tuples] == values  # made now, in the same order
    assert batch.tuples[0].source_component == "split" and batch.size == 4
    # tuples of other fields: no common names, the tuples are made
    mixed = SinkBatch(1, 1, sink_tuples(topo, pa.Table.from_batches([
        to_arrow(rows + [other])]), []))
    assert mixed.values_by_fields() is None
    assert sorted(t.source_component for t in mixed.tuples) == ["lines"] + ["split"] * 4
