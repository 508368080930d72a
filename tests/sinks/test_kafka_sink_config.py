"""KafkaSink's arguments are checked when it is declared, with messages naming what is wrong."""

from __future__ import annotations

import copy
import doctest
import importlib
import pickle

import pytest

from kstorm.errors import ConfigError, SinkError
from kstorm.sink import SinkBatch
from kstorm.testing import sink_context
from serdes import AvroSerde, JsonSerde, StringSerde
from sinks.kafka import KafkaSink

AVRO = AvroSerde({"type": "record", "name": "Out", "fields": [
    {"name": "word", "type": "string"}, {"name": "count", "type": "long"}]})


def test_defaults():
    sink = KafkaSink("word-counts")
    assert sink.records_offsets is True
    assert sink.bootstrap_servers is None and sink.key is None and sink.fields is None
    assert isinstance(sink.value_serde, JsonSerde)
    assert sink.name is None  # the runtime's open() names it kstorm.<topology>.<sink>


@pytest.mark.parametrize("topic", ["", "a b", "über", "x" * 250, ".", "..", None, 3])
def test_topic_must_be_a_legal_kafka_topic_name(topic):
    with pytest.raises(ConfigError, match="topic must be 1-249 letters"):
        KafkaSink(topic)


@pytest.mark.parametrize("servers", ["", "   ", 9092, ["a:1"]])
def test_bootstrap_servers_must_be_a_string(servers):
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        KafkaSink("out", bootstrap_servers=servers)


def test_value_serde_must_be_a_serde():
    with pytest.raises(ConfigError, match="value_serde must be a serdes serde.*dict"):
        KafkaSink("out", value_serde={"word": str})  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["", 3, b"word", ["word"]])
def test_key_must_be_a_field_name_a_function_or_none(key):
    with pytest.raises(ConfigError, match="key must be a field name"):
        KafkaSink("out", key=key)


def test_key_accepts_a_field_name_or_a_function():
    assert KafkaSink("out", key="word").key == "word"
    assert callable(KafkaSink("out", key=lambda t: t.values[0]).key)


@pytest.mark.parametrize("fields", ["word", [], ["word", ""], ["word", 3], ("a", "a")])
def test_fields_must_be_a_list_of_distinct_names(fields):
    with pytest.raises(ConfigError, match="fields"):
        KafkaSink("out", fields=fields)


def test_fields_must_fit_the_serde():
    with pytest.raises(ConfigError, match=r"writes fields \['word', 'count'\]"):
        KafkaSink("out", value_serde=AVRO, fields=["word"])
    assert KafkaSink("out", value_serde=AVRO, fields=["count", "x", "word"]).fields == (
        "count", "x", "word")  # by name
    assert KafkaSink("out", value_serde=AVRO, fields=["w", "n"]).fields == ("w", "n")  # in order
    assert KafkaSink("out", value_serde=StringSerde(), fields=["text"]).fields == ("text",)


@pytest.mark.parametrize("key", ["bootstrap.servers", "transactional.id", "enable.idempotence",
                                 "group.id"])
def test_producer_config_may_not_set_what_the_sink_owns(key):
    with pytest.raises(ConfigError, match=f"may not set '{key}'"):
        KafkaSink("out", producer_config={key: "x"})


def test_producer_config_must_be_a_mapping():
    with pytest.raises(ConfigError, match="producer_config must be a mapping"):
        KafkaSink("out", producer_config=[("linger.ms", 5)])  # type: ignore[arg-type]
    assert KafkaSink("out", producer_config={"linger.ms": 50}).producer_config == {
        "linger.ms": 50}


@pytest.mark.parametrize("txid", ["", "with space", "x" * 300])
def test_transactional_id_must_be_a_legal_topic_name_too(txid):
    with pytest.raises(ConfigError, match="transactional_id must be"):
        KafkaSink("out", transactional_id=txid)


@pytest.mark.parametrize("timeout", [0, -1, "10", None])
def test_timeout_must_be_positive(timeout):
    with pytest.raises(ConfigError, match="timeout_s must be a positive number"):
        KafkaSink("out", timeout_s=timeout)


def test_open_without_brokers_says_where_to_set_them():
    sink = KafkaSink("out")
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        sink.open(sink_context("wc", "out"))


def test_open_rejects_a_topology_name_that_cannot_name_a_topic():
    sink = KafkaSink("out", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ConfigError, match="kstorm.word count.out"):
        sink.open(sink_context("word count", "out"))


def test_reading_before_open_is_a_clear_error():
    sink = KafkaSink("out")
    with pytest.raises(SinkError, match="open"):
        sink.committed_offsets()
    with pytest.raises(SinkError, match="open"):
        sink.commit(SinkBatch(0, 0, []))


def test_the_declaration_pickles_and_copies_without_clients():
    sink = KafkaSink("out", key="word", value_serde=AVRO, transactional_id="my.sink")
    sink._producer = object()  # as if opened
    for clone in (pickle.loads(pickle.dumps(sink)), copy.deepcopy(sink)):
        assert clone._producer is None and clone._consumer is None
        assert (clone.topic, clone.key, clone.name) == ("out", "word", "my.sink")
        assert clone.value_serde == AVRO


@pytest.mark.parametrize("name", ["sinks.kafka", "sinks.kafka.sink", "sinks.kafka._book",
                                  "sinks.kafka._records", "sinks.kafka._txn"])
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
