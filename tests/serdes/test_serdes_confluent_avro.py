"""ConfluentAvroSerde against the in-process mock registry: wire format, evolution, errors."""

from __future__ import annotations

import pickle
import socket
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm.errors import ConfigError, MissingDependencyError, SerdeError
from serdes import ConfluentAvroSerde

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
V2 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int", "default": 1},
    ],
}
ORDERS = st.tuples(st.integers(-(2**63), 2**63 - 1), st.text(max_size=10), st.none() | st.text())


def registry() -> str:
    return f"mock://{uuid.uuid4().hex}"  # a fresh in-process registry per test


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ORDERS, max_size=20))
def test_round_trip_in_the_confluent_wire_format(orders):
    serde = ConfluentAvroSerde(registry(), subject="orders-value", reader_schema=V1)
    encoded = [serde.serialize(list(order)) for order in orders]
    assert {data[:5] for data in encoded} <= {b"\x00\x00\x00\x00\x01"}  # magic, id 1
    result = serde.deserialize_batch(encoded)
    assert result.failures == []
    assert [tuple(row.values()) for row in result.batch.to_pylist()] == orders


def test_schema_id_is_the_registered_id_and_header_is_five_bytes():
    url = registry()
    serde = ConfluentAvroSerde(url, subject="orders-value", reader_schema=V1)
    data = serde.serialize([1, "pen", None])
    registered = serde._registry().get_latest_version("orders-value")
    assert data[:5] == b"\x00" + registered.schema_id.to_bytes(4, "big")


def test_old_records_are_read_into_the_subjects_latest_schema():
    url = registry()
    old_writer = ConfluentAvroSerde(url, subject="orders-value", reader_schema=V1)
    old = [old_writer.serialize([i, f"item{i}", "n"]) for i in range(3)]
    new_writer = ConfluentAvroSerde(url, subject="orders-value", reader_schema=V2)
    new = new_writer.serialize([9, "cup", 4])
    reader = ConfluentAvroSerde(url, subject="orders-value")  # latest version: V2
    assert reader.fields() == ["id", "item", "qty"]
    result = reader.deserialize_batch([*old, new])
    assert result.batch.to_pylist() == [
        {"id": 0, "item": "item0", "qty": 1},
        {"id": 1, "item": "item1", "qty": 1},
        {"id": 2, "item": "item2", "qty": 1},
        {"id": 9, "item": "cup", "qty": 4},
    ]
    assert int.from_bytes(old[0][1:5], "big") != int.from_bytes(new[1:5], "big")


def test_bad_records_are_named_failures():
    serde = ConfluentAvroSerde(registry(), subject="orders-value", reader_schema=V1)
    good = serde.serialize([1, "pen", None])
    unknown_id = b"\x00" + (4242).to_bytes(4, "big") + good[5:]
    values = [good, b"\x01" + good[1:], unknown_id, b"\x00\x00", b"", good[:-1], good + b"!"]
    result = serde.deserialize_batch(values)
    assert result.good == [0]
    assert [(f.index, f.error_type) for f in result.failures] == [
        (1, "BadMagicByte"),
        (2, "UnknownSchemaId"),
        (3, "Truncated"),
        (4, "Truncated"),
        (5, "Truncated"),
        (6, "SchemaMismatch"),
    ]
    assert "4242" in result.failures[1].message


def test_a_schema_of_another_type_is_a_schema_mismatch():
    from confluent_kafka.schema_registry import Schema

    url = registry()
    serde = ConfluentAvroSerde(url, subject="orders-value", reader_schema=V1)
    json_id = serde._registry().register_schema("other", Schema('{"type": "object"}', "JSON"))
    [failure] = serde.deserialize_batch([b"\x00" + json_id.to_bytes(4, "big") + b"{}"]).failures
    assert failure.error_type == "SchemaMismatch" and "JSON" in failure.message


def test_unreachable_registry_raises_instead_of_failing_records():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connection refused
    serde = ConfluentAvroSerde(
        f"http://127.0.0.1:{port}", reader_schema=V1, registry_config={"max.retries": 0}
    )
    with pytest.raises(SerdeError, match="cannot fetch schema id 1"):
        serde.deserialize_batch([b"\x00\x00\x00\x00\x01\x02"])


def test_serialize_needs_a_registered_schema_or_a_subject():
    url = registry()
    no_register = ConfluentAvroSerde(url, subject="s-value", reader_schema=V1, auto_register=False)
    with pytest.raises(SerdeError, match="cannot register or find the schema under 's-value'"):
        no_register.serialize([1, "pen", None])
    ConfluentAvroSerde(url, subject="s-value", reader_schema=V1).serialize([1, "pen", None])
    assert no_register.serialize([1, "pen", None])[0] == 0  # registered now: found
    with pytest.raises(SerdeError, match="needs subject="):
        ConfluentAvroSerde(url, reader_schema=V1).serialize([1, "pen", None])


def test_configuration_errors():
    with pytest.raises(ConfigError, match="give reader_schema= or subject="):
        ConfluentAvroSerde("mock://x")
    with pytest.raises(ConfigError, match="must be a URL"):
        ConfluentAvroSerde("localhost", subject="s")
    with pytest.raises(ConfigError, match="not in registry_config"):
        ConfluentAvroSerde("mock://x", subject="s", registry_config={"url": "mock://y"})
    with pytest.raises(SerdeError, match="no latest schema for subject 'missing'"):
        ConfluentAvroSerde(registry(), subject="missing").fields()


def test_pickle_keeps_the_resolved_reader_schema_and_drops_the_client():
    url, config = registry(), {"basic.auth.user.info": "user:secret"}
    writer = ConfluentAvroSerde(url, subject="o-value", reader_schema=V1, registry_config=config)
    data = writer.serialize([1, "a", None])
    serde = ConfluentAvroSerde(url, subject="o-value", registry_config=config)
    state = serde.__getstate__()  # resolves the subject's latest schema, on the "driver"
    assert state["reader"] is not None and "_client" not in state
    assert "secret" not in repr(serde)
    clone = pickle.loads(pickle.dumps(serde))
    assert clone._client is None and clone.fields() == ["id", "item", "note"]
    assert clone.deserialize(data) == (1, "a", None)


def test_missing_registry_client_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "confluent_kafka.schema_registry", None)
    serde = ConfluentAvroSerde(registry(), subject="s-value")
    with pytest.raises(MissingDependencyError, match=r"pip install kstorm\[avro\]"):
        serde.fields()
