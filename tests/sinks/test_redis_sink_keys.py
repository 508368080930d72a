"""Key templates, batch entries, stored value text and bookkeeping key names (no Redis)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from kstorm.errors import ConfigError, SinkError
from sinks.redis import LuaMerge
from sinks.redis._batch import Entry, build_entries, flatten, key_function, value_function
from sinks.redis._codec import decode, encode
from sinks.redis._keys import KeyTemplate, Namespace, offset_fields, parse_record
from sinks.redis.merge import BUILTIN_MERGES, PythonMerge

# -- key templates ----------------------------------------------------------------------


def test_template_renders_row_fields_with_format_specs() -> None:
    template = KeyTemplate("counts:{word}:{window_start:%Y-%m-%dT%H:%M}")
    row = {"word": "storm", "window_start": dt.datetime(2024, 5, 1, 12, 30), "n": 3}
    assert template.render(row) == "counts:storm:2024-05-01T12:30"
    assert template.fields == ("word", "window_start")


def test_constant_template_is_a_single_key() -> None:
    assert KeyTemplate("total").render({"n": 1}) == "total"


def test_missing_field_names_the_field_and_the_row_fields() -> None:
    with pytest.raises(SinkError, match=r"field 'word' is missing; the row has \['n'\]"):
        KeyTemplate("counts:{word}").render({"n": 1})


def test_null_field_is_refused_rather_than_written_as_None() -> None:
    with pytest.raises(SinkError, match="'word' is null"):
        KeyTemplate("counts:{word}").render({"word": None})


@pytest.mark.parametrize("template", ["", "counts:{}", "c:{0}", "c:{row.word}", "c:{row[0]}",
                                      "c:{word"])
def test_bad_templates_are_config_errors(template: str) -> None:
    with pytest.raises(ConfigError):
        KeyTemplate(template)


def test_keys_inside_the_reserved_namespace_are_refused() -> None:
    with pytest.raises(ConfigError, match="reserved"):
        key_function("key", "kstorm:{word}")
    with pytest.raises(SinkError, match="reserved"):
        build_entries([{"w": "kstorm:x"}], key=key_function("key", "{w}"), field=None,
                      value=value_function("w"), merge=BUILTIN_MERGES["set"])


# -- entries ------------------------------------------------------------------------------

ROWS = [{"w": "a", "n": 1}, {"w": "b", "n": 5}, {"w": "a", "n": 3}]


def entries_for(merge, rows=ROWS, value="n"):
    return build_entries(rows, key=key_function("key", "c:{w}"), field=None,
                         value=value_function(value), merge=merge)


@pytest.mark.parametrize(("name", "a", "b"), [
    ("add", 4, 5), ("max", 3, 5), ("min", 1, 5), ("set", 3, 5),
])
def test_rows_sharing_a_key_fold_into_one_entry(name: str, a: int, b: int) -> None:
    assert entries_for(BUILTIN_MERGES[name]) == [Entry("c:a", "", (a,)), Entry("c:b", "", (b,))]


def test_count_adds_one_per_row() -> None:
    assert entries_for(BUILTIN_MERGES["count"], value=None) == [
        Entry("c:a", "", (2,)), Entry("c:b", "", (1,))]


def test_merges_without_a_python_fold_keep_every_value_in_row_order() -> None:
    concat = LuaMerge("concat", "return old .. new", numeric=False)
    assert entries_for(concat)[0] == Entry("c:a", "", (1, 3))
    assert entries_for(PythonMerge(lambda old, new: old))[0] == Entry("c:a", "", (1, 3))


def test_hash_field_entries() -> None:
    rows = [{"day": "d1", "w": "a", "n": 1}, {"day": "d1", "w": "b", "n": 2}]
    entries = build_entries(rows, key=key_function("key", "day:{day}"),
                            field=key_function("field", "{w}"), value=value_function("n"),
                            merge=BUILTIN_MERGES["add"])
    assert entries == [Entry("day:d1", "a", (1,)), Entry("day:d1", "b", (2,))]


def test_numpy_numbers_are_accepted_and_booleans_refused_for_numeric_merges() -> None:
    rows = [{"w": "a", "n": np.int64(2)}, {"w": "a", "n": np.float32(0.5)}]
    assert entries_for(BUILTIN_MERGES["add"], rows) == [Entry("c:a", "", (2.5,))]
    with pytest.raises(SinkError, match="key 'c:a': this merge needs a number, got True"):
        entries_for(BUILTIN_MERGES["add"], [{"w": "a", "n": True}])


def test_missing_value_field_is_named() -> None:
    with pytest.raises(SinkError, match=r"value field 'n' is missing; the row has \['w'\]"):
        entries_for(BUILTIN_MERGES["add"], [{"w": "a"}])


def test_pyspark_like_rows_are_converted_with_asDict() -> None:
    class SparkRow:
        def asDict(self):
            return {"w": "a", "n": 7}

    assert entries_for(BUILTIN_MERGES["add"], [SparkRow()]) == [Entry("c:a", "", (7,))]
    with pytest.raises(SinkError, match="rows must be mappings"):
        entries_for(BUILTIN_MERGES["add"], [("a", 7)])


def test_flatten_is_the_script_argument_layout() -> None:
    entries = [Entry("c:a", "", (1,)), Entry("d", "f", ({"x": 1}, "s"))]
    assert flatten(entries, "json") == ["c:a", "", "1", "1", "d", "f", "2", '{"x":1}', '"s"']


# -- stored text ---------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "text", "back"), [
    (42, "42", 42), (-3, "-3", -3), (0.1, "0.1", 0.1), (1e20, "1e+20", 1e20),
    (np.int64(7), "7", 7), ({"word": "storm", "n": 2}, '{"n":2,"word":"storm"}', None),
    ("hi", '"hi"', "hi"), (dt.date(2024, 5, 1), '"2024-05-01"', "2024-05-01"),
    ([1, 2], "[1,2]", [1, 2]),
])
def test_json_codec_stores_numbers_plainly_and_records_as_sorted_json(value, text, back) -> None:
    assert encode(value, "json", "k") == text
    assert decode(text.encode(), "json") == (value if back is None else back)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object()])
def test_unstorable_values_name_the_key(value) -> None:
    with pytest.raises(SinkError, match="key 'c:a'"):
        encode(value, "json", "key 'c:a'")


def test_an_unstorable_value_in_a_batch_names_its_key() -> None:
    with pytest.raises(SinkError, match="RedisSink key 'c:a' field 'f': cannot store nan"):
        flatten([Entry("c:a", "f", (float("nan"),))], "json")


def test_string_codec_stores_text_verbatim() -> None:
    assert encode("up since 5s", "string", "k") == "up since 5s"
    assert decode(b"up since 5s", "string") == "up since 5s"
    with pytest.raises(SinkError, match="needs str"):
        encode(5, "string", "k")


def test_text_that_is_not_json_decodes_as_a_string() -> None:
    assert decode(b"hello", "json") == "hello"


# -- bookkeeping keys ----------------------------------------------------------------------


def test_bookkeeping_key_names_follow_the_documented_layout() -> None:
    ns = Namespace("wc", "redis")
    assert ns.record == "kstorm:wc:redis:offsets"
    assert ns.meta("txid", "counts:a", "") == ("kstorm:wc:redis:txid", "counts:a")
    assert ns.meta("prev", "day:1", "storm") == ("kstorm:wc:redis:prev:day:1", "storm")
    assert ns.stage(7) == "kstorm:wc:redis:stage:7"


def test_offsets_flatten_and_parse_back() -> None:
    offsets = {"words": {0: 120, 1: 98}, "clicks.v2": {3: 0}}
    flat = offset_fields(offsets)
    assert flat == ["words/0", "120", "words/1", "98", "clicks.v2/3", "0"]
    raw = {k.encode(): v.encode() for k, v in zip(flat[::2], flat[1::2], strict=True)}
    assert parse_record({b"txid": b"7", **raw}) == (7, offsets)
    assert parse_record({}) == (None, {})


@pytest.mark.parametrize("offsets", [
    {"bad topic": {0: 1}}, {"t": {-1: 1}}, {"t": {0: -5}}, {"t": {"0": 1}}, {"t": {0: 1.5}},
])
def test_bad_offsets_are_refused(offsets) -> None:
    with pytest.raises(SinkError, match="offsets"):
        offset_fields(offsets)
