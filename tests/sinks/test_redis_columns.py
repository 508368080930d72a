"""The RedisSink's column path builds exactly the chunks of its row path, or steps aside.

``table_chunks`` (closed windows handed over as Arrow columns) must give the commit script
the same text ``_chunk(build_entries(rows))`` gives for the same rows; wherever it cannot be
sure, it returns None and the sink takes the row path. Checked here against the row path
itself, on generated tables.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm.errors import SinkError
from kstorm.sink import SinkBatch
from kstorm.tuple import Fields, Tuple
from sinks.redis import RedisConfig, RedisSink
from sinks.redis._batch import build_entries, key_function, value_function
from sinks.redis._columns import table_chunks
from sinks.redis.merge import resolve_merge
from sinks.redis.sink import _chunk


def row_path(table: pa.Table, *, key: Any, field: Any, value: Any, codec: str, size: int,
             merge: str = "set") -> list[str]:
    entries = build_entries(table.to_pylist(), key=key_function("key", key),
                            field=None if field is None else key_function("field", field),
                            value=value_function(value), merge=resolve_merge(merge))
    return [_chunk(entries[at:at + size], codec) for at in range(0, len(entries), size)]


def same(table: pa.Table, *, merge: str = "set", **spec: Any) -> list[str]:
    numeric = resolve_merge(merge).numeric
    got = table_chunks(table, numeric=numeric, **spec)
    assert got is not None, spec
    assert got == row_path(table, merge=merge, **spec)
    return got


# Text without the characters JSON escapes (the column path's domain), Unicode included.
plain_text = st.text(st.characters(blacklist_categories=("Cs",),
                                   blacklist_characters='"\\'
                                   + "".join(map(chr, range(32)))), min_size=1, max_size=12)
ints = st.integers(min_value=-(2**62), max_value=2**62)


@st.composite
def tables(draw: Any) -> pa.Table:
    n = draw(st.integers(min_value=1, max_value=40))
    # (a word starting "kstorm" could make a reserved key: the column path then steps
    # aside, as it must; a case of its own below)
    words = draw(st.lists(plain_text.filter(lambda w: not w.startswith("kstorm")),
                          min_size=n, max_size=n, unique=True))
    return pa.table({
        "word": words,
        "start": draw(st.lists(ints, min_size=n, max_size=n)),
        "n": pa.array(draw(st.lists(ints, min_size=n, max_size=n)), pa.int64()),
        "label": draw(st.lists(plain_text, min_size=n, max_size=n)),
        "small": pa.array(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)),
                          pa.int16()),
    })


@settings(max_examples=60, deadline=None)
@given(tables(), st.integers(min_value=1, max_value=7))
def test_the_column_path_writes_what_the_row_path_writes(table: pa.Table, size: int) -> None:
    same(table, key="w:{word}:{start}", field=None, value="n", codec="json", size=size)
    same(table, key="{word}", field=None, value="label", codec="json", size=size)
    same(table, key="{word}", field=None, value="label", codec="string", size=size)
    same(table, key="c:{{x}}:{word}", field=None, value="n", codec="json", size=size,
         merge="add")
    same(table, key="{word}", field=None, value=None, codec="json", size=size, merge="count")
    same(table, key="h:{small}", field="{word}/{start}", value="n", codec="json", size=size,
         merge="max")
    same(table, key="{word}:{small}", field=None, codec="json", size=size,
         value={"sum": "n", "count": "small", "label": "label"})


def test_a_small_case_by_hand() -> None:
    table = pa.table({"key": ["é", "b"], "window_start": [0, 10_000], "count": [3, 1],
                      "total": [7, -2]})
    got = same(table, key="w:{key}:{window_start}", field=None, codec="json", size=50_000,
               value={"count": "count", "sum": "total"})
    assert got == ['["w:é:0","","1","{\\"count\\":3,\\"sum\\":7}",'
                   '"w:b:10000","","1","{\\"count\\":1,\\"sum\\":-2}"]']


@pytest.mark.parametrize(("table", "spec"), [
    (pa.table({"k": ["a", "a"], "n": [1, 2]}), {"key": "{k}", "value": "n"}),  # folded
    (pa.table({"k": ["a", None], "n": [1, 2]}), {"key": "{k}", "value": "n"}),  # null key
    (pa.table({"k": ["a", "b"], "n": [1, None]}), {"key": "{k}", "value": "n"}),  # null value
    (pa.table({"k": ["a", "b"], "n": [1.0, 2.5]}), {"key": "{k}", "value": "n"}),  # floats
    (pa.table({"k": [True, False], "n": [1, 2]}), {"key": "{k}", "value": "n"}),  # bools
    (pa.table({"k": [1, 2], "n": [1, 2]}), {"key": "{k:03d}", "value": "n"}),  # a spec
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{k!r}", "value": "n"}),  # conversion
    (pa.table({"k": ['a"', "b"], "n": [1, 2]}), {"key": "{k}", "value": "n"}),  # a quote
    (pa.table({"k": ["a\\", "b"], "n": [1, 2]}), {"key": "{k}", "value": "n"}),  # backslash
    (pa.table({"k": ["a\n", "b"], "n": [1, 2]}), {"key": "{k}", "value": "n"}),  # control
    (pa.table({"k": ["a", "b"], "s": ["x", "y\t"]}), {"key": "{k}", "value": "s"}),
    (pa.table({"k": ["kstorm:a", "b"], "n": [1, 2]}), {"key": "{k}", "value": "n"}),
    (pa.table({"k": ["", "b"], "n": [1, 2]}), {"key": "{k}", "value": "n"}),  # empty key
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{missing}", "value": "n"}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{k}", "value": "missing"}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{k}", "value": lambda r: r["n"]}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": lambda r: r["k"], "value": "n"}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "constant", "value": "n"}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{k}", "value": "n", "codec": "string"}),
    (pa.table({"k": ["a", "b"], "s": ["1", "2"]}), {"key": "{k}", "value": "s",
                                                    "numeric": True}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{k}", "value": {"a": "n"},
                                                "numeric": True}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{k}", "value": {'"a': "n"}}),
    (pa.table({"k": ["a", "b"], "n": [1, 2]}), {"key": "{k}", "value": "n",
                                                "field": "{k}{missing}"}),
])
def test_where_the_paths_could_differ_the_column_path_steps_aside(table: pa.Table,
                                                                  spec: dict[str, Any]) -> None:
    args = {"field": None, "codec": "json", "size": 10, **spec}
    assert table_chunks(table, **args) is None


class RecordingSink(RedisSink):
    """A RedisSink whose commit script is recorded, not sent."""

    def _apply(self, txid: int, offsets: Any, state: Any, states: Any, *, rows: Any = (),
               chunks: Any = None) -> Any:
        self.applied = {"chunks": chunks, "rows": list(rows)}


def batch(table: pa.Table) -> SinkBatch:
    return SinkBatch(txid=0, batch_id=0, tuples=[], table=table)


def test_the_sink_takes_the_column_path_and_else_the_rows_of_the_table() -> None:
    sink = RecordingSink(RedisConfig(), key="c:{k}", value="n", merge="add")
    sink.commit(batch(pa.table({"k": ["a", "b"], "n": [1, 2]})))
    assert sink.applied == {"chunks": ['["c:a","","1","1","c:b","","1","2"]'], "rows": []}
    sink.commit(batch(pa.table({"k": ["a", "a"], "n": [1, 2]})))  # folded: the row path
    assert sink.applied == {"chunks": None, "rows": [{"k": "a", "n": 1}, {"k": "a", "n": 2}]}


def test_a_record_value_is_stored_as_a_json_object_on_the_row_path_too() -> None:
    sink = RecordingSink(RedisConfig(), key="c:{k}", value={"count": "n", "k": "k"})
    rows = [{"k": "a", "n": 2}]
    assert value_function(sink.value)(rows[0]) == {"count": 2, "k": "a"}
    sink.commit(SinkBatch(txid=0, batch_id=0, tuples=[Tuple(["a", 2], Fields("k", "n"), "c")]))
    assert sink.applied["rows"] == rows
    with pytest.raises(SinkError, match="'missing' is missing"):
        value_function({"x": "missing"})(rows[0])


def test_a_subclass_overriding_commit_batch_still_gets_every_row_through_it() -> None:
    class Wrapped(RedisSink):
        def commit_batch(self, txid: int, rows: Any, offsets: Any, state: Any = None, *,
                         states: Any = None) -> Any:
            self.rows = list(rows)

    sink = Wrapped(RedisConfig(), key="c:{k}", value="n", merge="add")
    sink.commit(batch(pa.table({"k": ["a", "b"], "n": [1, 2]})))
    assert sink.rows == [{"k": "a", "n": 1}, {"k": "b", "n": 2}]
