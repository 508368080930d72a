"""What the Kafka sink writes: record keys and values, its bookkeeping, its error kinds."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException

from kstorm.errors import SinkError
from kstorm.tuple import Fields, Tuple
from serdes import AvroSerde, BytesSerde, JsonSerde, StringSerde
from sinks.kafka._book import (
    CHUNK,
    assemble_state,
    commit_record,
    marker_offset,
    state_records,
    txid_of_marker,
)
from sinks.kafka._records import RecordEncoder
from sinks.kafka._txn import KafkaCallError, as_call_error, call, classify

AVRO_SCHEMA = {"type": "record", "name": "Out", "fields": [
    {"name": "word", "type": "string"}, {"name": "count", "type": "long"}]}


def tup(**values):
    return Tuple(list(values.values()), Fields(*values), "count")


def encoder(serde=None, key=None, fields=None):
    return RecordEncoder(serde or JsonSerde(), key=key, fields=fields, where="KafkaSink('out')")


# -- values -------------------------------------------------------------------------------


def test_default_json_writes_an_object_of_every_field_in_tuple_order():
    _, value = encoder()(tup(word="storm", count=3, ok=True))
    assert value == b'{"word":"storm","count":3,"ok":true}'


def test_chosen_fields_are_the_only_ones_written():
    _, value = encoder(fields=["count"])(tup(word="storm", count=3))
    assert json.loads(value) == {"count": 3}


def test_a_serde_with_field_names_takes_them_by_name():
    serde = AvroSerde(AVRO_SCHEMA)
    _, value = encoder(serde)(tup(count=7, extra="x", word="spark"))
    assert serde.deserialize(value) == ("spark", 7)
    _, typed = encoder(JsonSerde({"word": str, "count": int}))(tup(count=2, word="a"))
    assert json.loads(typed) == {"word": "a", "count": 2}


def test_other_serdes_take_the_values_in_order():
    _, value = encoder(StringSerde(), fields=["text"])(tup(n=1, text="hello"))
    assert value == b"hello"
    _, raw = encoder(BytesSerde())(tup(payload=b"\x00\x01"))
    assert raw == b"\x00\x01"


def test_a_value_the_serde_refuses_fails_the_batch_naming_the_tuple():
    expected = r"KafkaSink\('out'\): cannot serialize tuple.*'count': 'three'"
    with pytest.raises(SinkError, match=expected):
        encoder(JsonSerde({"word": str, "count": int}))(tup(word="a", count="three"))
    with pytest.raises(SinkError, match="cannot serialize"):
        encoder(StringSerde())(tup(a="x", b="y"))  # two values for a one-field serde


def test_a_missing_field_names_the_tuple_source_and_its_fields():
    with pytest.raises(SinkError, match=r"tuple from 'count' has no field 'total'.*\['word'\]"):
        encoder(fields=["total"])(tup(word="a"))


# -- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ("storm", b"storm"), (b"\xff", b"\xff"), (42, b"42"), (None, None), ("ü", "ü".encode()),
])
def test_a_key_field_becomes_bytes(value, expected):
    key, _ = encoder(key="k", fields=["n"])(tup(k=value, n=1))
    assert key == expected


def test_no_key_means_none():
    assert encoder()(tup(word="a"))[0] is None


def test_a_key_function_may_return_str_bytes_or_none():
    assert encoder(key=lambda t: f"{t.values[0]}-{t.values[1]}")(tup(a="x", b=2))[0] == b"x-2"
    assert encoder(key=lambda t: b"raw")(tup(a="x"))[0] == b"raw"
    assert encoder(key=lambda t: None)(tup(a="x"))[0] is None


def test_a_bad_key_function_fails_the_batch_clearly():
    with pytest.raises(SinkError, match="key function must return bytes, str or None, got int"):
        encoder(key=lambda t: 3)(tup(a="x"))
    with pytest.raises(SinkError, match="key function raised.*ZeroDivisionError"):
        encoder(key=lambda t: 1 / 0)(tup(a="x"))


# -- bookkeeping --------------------------------------------------------------------------


def test_the_marker_stores_txid_plus_one():
    assert [marker_offset(t) for t in (0, 1, 41)] == [1, 2, 42]
    assert [txid_of_marker(o) for o in (None, 0, -1001, 1, 42)] == [None, None, None, 0, 41]


def test_the_commit_record_holds_txid_and_offsets():
    key, value, headers = commit_record(5, {"clicks": {0: 12}})
    assert key == b"commit" and headers == [("kstorm.txid", b"5")]
    assert json.loads(value) == {"txid": 5, "offsets": {"clicks": {"0": 12}}}


def test_state_round_trips_through_chunks():
    big = bytes(range(256)) * (CHUNK // 128)  # two chunks
    state = {"window:agg": big, "window:empty": b"", "window:small": b"abc"}
    records = state_records(9, state)
    assert len(records) == 4
    assert assemble_state([(k, v, h) for k, v, h in records], 9) == state
    assert assemble_state([(k, v, h) for k, v, h in records], 8) == {}


def test_state_of_an_attempt_that_aborted_before_the_committed_one_is_ignored():
    aborted = state_records(4, {"window:agg": b"aborted attempt"})
    older = state_records(3, {"window:agg": b"txid 3"})
    committed = state_records(4, {"window:agg": b"committed attempt"})
    later = state_records(5, {"window:agg": b"txid 5 (aborted: txid 4 is the last commit)"})
    log = [*older, (b"commit", b"{}", []), *aborted, *committed, *later]
    assert assemble_state(log, 4) == {"window:agg": b"committed attempt"}
    assert assemble_state(log, 3) == {"window:agg": b"txid 3"}


def test_an_incomplete_chunk_set_is_not_state():
    big = bytes(CHUNK + 10)
    first, _ = state_records(2, {"window:agg": big})
    assert assemble_state([first], 2) == {}


# -- error kinds --------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "kind"), [
    (KafkaError(KafkaError._FENCED, "fenced", fatal=True), "fenced"),
    (KafkaError(KafkaError.PRODUCER_FENCED, "fenced", txn_requires_abort=True), "fenced"),
    (KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "old epoch"), "fenced"),
    (KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "acl", fatal=True), "fatal"),
    (KafkaError(KafkaError._STATE, "oops", txn_requires_abort=True), "abortable"),
    (KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True), "retriable"),
    (KafkaError(KafkaError._INVALID_ARG, "bad"), "error"),
])
def test_classify(error, kind):
    assert classify(error) == kind
    assert as_call_error(KafkaException(error), "commit").kind == kind


def test_call_retries_retriable_errors_until_the_deadline():
    now = [0.0]
    attempts = []

    def flaky(left):
        attempts.append(left)
        now[0] += 1.0
        if len(attempts) < 3:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True))
        return "done"

    assert call("commit", flaky, 10.0, clock=lambda: now[0]) == "done"
    assert attempts == [10.0, 9.0, 8.0]

    def hopeless(left):
        now[0] += 4.0
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True))

    with pytest.raises(KafkaCallError, match="commit failed: _TIMED_OUT") as info:
        call("commit", hopeless, 10.0, clock=lambda: now[0])
    assert info.value.kind == "retriable"


def test_call_does_not_retry_other_errors():
    def fenced(left):
        raise KafkaException(KafkaError(KafkaError._FENCED, "newer producer", fatal=True))

    with pytest.raises(KafkaCallError, match="newer producer") as info:
        call("commit", fenced, 10.0)
    assert info.value.kind == "fenced" and isinstance(info.value, SinkError)
