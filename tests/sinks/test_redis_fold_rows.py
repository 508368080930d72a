"""The RedisSink folds a batch's tuples per key in Arrow first, and that changes nothing.

``fold_rows`` (tuples, many per key: a running count per word) must lead to exactly the
entries the row path builds from every tuple; wherever it cannot be sure, it returns None and
the sink takes the row path (which also raises the row path's errors). Checked against the row
path itself, on generated rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm.errors import SinkError
from kstorm.sink import SinkBatch, UnmadeTuples
from kstorm.tuple import Fields, Tuple
from sinks.redis import RedisConfig, RedisSink
from sinks.redis._batch import build_entries, key_function, value_function
from sinks.redis._columns import fold_rows, folded_value
from sinks.redis.merge import resolve_merge

NAMES = ("word", "start", "n")


def entries(rows: list[dict[str, Any]], value: Any, spec: dict[str, Any],
            merge: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    field = spec.get("field")
    got = build_entries(rows, key=key_function("key", spec["key"]),
                        field=None if field is None else key_function("field", field),
                        value=value, merge=resolve_merge(merge))
    return {(e.key, e.field): e.values for e in got}


def same(values: list[tuple[Any, ...]], merge: str, **spec: Any) -> None:
    rows = [dict(zip(NAMES, v, strict=True)) for v in values]
    folded = fold_rows(NAMES, values, key=spec["key"], field=spec.get("field"),
                       value=spec.get("value"), merge=resolve_merge(merge))
    assert folded is not None, spec
    assert len(folded) <= len(values)
    assert entries(folded, folded_value, spec, merge) == entries(
        rows, value_function(spec.get("value")), spec, merge)


# Few distinct words, so that many rows share a key; "1" and "11" with "1"/"" starts make
# "{word}{start}" keys that collide across groups.
words = st.sampled_from(["a", "b", "é", "1", "11", "kafka", "w w"])
rows = st.lists(st.tuples(words, st.integers(-3, 12), st.integers(-(2**40), 2**40)),
                min_size=1, max_size=60)


@settings(max_examples=80, deadline=None)
@given(rows, st.sampled_from(["add", "count", "max", "min"]))
def test_folding_first_gives_the_entries_of_every_row(values: list[tuple[Any, ...]],
                                                       merge: str) -> None:
    same(values, merge, key="c:{word}", value="n")
    same(values, merge, key="w:{word}:{start}", value="n")
    same(values, merge, key="{word}{start}", value="n")  # groups that render the same key
    same(values, merge, key="h:{start:03d}", field="{word}", value="n")
    same(values, merge, key="c:{word}", value=None)  # one per row
    same(values, merge, key="{n}", value="start")  # an integer key, the value a key field too


def test_a_running_count_per_word_becomes_one_row_per_word() -> None:
    values = [("a", 0, 1), ("b", 0, 1), ("a", 0, 2), ("a", 0, 3), ("b", 0, 2)]
    got = fold_rows(NAMES, values, key="c:{word}", field=None, value="n",
                    merge=resolve_merge("max"))
    assert got is not None
    assert [(r["word"], folded_value(r)) for r in got] == [("a", 3), ("b", 2)]


# rows and sink settings where folding could change a result (combining too)
STEP_ASIDE = [
    ([("a", 0, 1), ("a", 0, 2)], "set", {"key": "{word}", "value": "n"}),  # order matters
    ([("a", 0, 1.5), ("a", 0, 2)], "max", {"key": "{word}", "value": "n"}),  # floats
    ([("a", 0, True), ("a", 0, False)], "add", {"key": "{word}", "value": "n"}),  # bools
    ([("a", 0, None), ("a", 0, 2)], "add", {"key": "{word}", "value": "n"}),  # a null value
    ([(None, 0, 1), ("a", 0, 2)], "add", {"key": "{word}", "value": "n"}),  # a null key field
    ([("", 0, 1), ("a", 0, 2)], "add", {"key": "{word}", "value": "n"}),  # maybe an empty key
    ([("a", 0, "1"), ("a", 0, 2)], "add", {"key": "{word}", "value": "n"}),  # text numbers
    ([("a", 0, 1), (b"a", 0, 2)], "add", {"key": "{word}", "value": "n"}),  # mixed types
    ([("a", 0.5, 1), ("a", 1.5, 2)], "add", {"key": "{start}", "value": "n"}),  # float keys
    ([("a", True, 1), ("a", False, 2)], "add", {"key": "{start}", "value": "n"}),  # bool keys
    ([("a", 0, 2**62), ("a", 0, 2**62)], "add", {"key": "{word}", "value": "n"}),  # overflow
    ([("a", 0, 1)], "add", {"key": "{missing}", "value": "n"}),
    ([("a", 0, 1)], "add", {"key": "{word}", "value": "missing"}),
    ([("a", 0, 1)], "add", {"key": lambda r: r["word"], "value": "n"}),
    ([("a", 0, 1)], "add", {"key": "{word}", "value": lambda r: r["n"]}),
    ([("a", 0, 1)], "add", {"key": "{word}", "value": {"n": "n"}}),
    ([("a", 0, 1)], "add", {"key": "constant", "value": "n"}),
    ([("a", 0, 1)], "add", {"key": "{word}", "field": lambda r: "f", "value": "n"}),
    ([], "add", {"key": "{word}", "value": "n"}),
]


@pytest.mark.parametrize(("values", "merge", "spec"), STEP_ASIDE)
def test_where_folding_could_change_a_result_it_steps_aside(
        values: list[tuple[Any, ...]], merge: str, spec: dict[str, Any]) -> None:
    assert fold_rows(NAMES, values, key=spec["key"], field=spec.get("field"),
                     value=spec["value"], merge=resolve_merge(merge)) is None


class RecordingSink(RedisSink):
    """A RedisSink whose commit script is recorded, not sent."""

    def _apply(self, txid: int, offsets: Any, state: Any, states: Any, *, rows: Any = (),
               chunks: Any = None, value_of: Any = None) -> Any:
        rows = list(rows)
        self.applied = {"rows": rows, "values": [(value_of or self._value_of)(r) for r in rows]}


def tuples(values: list[tuple[Any, ...]], fields: Fields) -> SinkBatch:
    return SinkBatch(txid=0, batch_id=0,
                     tuples=[Tuple(list(v), fields, "count") for v in values])


def test_an_empty_key_is_refused_naming_the_row_as_it_came() -> None:
    # (the error comes before anything is sent to Redis)
    sink = RedisSink(RedisConfig(), key="{word}", value="n", merge="add").bind("t")
    with pytest.raises(SinkError, match=r"got '' for row \{'word': '', 'n': 2\}"):
        sink.commit(tuples([("a", 1), ("", 2)], Fields("word", "n")))


def test_the_sink_folds_its_tuples_and_else_hands_on_every_row() -> None:
    sink = RecordingSink(RedisConfig(), key="c:{word}", value="n", merge="max")
    fields = Fields("word", "n")
    sink.commit(tuples([("a", 1), ("a", 2), ("b", 7)], fields))
    assert [r["word"] for r in sink.applied["rows"]] == ["a", "b"]
    assert sink.applied["values"] == [2, 7]
    # tuples of two streams with other fields: every row, as before
    sink.commit(SinkBatch(txid=0, batch_id=0, tuples=[
        Tuple(["a", 1], fields, "count"), Tuple(["a", 2, 0], Fields("word", "n", "x"), "other")]))
    assert sink.applied["rows"] == [{"word": "a", "n": 1}, {"word": "a", "n": 2, "x": 0}]
    # a merge whose fold depends on the order: every row
    last = RecordingSink(RedisConfig(), key="c:{word}", value="n", merge="set")
    last.commit(tuples([("a", 1), ("a", 2)], fields))
    assert last.applied["values"] == [1, 2]


def test_a_subclass_overriding_commit_batch_still_gets_every_tuple_through_it() -> None:
    class Wrapped(RedisSink):
        def commit_batch(self, txid: int, rows: Any, offsets: Any, state: Any = None, *,
                         states: Any = None) -> Any:
            self.rows = list(rows)

    sink = Wrapped(RedisConfig(), key="c:{word}", value="n", merge="add")
    sink.commit(tuples([("a", 1), ("a", 2)], Fields("word", "n")))
    assert sink.rows == [{"word": "a", "n": 1}, {"word": "a", "n": 2}]


def unmade(values: list[tuple[Any, ...]], fields: Fields, made: list[int]) -> SinkBatch:
    """A batch as the commit phase hands it over: its Tuples made on first use only."""
    def make() -> list[Tuple]:
        made.append(1)
        return [Tuple(list(v), fields, "count") for v in values]

    return SinkBatch(txid=0, batch_id=0, tuples=UnmadeTuples(
        len(values), make, lambda: (tuple(fields.names), [list(v) for v in values])))


def test_the_sink_folds_a_batch_s_values_without_making_its_tuples() -> None:
    made: list[int] = []
    sink = RecordingSink(RedisConfig(), key="c:{word}", value="n", merge="add")
    sink.commit(unmade([("a", 1), ("b", 2), ("a", 3)], Fields("word", "n"), made))
    assert sink.applied["values"] == [4, 2] and made == []
    # the row path (a merge whose fold depends on the order) makes them, once
    last = RecordingSink(RedisConfig(), key="c:{word}", value="n", merge="set")
    batch = unmade([("a", 1), ("a", 2)], Fields("word", "n"), made)
    last.commit(batch)
    assert last.applied["values"] == [1, 2] and made == [1]
    assert [t.values for t in batch.tuples] == [["a", 1], ["a", 2]] and made == [1]
