"""Sinks may fold a task's tuples in the executor (``BaseSink.combine``); that changes nothing.

The RedisSink combines the rows of each key when its merge's fold ignores order: the
entries its row path builds from the combined rows must be those it builds from every row
(checked on generated rows), and wherever it cannot be sure it sends the rows as they are.
The executor applies a sink's ``combine`` to each packed row of untracked tuples for it.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_redis_fold_rows import NAMES, STEP_ASIDE, entries, rows

from kstorm import BaseRichBolt, Fields, TopologyBuilder, Tuple
from kstorm._runtime.envelope import Packed, unpack_values
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import compile_plan
from kstorm.errors import SinkError
from kstorm.sink import BaseSink
from kstorm.testing import CaptureSink, ListSpout
from sinks.redis import RedisConfig, RedisSink
from sinks.redis._batch import value_function
from sinks.redis._columns import combine_values
from sinks.redis.merge import resolve_merge

SPECS = [dict(key="c:{word}", value="n"), dict(key="w:{word}:{start}", value="n"),
         dict(key="{word}{start}", value="n"), dict(key="h:{start:03d}", field="{word}",
                                                    value="n"),
         dict(key="{n}", value="start")]


def combined(values: list[list[Any]], merge: str, spec: dict[str, Any]) -> Any:
    return combine_values(NAMES, values, key=spec["key"], field=spec.get("field"),
                          value=spec.get("value"), merge=resolve_merge(merge))


@settings(max_examples=80, deadline=None)
@given(rows, st.sampled_from(["add", "max", "min"]))
def test_combined_rows_give_the_entries_of_every_row(values: list[tuple[Any, ...]],
                                                      merge: str) -> None:
    values = [list(v) for v in values]
    before = copy.deepcopy(values)
    for spec in SPECS:
        got = combined(values, merge, spec)
        assert values == before  # the runtime's rows are left as they were
        if got is None:  # nothing to fold (every key once)
            continue
        assert len(got) < len(values)
        as_rows = [dict(zip(NAMES, v, strict=True)) for v in got]
        every = [dict(zip(NAMES, v, strict=True)) for v in values]
        value = value_function(spec["value"])
        assert entries(as_rows, value, spec, merge) == entries(every, value, spec, merge)


def test_a_running_count_per_word_leaves_as_one_row_per_word() -> None:
    got = combined([["a", 0, 1], ["b", 0, 1], ["a", 0, 2], ["a", 7, 3], ["b", 0, 2]], "max",
                   {"key": "c:{word}", "value": "n"})
    assert got == [["a", 0, 3], ["b", 0, 2]]  # each key's first row, its value the fold


@pytest.mark.parametrize(("values", "merge", "spec"), [
    *STEP_ASIDE,
    ([("a", 0, 1), ("a", 0, 2)], "count", {"key": "{word}", "value": None}),  # one per row
    ([("a", 0, 1), ("a", 0, 2)], "add", {"key": "{n}", "value": "n"}),  # the value is a key
    ([("a", 0, 1), ("b", 0, 2)], "add", {"key": "{word}", "value": "n"}),  # nothing to fold
])
def test_where_combining_could_change_a_result_the_rows_leave_as_they_are(
        values: list[tuple[Any, ...]], merge: str, spec: dict[str, Any]) -> None:
    assert combined([list(v) for v in values], merge, spec) is None


def test_a_subclass_with_its_own_commit_is_not_combined_for() -> None:
    class Wrapped(RedisSink):
        def commit_batch(self, *args: Any, **kw: Any) -> Any:
            pass

    rows_ = [["a", 0, 1], ["a", 0, 2]]
    plain = RedisSink(RedisConfig(), key="c:{word}", value="n", merge="add")
    assert plain.combine(Fields(*NAMES), rows_) == [["a", 0, 3]]
    assert Wrapped(RedisConfig(), key="c:{word}", value="n", merge="add").combine(
        Fields(*NAMES), rows_) is None
    assert BaseSink.combine(plain, Fields(*NAMES), rows_) is None  # the default: as they are


class Emit(BaseRichBolt):
    """Emits the rows its input tuple carries."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def declare_output_fields(self, d):
        d.declare(Fields("word", "n"))

    def execute(self, t):
        for values in t.get_value(0):
            self.collector.emit(list(values), anchors=t)


class Summing(CaptureSink):
    def combine(self, fields, values):
        out: dict[str, list[Any]] = {}
        for word, n in values:
            out[word] = [word, out.get(word, [word, 0])[1] + n]
        return list(out.values())


def run(sink: BaseSink, inputs: list[tuple[list[list[Any]], Any]]) -> tuple[list[Any], Any]:
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("rows")))
    b.set_bolt("emit", Emit(), 1).shuffle_grouping("lines")
    b.set_bolt("out", sink, 1).fields_grouping("emit", Fields("word"))
    topo = b.create_topology()
    plan = compile_plan(topo)
    ex = StageExecutor(topo, plan, plan.stage_of["emit"], topology_name="t", conf={},
                       batch_id=1, partition=0)
    tuples = []
    for values, ids in inputs:
        t = Tuple([values], Fields("rows"), "lines")
        t._ids = ids
        tuples.append((0, t))
    got = [r for r in [*ex.process_rows(tuples), *ex.finish_rows()]
           if isinstance(r, Packed) and r.dest == "out"]
    return got, ex.counters


def test_the_executor_sends_a_sink_its_combined_rows_and_counts_what_it_folded() -> None:
    got, counters = run(Summing(), [([["a", 1], ["b", 2], ["a", 3]], None), ([["a", 4]], None)])
    assert [unpack_values(r.values) for r in got] == [[["a", 8], ["b", 2]]]
    assert counters["out.combined"] == 2 and counters["emit.emitted"] == 4


def test_tuples_with_anchor_bookkeeping_or_mutable_values_are_not_combined() -> None:
    got, _ = run(Summing(), [([["a", 1], ["a", 3]], b"ids")])
    assert [unpack_values(r.values) for r in got] == [[["a", 1], ["a", 3]]]
    got, _ = run(Summing(), [([["a", 1], [["a"], 3]], None)])  # a list value: pickled
    assert [len(unpack_values(r.values)) for r in got] == [2]


@pytest.mark.parametrize(("combine", "error"), [
    (lambda self, f, v: 1 / 0, r"sink 'out': combine raised ZeroDivisionError"),
    (lambda self, f, v: [["a"]], r"sink 'out': combine must return None or a list of lists"),
])
def test_a_combine_that_fails_names_the_sink(combine: Any, error: str) -> None:
    bad = type("Bad", (CaptureSink,), {"combine": combine})()
    with pytest.raises(SinkError, match=error):
        run(bad, [([["a", 1], ["a", 2]], None)])


def test_a_sink_s_combined_rows_wait_for_the_next_tuples_until_the_input_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # drains in the middle of the input keep a sink's combined rows queued, so a running
    # count leaves a task as about one row per key; the input's end sends them
    import kstorm._runtime.executor as executor

    monkeypatch.setattr(executor, "ROW_TUPLES", 8)  # combined rows are kept up to 4
    inputs = [([[w, i]], None) for i, w in enumerate("abababcab")]
    got, counters = run(Summing(), inputs)
    assert [unpack_values(r.values) for r in got] == [[["a", 13], ["b", 17], ["c", 6]]]
    assert counters["out.combined"] == 6
    # more keys than a drain keeps: sent at each drain
    many = [([[w, 1]], None) for w in "abcdefghab"]
    got, _ = run(Summing(), many)
    assert [len(unpack_values(r.values)) for r in got] == [8, 2]
    # a sink that does not combine gets its rows at every drain
    plain, _ = run(CaptureSink(), inputs)
    assert [len(unpack_values(r.values)) for r in plain] == [8, 1]


def test_the_per_tuple_view_gives_every_tuple_a_combining_sink_was_sent() -> None:
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("rows")))
    b.set_bolt("emit", Emit(), 1).shuffle_grouping("lines")
    b.set_bolt("out", Summing(), 1).fields_grouping("emit", Fields("word"))
    topo = b.create_topology()
    plan = compile_plan(topo)
    ex = StageExecutor(topo, plan, plan.stage_of["emit"], topology_name="t", conf={},
                       batch_id=1, partition=0)
    t = Tuple([[["a", 1], ["a", 2]]], Fields("rows"), "lines")
    out = [o for o in [*ex.process([(0, t)]), *ex.finish()] if o.dest == "out"]
    assert [pickle.loads(o.values) for o in out] == [["a", 1], ["a", 2]]


class CountingRows(CaptureSink):
    """A combine that is wrong on its own output: it counts rows as if each said 1."""

    seen: list[list[list[Any]]] = []  # (the topology holds a copy of the sink)

    def combine(self, fields, values):
        CountingRows.seen.append([list(v) for v in values])
        out: dict[str, list[Any]] = {}
        for word, _ in values:
            out[word] = [word, out.get(word, [word, 0])[1] + 1]
        return list(out.values())


def test_combine_is_given_its_own_rows_again_with_the_next_tuples(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # what the docstring and docs/sinks.md say: the rows a combine returned come back to it,
    # first, with the task's newer tuples; a fold that holds for its own output (Summing)
    # gives the true total, one that counts rows (CountingRows) does not
    import kstorm._runtime.executor as executor

    monkeypatch.setattr(executor, "ROW_TUPLES", 4)  # a drain after every 4 tuples
    inputs = [([["a", 1]], None) for _ in range(9)]
    got, _ = run(Summing(), inputs)
    assert [unpack_values(r.values) for r in got] == [[["a", 9]]]
    CountingRows.seen.clear()
    got, _ = run(CountingRows(), inputs)
    seen = CountingRows.seen
    assert seen[1][0] == ["a", 4]  # its earlier row, first, then the newer tuples
    assert seen[1][1:] == [["a", 1]] * 3
    assert [unpack_values(r.values) for r in got] != [[["a", 9]]]
