"""KafkaSpout declaration: validation, fields, schema, transport; record batches from messages."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pyarrow as pa
import pytest

from kstorm._kafka.fetch import to_record_batch
from kstorm.component import OutputFieldsDeclarer
from kstorm.errors import ConfigError
from kstorm.kafka.spout import METADATA_FIELDS, KafkaSpout
from serdes.json import JsonSerde
from serdes.string import StringSerde


@dataclass
class FakeMessage:
    """What the executor reads from confluent-kafka's ``Message``."""

    _offset: int
    _value: bytes | None
    _key: bytes | None = None
    _ts: tuple[int, int] = (1, 1_700_000_000_000)
    _headers: list[tuple[str, bytes]] | None = None

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def error(self) -> None:
        return None


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({}, "exactly one of topics or pattern"),
        ({"topics": "a", "pattern": "a.*"}, "exactly one of topics or pattern"),
        ({"topics": []}, "topics"),
        ({"topics": ["a", "a"]}, "duplicate topic"),
        ({"pattern": "("}, "pattern"),
        ({"topics": "a", "starting_offsets": "group"}, "group_id"),
        ({"topics": "a", "starting_offsets": "newest"}, "starting_offsets"),
        ({"topics": "a", "starting_offsets": {"b": {0: 1}}}, "topic 'b'"),
        ({"topics": "a", "starting_offsets": {"a": {0: -5}}}, r"starting_offsets\['a'\]"),
        ({"topics": "a", "max_offsets_per_batch": 0}, "max_offsets_per_batch"),
        ({"topics": "a", "max_offsets_per_batch": True}, "max_offsets_per_batch"),
        ({"topics": "a", "max_offsets_per_task": -1}, "max_offsets_per_task"),
        ({"topics": "a", "poll_timeout": 0}, "poll_timeout"),
        ({"topics": "a", "read_timeout": "5"}, "read_timeout"),
        ({"topics": "a", "group_id": ""}, "group_id"),
        ({"topics": "a", "bootstrap_servers": " "}, "bootstrap_servers"),
        ({"topics": "a", "consumer_config": {"group.id": "x"}}, "use group_id"),
        ({"topics": "a", "value_serde": "json"}, "value_serde"),
    ],
)
def test_invalid_declarations_name_the_option(kwargs, names):
    with pytest.raises(ConfigError, match=names):
        KafkaSpout(**kwargs)


def test_config_error_is_also_a_value_error():
    with pytest.raises(ValueError):
        KafkaSpout("a", max_offsets_per_batch=-3)


def test_topics_are_normalized_and_explicit_offsets_accept_string_partitions():
    spout = KafkaSpout(["a", "b"], starting_offsets={"a": {"0": "5"}})
    assert spout.topics == ("a", "b")
    assert spout.starting_offsets == {"a": {0: 5}}


def test_pattern_matches_whole_names_and_skips_internal_topics():
    spout = KafkaSpout(pattern="orders-.*", value_serde=StringSerde())
    assert spout.subscribes("orders-eu")
    assert not spout.subscribes("old-orders-eu")
    assert not KafkaSpout(pattern=".*").subscribes("__consumer_offsets")


# -- fields and schema ----------------------------------------------------------------------


def test_default_serde_gives_one_value_field_then_metadata():
    spout = KafkaSpout("a")
    assert spout.output_fields() == ["value", *METADATA_FIELDS]
    declarer = OutputFieldsDeclarer("spout")
    spout.declare_output_fields(declarer)
    assert declarer.streams["default"].to_list() == spout.output_fields()


def test_arrow_schema_types_metadata_and_adds_error_columns():
    serde = JsonSerde({"user": str, "amount": int})
    schema = KafkaSpout("a", value_serde=serde).arrow_schema()
    assert schema.names == ["user", "amount", *METADATA_FIELDS, "__error", "__raw"]
    assert schema.field("amount").type == pa.int64()
    assert schema.field("partition").type == pa.int32()
    assert schema.field("kafka_timestamp").type == pa.int64()
    headers = schema.field("kafka_headers").type
    assert headers.value_type == pa.struct([("key", pa.string()), ("value", pa.binary())])
    assert schema.field("__raw").type == pa.binary()


def test_key_serde_fields_follow_value_fields():
    spout = KafkaSpout("a", key_serde=StringSerde(field="key"))
    assert spout.output_fields()[:2] == ["value", "key"]


@pytest.mark.parametrize("field", ["offset", "topic", "__error"])
def test_serde_field_colliding_with_metadata_is_rejected_with_a_rename_hint(field):
    with pytest.raises(ConfigError, match=f"'{field}'.*rename"):
        KafkaSpout("a", value_serde=StringSerde(field=field))


def test_key_and_value_serdes_with_the_same_field_collide():
    with pytest.raises(ConfigError, match="'value'"):
        KafkaSpout("a", key_serde=StringSerde())


def test_arrow_schema_survives_the_spark_schema_round_trip():
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    schema = KafkaSpout("a", value_serde=JsonSerde({"n": int, "s": str})).arrow_schema()
    assert to_arrow_schema(from_arrow_schema(schema), timezone="UTC").equals(schema)


# -- transport ------------------------------------------------------------------------------


def test_options_round_trip_keeps_every_setting():
    spout = KafkaSpout(
        pattern="t-.*",
        bootstrap_servers="h:1",
        value_serde=JsonSerde({"n": int}),
        key_serde=StringSerde(field="k"),
        starting_offsets={"t-1": {3: 7}},
        group_id="g",
        max_offsets_per_batch=100,
        max_offsets_per_task=10,
        consumer_config={"fetch.min.bytes": "1"},
        poll_timeout=0.5,
    )
    options = spout.to_options()
    assert set(options) == {"spec"} and isinstance(options["spec"], str)
    assert KafkaSpout.from_options(options) == spout
    assert pickle.loads(pickle.dumps(spout)) == spout


def test_with_bootstrap_returns_a_copy():
    spout = KafkaSpout("a")
    filled = spout.with_bootstrap("127.0.0.1:9092")
    assert filled.bootstrap_servers == "127.0.0.1:9092" and spout.bootstrap_servers is None


# -- rows from messages ---------------------------------------------------------------------


def test_messages_become_typed_rows_with_metadata():
    spout = KafkaSpout("t", value_serde=JsonSerde({"n": int}))
    messages = [
        FakeMessage(5, b'{"n": 1}', b"k1", _headers=[("h", b"x"), ("i", b"y")]),
        FakeMessage(6, b'{"n": 2}', None, _ts=(0, -1)),
    ]
    batch = to_record_batch(spout, "t", 3, messages)
    assert batch.schema.equals(spout.arrow_schema())
    rows = batch.to_pylist()
    assert [r["n"] for r in rows] == [1, 2]
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [("t", 3, 5), ("t", 3, 6)]
    assert [r["kafka_key"] for r in rows] == [b"k1", None]
    assert [r["kafka_timestamp"] for r in rows] == [1_700_000_000_000, None]
    assert rows[0]["kafka_headers"] == [{"key": "h", "value": b"x"}, {"key": "i", "value": b"y"}]
    assert rows[1]["kafka_headers"] is None
    assert [r["__error"] for r in rows] == [None, None]


def test_a_malformed_record_is_a_row_with_error_and_raw_bytes():
    spout = KafkaSpout("t", value_serde=JsonSerde({"n": int}))
    messages = [FakeMessage(0, b'{"n": 1}'), FakeMessage(1, b"{oops"), FakeMessage(2, b'{"n": 3}')]
    rows = to_record_batch(spout, "t", 0, messages).to_pylist()
    assert [r["n"] for r in rows] == [1, None, 3]
    assert [r["offset"] for r in rows] == [0, 1, 2]
    assert rows[1]["__error"].startswith("MalformedJSON: ")
    assert rows[1]["__raw"] == b"{oops"
    assert rows[0]["__raw"] is None and rows[2]["__error"] is None


def test_key_decode_failures_are_reported_too():
    spout = KafkaSpout("t", key_serde=StringSerde(field="key"))
    rows = to_record_batch(spout, "t", 0, [FakeMessage(0, b"v", b"\xff")]).to_pylist()
    assert rows[0]["key"] is None and rows[0]["value"] == "v"
    assert rows[0]["__error"].startswith("key: DecodeError")


def test_offsets_deleted_by_retention_fail_the_read_saying_so():
    from confluent_kafka import KafkaError

    from kstorm._kafka.fetch import _check_errors
    from kstorm._kafka.offsets import OffsetRange
    from kstorm.errors import SourceError

    class Gone(FakeMessage):
        def error(self):
            return KafkaError(KafkaError.OFFSET_OUT_OF_RANGE)

    with pytest.raises(SourceError, match=r"t\[2\] offsets \[0, 10\).*retention"):
        _check_errors([Gone(0, None)], OffsetRange("t", 2, 0, 10), position=0)


def test_transient_client_errors_are_retried_not_fatal(caplog):
    from confluent_kafka import KafkaError

    from kstorm._kafka.fetch import _check_errors
    from kstorm._kafka.offsets import OffsetRange

    class Blip(FakeMessage):
        def error(self):
            return KafkaError(KafkaError._TRANSPORT)

    _check_errors([Blip(0, None)], OffsetRange("t", 0, 0, 10), position=3)
    assert "retrying" in caplog.text


class _GoneConsumer:
    """A consumer whose partition lost offsets [0, low) to retention (or the whole partition)."""

    def __init__(self, low: int, end: int, partition_gone: bool = False) -> None:
        self.low, self.end, self.partition_gone = low, end, partition_gone
        self.at: int | None = None

    def consume(self, n: int, timeout: float) -> list:
        from confluent_kafka import KafkaError

        class Gone(FakeMessage):
            def error(self):
                return KafkaError(KafkaError.OFFSET_OUT_OF_RANGE)

        if self.at is None:
            return [Gone(0, None)]
        got = [FakeMessage(o, b"v") for o in range(self.at, min(self.at + n, self.end))]
        self.at += len(got)
        return got

    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        if self.partition_gone:
            raise RuntimeError("Unknown partition")
        return self.low, self.end

    def assign(self, parts: list) -> None:
        self.at = parts[0].offset


def test_an_opaque_spout_replays_what_is_left_of_a_deleted_range(caplog):
    from kstorm._kafka.fetch import _consume
    from kstorm._kafka.offsets import OffsetRange

    spout = KafkaSpout("t", bootstrap_servers="b:9092", opaque=True)
    got = [m.offset() for batch in _consume(_GoneConsumer(4, 10), spout,
                                            OffsetRange("t", 0, 0, 10), lambda: 0.0)
           for m in batch]
    assert got == [4, 5, 6, 7, 8, 9]
    assert "offsets [0, 4) were deleted" in caplog.text
    assert spout.transactional_kind == "opaque"
    gone = _consume(_GoneConsumer(0, 10, partition_gone=True), spout,
                    OffsetRange("t", 0, 0, 10), lambda: 0.0)
    assert list(gone) == []


def test_a_partitioned_spout_fails_a_replay_of_a_deleted_range():
    from kstorm._kafka.fetch import _consume
    from kstorm._kafka.offsets import OffsetRange
    from kstorm.errors import SourceError

    spout = KafkaSpout("t", bootstrap_servers="b:9092")
    assert spout.transactional_kind == "partitioned"
    with pytest.raises(SourceError, match="retention deleted records"):
        list(_consume(_GoneConsumer(4, 10), spout, OffsetRange("t", 0, 0, 10), lambda: 0.0))
    with pytest.raises(ConfigError, match="opaque"):
        KafkaSpout("t", opaque="yes")
