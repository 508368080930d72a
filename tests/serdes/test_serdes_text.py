"""BytesSerde and StringSerde: round trips, tombstones, bad bytes, config errors."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstorm.errors import ConfigError, SerdeError
from serdes import BytesSerde, Serde, StringSerde

maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))


@given(st.lists(maybe_bytes, max_size=40))
def test_bytes_batch_round_trip(values):
    serde = BytesSerde(field="payload")
    result = serde.deserialize_batch(values)
    assert result.good == list(range(len(values)))
    assert result.failures == []
    assert result.batch.schema == pa.schema([("payload", pa.binary())])
    assert result.batch.column("payload").to_pylist() == values
    for value in values:
        if value is not None:
            assert serde.serialize(serde.deserialize(value)) == value


@given(st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=40))
def test_string_batch_round_trip_utf8(texts):
    serde = StringSerde()
    values = [None if t is None else serde.serialize([t]) for t in texts]
    result = serde.deserialize_batch(values)
    assert result.good == list(range(len(texts)))
    assert result.batch.column("value").to_pylist() == texts


@given(st.text(alphabet=st.characters(max_codepoint=255), max_size=40))
def test_string_round_trip_other_encoding(text):
    serde = StringSerde(field="line", encoding="latin-1")
    data = serde.serialize([text])
    assert data == text.encode("latin-1")
    assert serde.deserialize(data) == (text,)
    assert serde.deserialize_batch([data]).batch.column("line").to_pylist() == [text]


def test_invalid_utf8_is_a_decode_failure_and_the_rest_survive():
    serde = StringSerde()
    result = serde.deserialize_batch([b"ok", b"\xff\xfe", None, "é".encode(), b"\xed\xa0\x80"])
    assert result.good == [0, 2, 3]
    assert result.batch.column("value").to_pylist() == ["ok", None, "é"]
    assert [(f.index, f.error_type) for f in result.failures] == [
        (1, "DecodeError"),
        (4, "DecodeError"),
    ]
    assert "utf-8" in result.failures[0].message
    with pytest.raises(SerdeError, match="not valid utf-8"):
        serde.deserialize(b"\xff")


def test_tombstone_is_a_null_field():
    assert StringSerde().deserialize(None) == (None,)
    assert BytesSerde().deserialize(None) == (None,)


def test_serialize_rejects_wrong_types_and_arity():
    with pytest.raises(SerdeError, match="must be str, got int"):
        StringSerde().serialize([5])
    with pytest.raises(SerdeError, match="expected 1 values"):
        StringSerde().serialize(["a", "b"])
    with pytest.raises(SerdeError, match="cannot be encoded as ascii"):
        StringSerde(encoding="ascii").serialize(["é"])
    with pytest.raises(SerdeError, match="must be bytes, got str"):
        BytesSerde().serialize(["text"])


def test_bad_configuration_is_rejected_on_construction():
    with pytest.raises(ConfigError, match="unknown text encoding 'no-such-codec'"):
        StringSerde(encoding="no-such-codec")
    with pytest.raises(ConfigError, match="non-empty string"):
        BytesSerde(field="")


def test_serdes_are_picklable_declarations_that_satisfy_the_protocol():
    for serde in (BytesSerde("b"), StringSerde("s", "latin-1")):
        assert isinstance(serde, Serde)
        clone = pickle.loads(pickle.dumps(serde))
        assert clone == serde
        assert clone.fields() == serde.fields()
    assert StringSerde(encoding="UTF8").encoding == "utf-8"
