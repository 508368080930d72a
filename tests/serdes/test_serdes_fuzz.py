"""Fuzz every deserializer: any bytes end as a row or a DecodeFailure, never an exception."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serdes import AvroSerde, BytesSerde, ConfluentAvroSerde, JsonSerde, StringSerde
from serdes.base import DecodeResult

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

AVRO = {
    "type": "record",
    "name": "Fuzz",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "int"}},
        {"name": "choice", "type": ["null", "int", "string", "boolean"]},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
        },
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
AVRO_ROW = [
    7,
    "ü",
    ["a", "b"],
    [("x", 1)],
    {"member0": None, "member1": "s", "member2": None},
    "B",
    dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    dt.date(2024, 1, 1),
    decimal.Decimal("12.34"),
    str(uuid.UUID(int=1)),
]
SERDES = {
    "bytes": BytesSerde(),
    "string": StringSerde(),
    "string-ascii": StringSerde(encoding="ascii"),
    "json-text": JsonSerde(),
    "json-typed": JsonSerde({"key": str, "ts": "timestamp-ms", "value": int, "x": float}),
    "json-optional": JsonSerde({"key": str, "ok": bool}, required=[]),
    "avro": AvroSerde(AVRO),
    "avro-int": AvroSerde("int"),
    "confluent-avro": ConfluentAvroSerde("mock://fuzz", subject="fuzz-value", reader_schema=AVRO),
}
VALID = [
    b'{"key": "k1", "ts": 1700000000000, "value": 42, "x": 1.5}',
    json.dumps({"key": "ü", "ts": 0, "value": -1, "x": 0, "ok": True}, indent=2).encode(),
    b'{"key": "k", "ok": false}',
    b"[1, 2, 3]",
    SERDES["avro"].serialize(AVRO_ROW),
    SERDES["confluent-avro"].serialize(AVRO_ROW),
]


def truncations(data: bytes):
    return st.integers(0, len(data)).map(lambda cut: data[:cut])


FUZZ = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.sampled_from(VALID).flatmap(truncations),
    st.sampled_from(VALID).flatmap(
        lambda v: st.tuples(st.integers(0, len(v) - 1), st.integers(0, 255)).map(
            lambda p: v[: p[0]] + bytes([p[1]]) + v[p[0] + 1 :]
        )
    ),
)


def assert_accounted(result: DecodeResult, n: int, schema: pa.Schema) -> None:
    """The invariants the Kafka spout relies on."""
    failed = [f.index for f in result.failures]
    assert len(result.good) + len(result.failures) == n
    assert sorted(result.good + failed) == list(range(n))
    assert result.good == sorted(result.good)
    assert result.batch.num_rows == len(result.good)
    assert result.batch.schema == schema
    result.batch.validate(full=True)  # e.g. every string column is valid UTF-8
    assert all(f.error_type and f.message for f in result.failures)


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(FUZZ, max_size=25))
def test_every_input_is_a_row_or_a_failure(values):
    for serde in SERDES.values():
        result = serde.deserialize_batch(values)
        assert_accounted(result, len(values), serde.arrow_schema())


def test_all_bad_batch_is_all_failures():
    values = [b"\xff" * i for i in range(1, 60)]
    for name, serde in SERDES.items():
        result = serde.deserialize_batch(values)
        assert_accounted(result, len(values), serde.arrow_schema())
        if name != "bytes":
            assert len(result.failures) == len(values), name


def test_values_of_other_types_are_failures_or_rows_not_exceptions():
    values = [bytearray(b'{"key": "k", "ok": true}'), memoryview(b"{"), 42, "text", None]
    for serde in SERDES.values():
        result = serde.deserialize_batch(values)
        assert_accounted(result, len(values), serde.arrow_schema())
        assert 2 not in result.good and 3 not in result.good


def test_empty_batch():
    for serde in SERDES.values():
        result = serde.deserialize_batch([])
        assert_accounted(result, 0, serde.arrow_schema())
