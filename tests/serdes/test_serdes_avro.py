"""AvroSerde: round trips over every Avro type, schema evolution, Arrow typing, bad input."""

from __future__ import annotations

import datetime as dt
import io
import json
import pickle
import sys

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm.errors import ConfigError, MissingDependencyError, SerdeError
from serdes import AvroSerde, Serde

POINT = {
    "type": "record",
    "name": "Point",
    "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "int"}],
}
EVENT = {
    "type": "record",
    "name": "Event",
    "namespace": "test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "score", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "raw", "type": "bytes"},
        {"name": "opt", "type": ["null", "string"]},
        {"name": "choice", "type": ["null", "long", "string", POINT]},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Inner",
                "fields": [
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                    {"name": "counts", "type": {"type": "map", "values": "long"}},
                    {"name": "where", "type": ["null", "Point"]},
                ],
            },
        },
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3},
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
POINTS = st.fixed_dictionaries({"x": INT32, "y": INT32})
MEMBERS = ["member0", "member1", "member2"]
CHOICES = st.one_of(
    st.none(),
    *[
        strategy.map(lambda v, i=i: {m: v if j == i else None for j, m in enumerate(MEMBERS)})
        for i, strategy in enumerate([INT64, st.text(max_size=8), POINTS])
    ],
)
MILLIS = st.integers(-(2**40), 2**42).map(
    lambda ms: dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
)
PRICES = st.decimals(
    min_value=-(10**8), max_value=10**8, places=3, allow_nan=False, allow_infinity=False
)
EVENTS = st.fixed_dictionaries(
    {
        "id": INT64,
        "name": st.text(max_size=20),
        "score": st.floats(allow_nan=False),
        "ratio": st.floats(width=32, allow_nan=False),
        "flag": st.booleans(),
        "small": INT32,
        "raw": st.binary(max_size=16),
        "opt": st.none() | st.text(max_size=5),
        "choice": CHOICES,
        "inner": st.fixed_dictionaries(
            {
                "tags": st.lists(st.text(max_size=4), max_size=4),
                "counts": st.dictionaries(st.text(max_size=4), INT64, max_size=4).map(
                    lambda d: list(d.items())
                ),
                "where": st.none() | POINTS,
            }
        ),
        "kind": st.sampled_from(["A", "B", "C"]),
        "digest": st.binary(min_size=4, max_size=4),
        "at": MILLIS,
        "price": PRICES,
        "day": st.dates(),
        "uid": st.uuids().map(str),
    }
)
slow = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@slow
@given(st.lists(EVENTS, max_size=15))
def test_round_trip_of_every_avro_type(events):
    serde = AvroSerde(EVENT)
    encoded = [serde.serialize([event[name] for name in serde.fields()]) for event in events]
    result = serde.deserialize_batch(encoded)
    assert result.failures == [] and result.good == list(range(len(events)))
    assert result.batch.to_pylist() == events
    for data in encoded:
        assert serde.serialize(serde.deserialize(data)) == data


@slow
@given(EVENTS)
def test_bytes_are_exactly_what_fastavro_writes_and_reads(event):
    serde = AvroSerde(EVENT)
    data = serde.serialize([event[name] for name in serde.fields()])
    decoded = fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(EVENT))
    assert decoded["id"] == event["id"] and decoded["price"] == event["price"]
    assert decoded["inner"]["counts"] == dict(event["inner"]["counts"])
    sink = io.BytesIO()
    fastavro.schemaless_writer(sink, fastavro.parse_schema(EVENT), decoded)
    assert sink.getvalue() == data


def test_arrow_types_follow_the_documented_mapping():
    types = dict(zip(AvroSerde(EVENT).fields(), AvroSerde(EVENT).arrow_schema().types, strict=True))
    point = pa.struct([("x", pa.int32()), ("y", pa.int32())])
    assert types["small"] == pa.int32() and types["ratio"] == pa.float32()
    assert types["opt"] == pa.string()
    assert types["choice"] == pa.struct(
        [("member0", pa.int64()), ("member1", pa.string()), ("member2", point)]
    )
    assert types["inner"] == pa.struct(
        [
            ("tags", pa.list_(pa.string())),
            ("counts", pa.map_(pa.string(), pa.int64())),
            ("where", point),
        ]
    )
    assert types["kind"] == pa.string() and types["digest"] == pa.binary(4)
    assert types["at"] == pa.timestamp("ms", tz="UTC")
    assert types["price"] == pa.decimal128(12, 3)
    assert types["day"] == pa.date32() and types["uid"] == pa.string()


V1 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "legacy", "type": "string"},
    ],
}
V2 = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "long"},  # promoted
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "tier", "type": "string", "default": "free"},
        {
            "name": "since",
            "type": {"type": "long", "logicalType": "timestamp-millis"},
            "default": 0,
        },
    ],
}


@slow
@given(st.lists(st.tuples(st.text(max_size=10), INT32, st.text(max_size=3)), max_size=10))
def test_newer_reader_schema_reads_old_records_with_defaults(users):
    old = AvroSerde(V1)
    encoded = [old.serialize(list(user)) for user in users]
    new = AvroSerde(V1, reader_schema=V2)
    assert new.fields() == ["name", "age", "email", "tier", "since"]
    assert new.arrow_schema().field("age").type == pa.int64()
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    expected = [
        {"name": n, "age": a, "email": None, "tier": "free", "since": epoch} for n, a, _ in users
    ]
    assert new.deserialize_batch(encoded).batch.to_pylist() == expected


def test_reader_schema_from_an_avsc_file(tmp_path):
    path = tmp_path / "user.avsc"
    path.write_text(json.dumps(V2))
    serde = AvroSerde(V1, reader_schema=str(path))
    assert serde.deserialize(AvroSerde(V1).serialize(["ada", 36, "x"]))[:2] == ("ada", 36)


def test_incompatible_reader_schema_makes_failures_not_exceptions():
    needs_default = {
        "type": "record",
        "name": "User",
        "fields": [{"name": "name", "type": "string"}, {"name": "email", "type": "string"}],
    }
    data = AvroSerde(V1).serialize(["ada", 36, "x"])
    result = AvroSerde(V1, reader_schema=needs_default).deserialize_batch([data, data])
    assert result.good == [] and [f.error_type for f in result.failures] == ["SchemaMismatch"] * 2
    assert "email" in result.failures[0].message


def test_bad_bodies_are_named_failures():
    serde = AvroSerde(V1)
    data = serde.serialize(["ada", 36, "legacy"])
    long_value = io.BytesIO()
    fastavro.schemaless_writer(long_value, {"type": "long"}, 2**40)
    as_int = AvroSerde({"type": "int"})
    result = serde.deserialize_batch([data, data[:-2], data + b"\x00", b"", None])
    assert result.good == [0, 4]
    assert [(f.index, f.error_type) for f in result.failures] == [
        (1, "Truncated"),
        (2, "SchemaMismatch"),
        (3, "Truncated"),
    ]
    assert "1 bytes left over" in result.failures[1].message
    [overflow] = as_int.deserialize_batch([long_value.getvalue()]).failures
    assert overflow.error_type == "SchemaMismatch"
    assert result.batch.to_pylist()[1] == {"name": None, "age": None, "legacy": None}


def test_non_record_schema_is_one_value_field():
    serde = AvroSerde("string")
    assert serde.fields() == ["value"] and serde.arrow_schema().types == [pa.string()]
    assert serde.deserialize(serde.serialize(["héllo"])) == ("héllo",)


def test_serialize_errors_name_the_problem():
    serde = AvroSerde(V1)
    with pytest.raises(SerdeError, match="do not fit the writer schema"):
        serde.serialize(["ada", "not a number", "x"])
    with pytest.raises(SerdeError, match="expected 3 values"):
        serde.serialize(["ada"])


def test_bad_schemas_are_config_errors():
    with pytest.raises(ConfigError, match="invalid schema"):
        AvroSerde({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]})
    recursive = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    with pytest.raises(ConfigError, match="recursive record 'Node'"):
        AvroSerde(recursive)
    with pytest.raises(ConfigError, match="cannot read schema file"):
        AvroSerde("/no/such/schema.avsc")


def test_missing_fastavro_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastavro", None)
    with pytest.raises(MissingDependencyError, match=r"pip install kstorm\[avro\]"):
        AvroSerde({"type": "record", "name": "Fresh", "fields": [{"name": "z", "type": "int"}]})


def test_pickling_drops_parsed_schemas_and_keeps_behaviour():
    serde = AvroSerde(V1, reader_schema=V2)
    serde.deserialize_batch([])  # parse now
    state = serde.__getstate__()
    assert set(state) == {"writer", "reader"}
    clone = pickle.loads(pickle.dumps(serde))
    assert isinstance(clone, Serde) and clone == serde
    data = AvroSerde(V1).serialize(["ada", 36, "x"])
    assert clone.deserialize(data) == serde.deserialize(data)


def test_union_of_several_records_keeps_each_values_branch():
    a = {"type": "record", "name": "A", "fields": [{"name": "n", "type": "int"}]}
    b = {"type": "record", "name": "B", "fields": [{"name": "n", "type": "int"}]}
    serde = AvroSerde({"type": "record", "name": "R", "fields": [{"name": "u", "type": [a, b]}]})
    values = [{"member0": None, "member1": {"n": 2}}, {"member0": {"n": 1}, "member1": None}]
    encoded = [serde.serialize([v]) for v in values]
    assert encoded[0][0] == 2 and encoded[1][0] == 0  # union index 1 then 0 (zigzag)
    assert serde.deserialize_batch(encoded).batch.column("u").to_pylist() == values
