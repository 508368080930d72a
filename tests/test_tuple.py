import pytest

from kstorm import FieldError, Fields, TopologyError, Tuple, Values


def make():
    return Tuple(["cat", 2, 1.5, True, b"x"], Fields("word", "count", "ratio", "flag", "raw"),
                 "split", "default", ("events", 3, 42))


def test_access_by_position_and_name():
    t = make()
    assert t.get_value(0) == "cat"
    assert t.get_value_by_field("count") == 2
    assert t.get_string(0) == "cat"
    assert t.get_integer(1) == 2
    assert t.get_long(1) == 2
    assert t.get_double(2) == 1.5
    assert t.get_boolean(3) is True
    assert t.get_binary(4) == b"x"
    assert t.get_string_by_field("word") == "cat"
    assert t.get_integer_by_field("count") == 2
    assert t.select(Fields("count", "word")) == [2, "cat"]
    assert t.contains("word") and not t.contains("nope")
    assert len(t) == 5


def test_metadata():
    t = make()
    assert t.fields == Fields("word", "count", "ratio", "flag", "raw")
    assert t.get_fields().to_list() == ["word", "count", "ratio", "flag", "raw"]
    assert t.source_component == t.get_source_component() == "split"
    assert t.source_stream == t.get_source_stream_id() == "default"
    assert t.message_id == t.get_message_id() == ("events", 3, 42)


def test_missing_field_names_the_source():
    with pytest.raises(FieldError, match="from 'split' stream 'default' has no field 'wrd'"):
        make().get_value_by_field("wrd")


def test_wrong_type_is_a_type_error_naming_the_field():
    with pytest.raises(TypeError, match="field 'word' of tuple from 'split' is str"):
        make().get_integer(0)
    with pytest.raises(TypeError, match="field 'flag'"):
        make().get_integer(3)  # bool is not an integer field


def test_fields():
    f = Fields("a", "b")
    assert f.index("b") == 1 and list(f) == ["a", "b"] and "a" in f
    assert Fields(["a", "b"]) == f
    with pytest.raises(FieldError):
        f.index("c")
    with pytest.raises(TopologyError, match="duplicate field"):
        Fields("a", "a")
    with pytest.raises(TopologyError, match="non-empty strings"):
        Fields("")


def test_values_is_a_list():
    assert Values("a", 1) == ["a", 1]


def test_storm_tuple_and_fields_methods():
    # Storm's ITuple / Fields methods a ported bolt calls, by their snake_case names.
    t = Tuple(["cat", 2, 1.5], Fields("word", "count", "ratio"), "split")
    assert t.size() == 3
    assert t.field_index("ratio") == 2
    assert t.get_short_by_field("count") == t.get_byte_by_field("count") == 2
    assert t.get_float_by_field("ratio") == 1.5
    with pytest.raises(FieldError, match="'wrd'"):
        t.field_index("wrd")
    f = Fields("word", "count")
    assert f.size() == 2 and f.get(1) == "count" and f.field_index("count") == 1
    assert f.contains("word") and not f.contains("nope")
    assert f.select(Fields("count", "word"), ["cat", 2]) == [2, "cat"]
    with pytest.raises(FieldError):
        f.field_index("nope")
