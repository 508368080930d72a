"""JsonSerde: typed and text modes, round trips, failure reasons, batch independence."""

from __future__ import annotations

import datetime as dt
import json
import pickle

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm.errors import ConfigError, SerdeError
from serdes import JsonSerde

SCHEMA = {"key": str, "ts": "timestamp-ms", "value": int, "score": float, "ok": "bool"}
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TS = st.integers(min_value=-(2**40), max_value=2**42)  # within datetime's range
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
ROWS = st.tuples(st.text(max_size=20), TS, INT64, FLOATS, st.booleans())
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INT64 | FLOATS | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
slow = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _expected(row):
    key, ts, value, score, ok = row
    return {
        "key": key,
        "ts": EPOCH + dt.timedelta(milliseconds=ts),
        "value": value,
        "score": score,
        "ok": ok,
    }


@slow
@given(st.lists(ROWS, max_size=30))
def test_typed_round_trip(rows):
    serde = JsonSerde(SCHEMA)
    result = serde.deserialize_batch([serde.serialize(row) for row in rows])
    assert result.failures == []
    assert result.good == list(range(len(rows)))
    assert result.batch.to_pylist() == [_expected(row) for row in rows]


@slow
@given(st.lists(ROWS, min_size=1, max_size=10), st.sampled_from([None, 1, 2, "\t"]))
def test_whitespace_and_newlines_between_tokens_do_not_matter(rows, indent):
    serde = JsonSerde(SCHEMA)
    compact = serde.deserialize_batch([serde.serialize(row) for row in rows])
    pretty = [json.dumps(json.loads(serde.serialize(row)), indent=indent).encode() for row in rows]
    pretty = [b"\r\n " + p.replace(b"\n", b"\r\n") + b"\n" for p in pretty]
    assert serde.deserialize_batch(pretty).batch.to_pylist() == compact.batch.to_pylist()


@slow
@given(st.lists(JSON_VALUES, max_size=20))
def test_text_mode_round_trip_keeps_any_json_value(documents):
    serde = JsonSerde(field="doc")
    # a str is taken as JSON text, any other object is encoded
    values = [json.dumps(d) if isinstance(d, str) else d for d in documents]
    result = serde.deserialize_batch([serde.serialize([v]) for v in values])
    assert result.batch.schema == pa.schema([("doc", pa.string())])
    assert [json.loads(text) for text in result.batch.column("doc").to_pylist()] == documents


GOOD = b'{"key": "k1", "ts": 1700000000000, "value": 42}'
BAD = {
    b'{"key": "k", "ts": 1}': ("MissingField", "'value'"),
    b'{"key": "k", "ts": 1, "value": null}': ("MissingField", "'value'"),
    b'{"key": "k", "ts": 1, "value": "42"}': (
        "SchemaMismatch",
        "'value': expected int64, got string",
    ),
    b'{"key": "k", "ts": 1, "value": 4.5}': (
        "SchemaMismatch",
        "'value': expected int64, got number",
    ),
    b'{"key": 7, "ts": 1, "value": 1}': ("SchemaMismatch", "'key': expected string, got number"),
    b'{"key": "k", "ts": 1, "value": 99999999999999999999}': ("SchemaMismatch", "'value'"),
    b'{"key": "k", "ts": 1, "value": 1, "value": 2}': (
        "MalformedJSON",
        "'value' appears more than once",
    ),
    b'{"key": "k", "ts": 1, "value": 1': ("MalformedJSON", "invalid JSON"),
    b'{"key": "k"} {"key": "j"}': ("MalformedJSON", "Extra data"),
    b"[1, 2]": ("MalformedJSON", "expected a JSON object, got array"),
    b"null": ("MalformedJSON", "expected a JSON object, got null"),
    b'"text"': ("MalformedJSON", "expected a JSON object, got string"),
    b"": ("MalformedJSON", "empty value"),
    b" \n ": ("MalformedJSON", "empty value"),
    b'{"key": "\xff", "ts": 1, "value": 1}': ("MalformedJSON", "not valid UTF-8"),
    b'{"key": "a\nb", "ts": 1, "value": 1}': ("MalformedJSON", "invalid JSON"),
}


@pytest.mark.parametrize(("record", "reason"), BAD.items(), ids=[r.decode("latin-1") for r in BAD])
def test_bad_record_is_a_named_failure_and_its_neighbours_survive(record, reason):
    serde = JsonSerde({"key": str, "ts": int, "value": int})
    result = serde.deserialize_batch([GOOD, record, GOOD])
    assert result.good == [0, 2]
    assert result.batch.column("value").to_pylist() == [42, 42]
    [failure] = result.failures
    assert (failure.index, failure.error_type) == (1, reason[0])
    assert reason[1] in failure.message
    with pytest.raises(SerdeError, match=reason[0]):
        serde.deserialize(record)


RECORDS = st.one_of(
    st.builds(lambda r: JsonSerde(SCHEMA).serialize(r), ROWS),
    st.sampled_from(sorted(BAD)),
    st.binary(max_size=12),
    st.none(),
)


@slow
@given(st.lists(RECORDS, max_size=40))
def test_a_records_fate_does_not_depend_on_its_neighbours(records):
    serde = JsonSerde(SCHEMA, required=["key"])
    result = serde.deserialize_batch(records)
    assert len(result.good) + len(result.failures) == len(records)
    rows = dict(zip(result.good, result.batch.to_pylist(), strict=True))
    failed = {f.index: f.error_type for f in result.failures}
    for index, record in enumerate(records):
        alone = serde.deserialize_batch([record])
        if index in rows:
            assert alone.batch.to_pylist() == [rows[index]]
        else:
            assert [f.error_type for f in alone.failures] == [failed[index]]


def test_tombstones_are_null_rows_unless_fields_are_required():
    optional = JsonSerde({"key": str, "n": int}, required=[])
    result = optional.deserialize_batch([None, b'{"n": 1}', None])
    assert result.good == [0, 1, 2]
    assert result.batch.to_pylist() == [{"key": None, "n": None}, {"key": None, "n": 1}] + [
        {"key": None, "n": None}
    ]
    strict = JsonSerde({"key": str})
    [failure] = strict.deserialize_batch([None]).failures
    assert failure.error_type == "MissingField" and "tombstone" in failure.message
    assert JsonSerde().deserialize(None) == (None,)


def test_text_mode_rejects_invalid_json_and_keeps_the_original_text():
    serde = JsonSerde()
    result = serde.deserialize_batch([b' {"a": 1} ', b"{", b"NaN", b"\xff", b"42"])
    assert result.good == [0, 4]
    assert result.batch.column("value").to_pylist() == [' {"a": 1} ', "42"]
    assert {f.error_type for f in result.failures} == {"MalformedJSON"}


def test_timestamp_ms_reads_epoch_millis_as_utc_and_serializes_datetimes():
    serde = JsonSerde({"ts": "timestamp-ms"})
    [ts] = serde.deserialize(b'{"ts": 1700000000123}')
    assert ts == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert serde.arrow_schema().field("ts").type == pa.timestamp("ms", tz="UTC")
    assert serde.serialize([ts]) == b'{"ts":1700000000123}'
    with pytest.raises(SerdeError, match="expects timestamp-ms"):
        serde.serialize([dt.datetime(2023, 1, 1)])  # naive: ambiguous


def test_serialize_checks_types_and_required_fields():
    serde = JsonSerde({"key": str, "n": "int32"}, required=["key"])
    assert serde.serialize(["k", None]) == b'{"key":"k"}'
    with pytest.raises(SerdeError, match="required field 'key' is None"):
        serde.serialize([None, 1])
    with pytest.raises(SerdeError, match="field 'n' expects int32, got int"):
        serde.serialize(["k", 2**40])
    with pytest.raises(SerdeError, match="expected 2 values"):
        serde.serialize(["k"])
    with pytest.raises(SerdeError, match="not JSON text"):
        JsonSerde().serialize(["{not json"])
    with pytest.raises(SerdeError, match="cannot be written as JSON"):
        JsonSerde().serialize([float("nan")])


def test_configuration_errors_name_the_problem():
    with pytest.raises(ConfigError, match="field 'x' has unsupported type 'decimal'"):
        JsonSerde({"x": "decimal"})
    with pytest.raises(ConfigError, match=r"required fields \['y'\] are not in the schema"):
        JsonSerde({"x": int}, required=["y"])
    with pytest.raises(ConfigError, match="needs a schema"):
        JsonSerde(required=["x"])
    assert JsonSerde({"x": pa.int64(), "y": "long"}).arrow_schema().types == [pa.int64()] * 2


def test_pickled_serde_behaves_the_same():
    serde = JsonSerde({"key": str, "ts": "timestamp-ms"}, required=["key"])
    clone = pickle.loads(pickle.dumps(serde))
    assert clone == serde and clone.arrow_schema() == serde.arrow_schema()
    data = [GOOD, b'{"ts": 1}']
    assert clone.deserialize_batch(data).failures == serde.deserialize_batch(data).failures


def test_large_batch_with_scattered_bad_records_keeps_order():
    serde = JsonSerde({"key": str, "ts": int, "value": int})
    records = [b'{"key": "k%d", "ts": %d, "value": %d}' % (i, i, i) for i in range(5000)]
    bad = {7, 1234, 1235, 4999, 3000}
    for i in bad:
        records[i] = b'{"key": "k", "ts": 1, "value": 1.5}' if i % 2 else b'{"key": 1}'
    result = serde.deserialize_batch(records)
    assert [f.index for f in result.failures] == sorted(bad)
    assert result.good == [i for i in range(5000) if i not in bad]
    assert result.batch.column("value").to_pylist() == result.good
