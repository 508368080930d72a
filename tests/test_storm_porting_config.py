"""Issue 42 item 9: porting friction — Storm's Config constants, Storm keys kstorm does not
use, timestamp extractor objects, custom states with only Storm's State methods."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kstorm import BaseStatefulBolt, BaseWindowedBolt, Config, Fields, TopologyBuilder
from kstorm._runtime.state_book import StateBook
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError
from kstorm.state import BaseState, tracks_txids
from kstorm.testing import ListSpout, TopologyTestDriver
from kstorm.windowing import Duration, WindowConfig

# -- Config constants ------------------------------------------------------------------------


def _constants() -> dict[str, str]:
    return {name: value for name, value in vars(Config).items()
            if name.isupper() and isinstance(value, str)}


def test_every_accepted_key_has_a_constant_and_every_constant_is_accepted() -> None:
    """Seed 004: ``conf.put(Config.TOPOLOGY_STATE_PROVIDER, "org.apache.storm.redis.state.
    RedisKeyValueStateProvider");`` — Storm code names keys by Config's constants."""
    constants = _constants()
    accepted = TopologyConfig.accepted_keys()
    assert set(constants.values()) == accepted
    for name, key in constants.items():
        if key.startswith("kstorm."):
            assert name.startswith("KSTORM_"), name
    assert Config.TOPOLOGY_MAX_SPOUT_PENDING == "topology.max.spout.pending"
    assert Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS == "topology.message.timeout.secs"
    assert Config.TOPOLOGY_STATE_PROVIDER == "topology.state.provider"
    assert Config.TOPOLOGY_STATE_PROVIDER_CONFIG == "topology.state.provider.config"
    assert Config.TOPOLOGY_WORKERS == "topology.workers"
    assert Config.TOPOLOGY_DEBUG == "topology.debug"
    assert Config.KSTORM_TRIGGER == "kstorm.trigger"


def test_storm_code_puts_keys_by_constant() -> None:
    """Seed 004: ``conf.put(Config.TOPOLOGY_STATE_PROVIDER, "org.apache.storm.redis.state.
    RedisKeyValueStateProvider");`` and seed 001: "This timeout can be configured on a
    topology-specific basis using the Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS configuration"."""
    conf = Config()
    conf.put(Config.TOPOLOGY_STATE_PROVIDER, "org.apache.storm.redis.state."
                                             "RedisKeyValueStateProvider")
    conf.put(Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS, 60)
    conf.put_all({Config.TOPOLOGY_GUARANTEE: "at-least-once"})
    conf.set_max_spout_pending(5000)
    conf.set_num_workers(2)
    conf.set_debug(True)
    settings = TopologyConfig.from_conf(conf)
    assert (settings.state_provider, settings.message_timeout_secs, settings.max_spout_pending,
            settings.workers, settings.debug) == ("redis", 60, 5000, 2, True)


@pytest.mark.parametrize(("key", "why", "instead"), [
    ("topology.ackers", "old name", "topology.acker.executors"),
    ("transactional.zookeeper.servers", "not in ZooKeeper", "kstorm.checkpoint.dir"),
    ("transactional.zookeeper.port", "not in ZooKeeper", "kstorm.checkpoint.dir"),
    ("transactional.zookeeper.root", "not in ZooKeeper", "kstorm.checkpoint.dir"),
    ("topology.bolts.window.length.count", "set on the bolt", "with_window"),
    ("storm.zookeeper.servers", "without ZooKeeper", "kstorm.checkpoint.dir"),
    ("nimbus.seeds", "no Nimbus", "kstorm.spark.master"),
    ("topology.kryo.register", "no Kryo", "picklable"),
])
def test_a_storm_key_kstorm_does_not_use_says_why_and_what_instead(
        key: str, why: str, instead: str) -> None:
    """Seed 002: "The transactional state is stored in ZooKeeper" (kstorm keeps it in Spark's
    checkpoint: the key has nothing to set, and the error says so, not "Extra inputs")."""
    with pytest.raises(ConfigError, match=why) as caught:
        TopologyConfig.from_conf({key: "x"})
    assert instead in caught.value.hint
    assert "Extra inputs" not in str(caught.value)


def test_a_misspelled_key_gets_did_you_mean() -> None:
    """Seed 001: "Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS ... defaults to 30 seconds" — a typo in
    that key would silently keep 30 s in Storm; kstorm names the key meant."""
    with pytest.raises(ConfigError, match="did you mean 'topology.message.timeout.secs'"):
        TopologyConfig.from_conf({"topology.message.timeout.sec": 60})
    with pytest.raises(ConfigError, match="did you mean 'topology.max.spout.pending'"):
        TopologyConfig.from_conf({"topology.max.spout.pendng": 10})
    with pytest.raises(ConfigError, match="unknown configuration key 'no.such.thing'"):
        TopologyConfig.from_conf({"no.such.thing": 1})
    assert TopologyConfig.from_conf({"user.anything": 1}).message_timeout_secs == 30


def test_storms_topology_ackers_constant_ports_as_written() -> None:
    """Seed 001: "disabling the fault tolerance by setting the number of acker bolts to 0
    Config.TOPOLOGY_ACKERS"."""
    conf = Config()
    conf.put(Config.TOPOLOGY_ACKERS, 0)
    assert TopologyConfig.from_conf(conf).acks_on_emit


# -- timestamp extractor objects -------------------------------------------------------------


class NestedTimestamp:
    """A Storm-style ``TimestampExtractor``: the timestamp inside a nested field."""

    def extract_timestamp(self, tuple_: Any) -> int:
        return tuple_.get_value_by_field("event")["ts"]


class Windows(BaseWindowedBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("start", "names"))

    def execute(self, window: Any) -> None:
        self.collector.emit([window.get_start_timestamp(),
                             sorted(t.values[0]["name"] for t in window.get())])


def test_a_timestamp_extractor_object_windows_by_its_timestamps() -> None:
    """Seed 004: "Alternatively a TimestampExtractor can be used to derive a timestamp value
    from a tuple (e.g. extract timestamp from a nested field within the tuple)."""
    bolt = Windows().with_tumbling_window(Duration.seconds(10)).with_timestamp_extractor(
        NestedTimestamp())
    b = TopologyBuilder()
    b.set_spout("events", ListSpout([[({"ts": 1},)]], Fields("event")))
    b.set_bolt("windows", bolt).global_grouping("events")
    with TopologyTestDriver(b.create_topology()) as driver:
        driver.pipe("events", [[{"ts": 1_000, "name": "a"}], [{"ts": 9_000, "name": "b"}],
                               [{"ts": 12_000, "name": "c"}]])
        driver.pipe("events", [[{"ts": 25_000, "name": "d"}]])
        assert driver.output("windows")[:2] == [[0, ["a", "b"]], [10_000, ["c"]]]
    config = WindowConfig(Duration.seconds(1), timestamp_extractor=NestedTimestamp())
    assert config.is_event_time
    with pytest.raises(ConfigError, match="extract_timestamp"):
        Windows().with_timestamp_extractor(42)


# -- a custom State with Storm's methods only ------------------------------------------------

STORE: dict[str, dict[str, Any]] = {}


class StormOnlyState(BaseState):
    """Storm's three State methods and KeyValueState's, nothing of kstorm's recovery."""

    def __init__(self, namespace: str) -> None:
        self.ns = STORE.setdefault(namespace, {"data": {}, "prepared": None})
        self.pending: dict[Any, Any] = {}

    def put(self, key: Any, value: Any) -> None:
        self.pending[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self.pending.get(key, self.ns["data"].get(key, default))

    def delete(self, key: Any) -> Any:
        return self.pending.pop(key, None)

    def __iter__(self) -> Any:
        return iter({**self.ns["data"], **self.pending}.items())

    def prepare_commit(self, txid: int) -> None:
        self.ns["prepared"], self.pending = (txid, dict(self.pending)), {}

    def commit(self, txid: int) -> None:
        prepared = self.ns["prepared"]
        if prepared is not None and prepared[0] == txid:
            self.ns["data"].update(prepared[1])
            self.ns["prepared"] = None

    def rollback(self) -> None:
        self.pending, self.ns["prepared"] = {}, None


class StormOnlyProvider:
    def new_state(self, namespace: str, conf: Any, context: Any) -> StormOnlyState:
        return StormOnlyState(namespace)


class Counter(BaseStatefulBolt):
    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple_: Any) -> None:  # pragma: no cover - not run here
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))


def test_a_custom_state_needs_only_storms_state_methods(
        caplog: pytest.LogCaptureFixture) -> None:
    """Seed 000: "Custom state implementations should provide implementations for the methods
    defined in the org.apache.storm.State interface. These are the void prepareCommit(long
    txid), void commit(long txid), rollback() methods."""
    STORE.clear()
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("a",)]], Fields("word")))
    b.set_bolt("count", Counter()).fields_grouping("words", Fields("word"))
    topology = b.create_topology()
    with caplog.at_level(logging.WARNING, logger="kstorm.state"):
        book = StateBook(topology, "t", {}, StormOnlyProvider(), ["count"])
    assert "only Storm's State methods" in caplog.text
    assert not tracks_txids(book.tasks[0].state)
    executor = StormOnlyState("t:count:0")  # the task's instance on an executor
    executor.put("a", 1)
    executor.prepare_commit(0)
    book.commit(0)
    assert STORE["t:count:0"]["data"] == {"a": 1}
    executor.put("a", 2)
    executor.prepare_commit(1)
    book.rollback(1)  # a failed attempt of txid 1: what it prepared is discarded
    assert STORE["t:count:0"]["prepared"] is None
    executor.put("a", 3)
    executor.prepare_commit(1)  # the attempt again; killed after the sinks committed txid 1
    book = StateBook(topology, "t", {}, StormOnlyProvider(), ["count"])
    book.recover(1)  # Storm's recovery: commit(last) completes it
    assert STORE["t:count:0"]["data"] == {"a": 3}
    executor.put("a", 4)
    executor.prepare_commit(2)  # killed before the sinks of txid 2 committed
    StateBook(topology, "t", {}, StormOnlyProvider(), ["count"]).recover(1)
    assert STORE["t:count:0"] == {"data": {"a": 3}, "prepared": None}
    with pytest.raises(TypeError, match="abstract"):
        type("Half", (BaseState,), {"commit": lambda self, txid: None})()
