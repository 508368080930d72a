"""One Kafka connection for every client: SASL/SSL settings reach every one, secrets never show."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any

import pytest

from kstorm import Config, ConfigError, Fields, KafkaConnection, KafkaSpout, TopologyBuilder
from kstorm._kafka import client as kafka_client
from kstorm._kafka.offsets import OffsetRange
from kstorm._runtime.deadletter import DeadLetterWriter
from kstorm._spark.runner import _dead_letter_connection, with_connections
from kstorm.acking.offsets import KafkaMessageId
from kstorm.bolt import BaseBasicBolt
from kstorm.config import TopologyConfig
from kstorm.testing import sink_context
from serdes import StringSerde
from sinks.kafka import KafkaSink

SECURED = {
    "kafka.bootstrap.servers": "broker:9093",
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "SCRAM-SHA-512",
    "kafka.sasl.username": "app",
    "kafka.sasl.password": "s3cret-pw",
    "kafka.ssl.ca.location": "/etc/ca.pem",
}
WANTED = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
          "sasl.username": "app", "sasl.password": "s3cret-pw",
          "ssl.ca.location": "/etc/ca.pem", "bootstrap.servers": "broker:9093"}


class Recorder:
    """Stands in for confluent-kafka's clients: records each config, answers a few calls."""

    made: list[tuple[str, dict[str, Any]]] = []

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, config: dict[str, Any]) -> Any:
        Recorder.made.append((self.kind, dict(config)))
        return _FakeClient()


class _FakeClient:
    def list_topics(self, timeout: float = 0) -> Any:
        part = SimpleNamespace(error=None)
        topic = SimpleNamespace(error=None, partitions={0: part})
        return SimpleNamespace(topics={"out": topic, "kstorm.t.store": topic})

    def init_transactions(self, *args: Any) -> None:
        pass

    def consume(self, *args: Any) -> list:
        raise RuntimeError("stop here: the client was made")

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class Split(BaseBasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))

    def execute(self, tuple_, collector):
        collector.emit([tuple_.values[0]])


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, dict[str, Any]]]:
    import confluent_kafka

    import kstorm._kafka.fetch as fetch
    import sinks.kafka._read as sink_read
    import sinks.kafka._txn as txn

    Recorder.made = []
    monkeypatch.setattr(fetch, "Consumer", Recorder("spout read"))
    monkeypatch.setattr(kafka_client, "Consumer", Recorder("spout driver"))
    monkeypatch.setattr(kafka_client, "_CACHE", {})
    monkeypatch.setattr(confluent_kafka, "Consumer", Recorder("reliability fetch"))
    monkeypatch.setattr(confluent_kafka, "Producer", Recorder("dead letters"))
    monkeypatch.setattr(txn, "Producer", Recorder("sink producer"))
    monkeypatch.setattr(txn, "Consumer", Recorder("sink group consumer"))
    monkeypatch.setattr(sink_read, "AdminClient", Recorder("sink admin"))
    monkeypatch.setattr(sink_read, "Consumer", Recorder("sink reader"))
    return Recorder.made


def topology(spout: KafkaSpout | None = None) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("lines", spout or KafkaSpout("lines", value_serde=StringSerde()))
    builder.set_bolt("split", Split()).shuffle_grouping("lines")
    builder.set_bolt("store", KafkaSink("out")).shuffle_grouping("split")
    return builder.create_topology()


def test_every_client_of_a_secured_topology_carries_its_sasl_settings(recorded):
    settings = TopologyConfig.from_conf(SECURED)
    resolved = with_connections(topology(), settings)
    spout = resolved.components["lines"].component
    # the spout's clients: a read task's consumer, the driver's metadata consumer, the
    # consumer that commits the group's offsets
    with pytest.raises(RuntimeError, match="stop here"):
        list(kafka_client_read(spout))
    kafka_client.driver_consumer(spout.client_config("consumer"))
    kafka_client.driver_consumer(spout.client_config("group", group_id="g"))
    # at least once, the records whose tuples failed for good are read back for dead letters
    from kstorm._runtime.reliability import _fetch_values

    with pytest.raises(RuntimeError, match="stop here"):
        _fetch_values(spout, [KafkaMessageId("lines", 0, 3)])
    # the dead-letter producer
    writer = DeadLetterWriter("t", _dead_letter_connection(resolved, settings), "t.dlq")
    writer.write(0, [{"component": "split", "stream": "default", "error_type": "E",
                      "message": "m", "values": None, "topic": "lines", "partition": 0,
                      "offset": 3, "raw": b"x"}])
    # the Kafka sink: admin client, transactional producer, group consumer, state reader
    sink = KafkaSink("out")
    sink.open(sink_context("t", "store", SECURED))
    from sinks.kafka._read import read_state

    with pytest.raises(Exception):  # noqa: B017 - the fake reader stops the read
        read_state(sink._connection, "kstorm.t.store", 0, 0.01)

    kinds = {kind for kind, _ in recorded}
    assert kinds == {"spout read", "spout driver", "reliability fetch", "dead letters",
                     "sink admin", "sink producer", "sink group consumer", "sink reader"}
    for kind, config in recorded:
        missing = {k: v for k, v in WANTED.items() if config.get(k) != v}
        assert not missing, f"{kind} lacks {missing}"


def kafka_client_read(spout: KafkaSpout) -> Any:
    from kstorm._kafka.fetch import read_range

    return read_range(spout, OffsetRange("lines", 0, 0, 5))


def test_a_components_own_security_settings_reach_all_its_clients(recorded):
    spout = KafkaSpout("lines", bootstrap_servers="other:9094", value_serde=StringSerde(),
                       consumer_config={"security.protocol": "SASL_PLAINTEXT",
                                        "sasl.mechanism": "PLAIN", "sasl.username": "u",
                                        "sasl.password": "p", "fetch.min.bytes": "1"})
    resolved = with_connections(topology(spout), TopologyConfig.from_conf({}))
    mine = resolved.components["lines"].component
    for role, ids in (("consumer", {}), ("group", {"group_id": "g"})):
        config = mine.client_config(role, **ids)
        assert config["bootstrap.servers"] == "other:9094"
        assert (config["sasl.username"], config["sasl.password"]) == ("u", "p")
    # the reliability fetch and the dead letters (no topology Kafka: the spout's cluster)
    connection = _dead_letter_connection(resolved, TopologyConfig.from_conf({}))
    assert connection.client_config("producer")["sasl.password"] == "p"
    assert "fetch.min.bytes" not in connection.client_config("producer")  # tuning stays put


def test_secrets_are_redacted_in_every_repr_and_error():
    conf = TopologyConfig.from_conf(SECURED)
    for shown in (repr(conf), str(conf), repr(conf.kafka), str(conf.kafka)):
        assert "s3cret-pw" not in shown
    spout = KafkaSpout("t", consumer_config={"sasl.password": "hidden1"})
    assert "hidden1" not in repr(spout)
    with pytest.raises(ConfigError) as info:
        TopologyConfig.from_conf({**SECURED, "kafka.ssl.key.password": 42})
    assert "42" not in str(info.value) and "s3cret-pw" not in str(info.value)
    assert "hidden1" not in spout.to_options()["spec"]  # what Spark keeps as the option


def test_the_connection_pickles_and_keeps_its_secrets():
    connection = TopologyConfig.from_conf(SECURED).kafka
    again = pickle.loads(pickle.dumps(connection))
    assert again == connection
    assert again.client_config("admin")["sasl.password"] == "s3cret-pw"


def test_roles_need_their_ids_and_keep_them():
    connection = KafkaConnection(bootstrap_servers="b:1")
    with pytest.raises(ConfigError, match="group_id"):
        connection.client_config("group")
    config = connection.client_config("transactional_producer", transactional_id="x",
                                      role_config={"transactional.id": "y", "linger.ms": 9})
    assert config["transactional.id"] == "x" and config["linger.ms"] == 9
    assert config["enable.idempotence"] is True


def test_a_component_without_brokers_anywhere_is_named():
    with pytest.raises(ConfigError, match="spout 'lines'.*kafka.bootstrap.servers"):
        with_connections(topology(), TopologyConfig.from_conf({}))


def test_connection_keys_are_validated():
    with pytest.raises(ConfigError, match="kafka.security.protocol"):
        TopologyConfig.from_conf({**SECURED, "kafka.security.protocol": "SASL"})
    with pytest.raises(ConfigError, match="bootstrap"):
        KafkaConnection.from_client_config("b:1", {}).with_overrides(" , ", None)


def test_config_setter_and_storm_alias_of_the_trigger_interval():
    conf = Config()
    conf.set_bootstrap_servers("b:1")
    conf["topology.state.checkpoint.interval.ms"] = 250
    settings = TopologyConfig.from_conf(conf)
    assert settings.trigger_interval_ms == 250 and settings.kafka.bootstrap_servers == "b:1"
    with pytest.raises(ConfigError, match="disagree"):
        TopologyConfig.from_conf({"kstorm.trigger.interval.ms": 100,
                                  "topology.state.checkpoint.interval.ms": 250})


def test_a_read_task_prefetches_about_its_range_and_the_spout_can_say_otherwise(recorded):
    # librdkafka's default queue (64 MiB per partition) made a 5,000-record read task
    # fetch and decode up to ~100k records, all thrown away at the range end
    for own, kbytes in (({}, "1024"), ({"queued.max.messages.kbytes": "8192"}, "8192")):
        spout = KafkaSpout("lines", bootstrap_servers="b:9092", value_serde=StringSerde(),
                           consumer_config=own)
        with pytest.raises(RuntimeError, match="stop here"):
            list(kafka_client_read(spout))
        config = [c for kind, c in recorded if kind == "spout read"][-1]
        assert config["queued.max.messages.kbytes"] == kbytes
        assert config["fetch.queue.backoff.ms"] == "5"  # not 1 s once the queue is full
