"""Seed 000's state protocol: providers, prepare/commit/rollback, recovery, hooks.

The Redis provider runs against a real ``redis-server`` (the embedded one); the memory
provider in this process. A "crash" is the protocol stopped after one of its steps: the
task prepared; the sinks committed; the state committed; Spark wrote its commit log. The
next start's :meth:`StateBook.recover` gets the last txid the topology committed and must
leave every task's state exactly as after that txid.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kstorm import BaseStatefulBolt, Fields, TopologyBuilder
from kstorm._runtime.state_book import StateBook
from kstorm.component import TopologyContext
from kstorm.config import TopologyConfig
from kstorm.embedded import EmbeddedRedis
from kstorm.errors import ConfigError, StateError
from kstorm.state import InMemoryKeyValueState, InMemoryKeyValueStateProvider, state_namespace
from kstorm.state.redis import RedisKeyValueState, RedisKeyValueStateProvider, RedisStateConfig
from kstorm.testing import ListSpout

CALLS: list[tuple[str, Any]] = []


class Counter(BaseStatefulBolt):
    """Records its hooks in CALLS."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple_: Any) -> None:  # pragma: no cover - not run here
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))

    def pre_prepare(self, txid: int) -> None:
        CALLS.append(("pre_prepare", txid))

    def pre_commit(self, txid: int) -> None:
        CALLS.append(("pre_commit", txid))

    def pre_rollback(self) -> None:
        CALLS.append(("pre_rollback", None))


def _topology(parallelism: int = 2) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([[("a",)]], Fields("word")))
    builder.set_bolt("count", Counter(), parallelism).fields_grouping("words", Fields("word"))
    return builder.create_topology()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


_names = iter(range(10**6))


@pytest.fixture(params=["memory", "redis"])
def provider(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        InMemoryKeyValueStateProvider.clear()
        return InMemoryKeyValueStateProvider()
    server = request.getfixturevalue("redis_server")
    return RedisKeyValueStateProvider({"jedisPoolConfig": {"host": server.host,
                                                           "port": server.port}})


class Topo:
    """One topology's stateful bolt 'count' (2 tasks) on a provider, run step by step."""

    def __init__(self, provider: Any, parallelism: int = 2) -> None:
        self.provider = provider
        self.name = f"t{next(_names)}"
        self.parallelism = parallelism
        self.topology = _topology(parallelism)

    def task_state(self, task: int) -> Any:
        return self.provider.new_state(state_namespace(self.name, "count", task), {},
                                       TopologyContext(self.name, "count", task, 2))

    def book(self) -> StateBook:
        return StateBook(self.topology, self.name, {}, self.provider, ["count"])

    def prepare(self, txid: int, changes: dict[int, dict[str, int | None]]) -> None:
        """The tasks' side of a batch: read, change, prepare (``None`` deletes)."""
        for task, kv in changes.items():
            state = self.task_state(task)
            for key, value in kv.items():
                if value is None:
                    state.delete(key)
                else:
                    state.put(key, state.get(key, 0) + value)
            state.prepare_commit(txid)

    def batch(self, txid: int, changes: dict[int, dict[str, int | None]]) -> None:
        """A whole batch: prepared, then committed by the driver (after the sinks)."""
        self.prepare(txid, changes)
        self.book().commit(txid)

    def values(self) -> dict[int, dict[Any, Any]]:
        return {t: dict(self.task_state(t)) for t in range(self.parallelism)}

    def txids(self) -> set[int | None]:
        return {self.task_state(t).committed_txid() for t in range(self.parallelism)}


def _run_two_batches(topo: Topo) -> dict[int, dict[Any, Any]]:
    topo.batch(0, {0: {"a": 1, "b": 2}, 1: {"c": 5}})
    topo.batch(1, {0: {"a": 10}})
    return topo.values()


def test_a_committed_batch_is_visible_and_a_prepared_one_is_not(provider: Any) -> None:
    topo = Topo(provider)
    after = _run_two_batches(topo)
    assert after == {0: {"a": 11, "b": 2}, 1: {"c": 5}}
    assert topo.txids() == {1}  # a task that prepared nothing still commits the txid
    topo.prepare(2, {0: {"a": 100}})
    assert topo.values() == after
    assert topo.task_state(0).prepared_txid() == 2


def test_prepared_not_committed_and_not_in_the_sinks_is_rolled_back(provider: Any) -> None:
    topo = Topo(provider)
    after = _run_two_batches(topo)
    topo.prepare(2, {0: {"a": 100, "b": None}})  # crash: the sinks did not commit txid 2
    topo.book().recover(1)
    assert topo.values() == after
    assert topo.task_state(0).prepared_txid() is None
    assert topo.txids() == {1}


def test_prepared_not_committed_but_in_the_sinks_is_committed(provider: Any) -> None:
    topo = Topo(provider)
    _run_two_batches(topo)
    topo.prepare(2, {0: {"a": 100, "b": None}, 1: {"d": 1}})  # sinks committed txid 2, crash
    topo.book().recover(2)  # resuming from the sink after a lost checkpoint: last = 2
    assert topo.values() == {0: {"a": 111}, 1: {"c": 5, "d": 1}}
    assert topo.txids() == {2}


def test_a_commit_ahead_of_sparks_commit_log_is_taken_back(provider: Any) -> None:
    topo = Topo(provider)
    after = _run_two_batches(topo)
    topo.batch(2, {0: {"a": 100, "b": None, "new": 3}})  # state committed; Spark did not
    topo.book().recover(1)  # the checkpoint says 1: Spark replays txid 2
    assert topo.values() == after
    assert topo.txids() == {1}
    topo.batch(2, {0: {"a": 100, "b": None, "new": 3}})  # the replay, once
    assert topo.values() == {0: {"a": 111, "new": 3}, 1: {"c": 5}}


def test_the_first_commit_taken_back_leaves_the_state_empty(provider: Any) -> None:
    topo = Topo(provider)
    topo.batch(0, {0: {"a": 1}})
    topo.book().recover(None)
    assert topo.values() == {0: {}, 1: {}}
    assert topo.txids() == {None}


def test_recovery_is_idempotent(provider: Any) -> None:
    topo = Topo(provider)
    _run_two_batches(topo)
    topo.prepare(2, {0: {"a": 100}})
    for _ in range(3):  # killed again during recovery, restarted
        topo.book().recover(2)
    assert topo.values()[0] == {"a": 111, "b": 2}


def test_a_task_without_tuples_in_the_sinks_last_batch_completes_its_empty_commit(
        provider: Any) -> None:
    topo = Topo(provider)
    _run_two_batches(topo)
    topo.prepare(2, {0: {"a": 1}})  # task 1 had no tuples in txid 2; sinks committed it
    topo.book().recover(2)
    assert topo.txids() == {2}
    assert topo.values() == {0: {"a": 12, "b": 2}, 1: {"c": 5}}


@pytest.mark.parametrize(("last", "what"), [(0, "ahead"), (5, "behind"), (None, "ahead")])
def test_a_state_that_does_not_match_the_topology_is_an_error(provider: Any, last: Any,
                                                               what: str) -> None:
    topo = Topo(provider)
    _run_two_batches(topo)
    topo.batch(2, {0: {"a": 1}})
    topo.batch(3, {0: {"a": 1}})
    with pytest.raises(StateError, match=rf"\['count'\].*{what}") as info:
        topo.book().recover(last)
    assert "kstorm:state:" in info.value.hint


def test_an_empty_state_in_a_topology_that_committed_is_an_error(provider: Any) -> None:
    topo = Topo(provider)
    with pytest.raises(StateError, match="is empty"):
        topo.book().recover(7)
    topo.book().recover(7, init_empty=["count"])  # a stateful bolt new in the topology


def test_a_changed_parallelism_is_an_error(provider: Any) -> None:
    topo = Topo(provider)
    _run_two_batches(topo)
    smaller = Topo(provider, parallelism=1)
    smaller.name = topo.name
    with pytest.raises(StateError, match="now runs 1 task"):
        smaller.book().recover(1)
    bigger = Topo(provider, parallelism=3)
    bigger.name = topo.name
    with pytest.raises(StateError, match="now runs 3 task"):
        bigger.book().recover(1)


def test_a_failed_attempt_is_rolled_back_before_it_runs_again(provider: Any) -> None:
    topo = Topo(provider)
    after = _run_two_batches(topo)
    topo.batch(2, {0: {"a": 100}})  # attempt 1 committed its state, then failed later
    topo.prepare(2, {1: {"c": 1}})
    topo.book().rollback(2)
    assert topo.values() == after
    assert topo.txids() == {1}
    assert topo.task_state(1).prepared_txid() is None


def test_hooks_run_in_seed_000s_order(provider: Any) -> None:
    topo = Topo(provider)
    CALLS.clear()
    bolt = Counter()
    bolt.pre_prepare(0)  # what the task does before prepare_commit (stage.stateful_task)
    topo.prepare(0, {0: {"a": 1}})
    topo.book().commit(0)
    assert CALLS == [("pre_prepare", 0), ("pre_commit", 0), ("pre_commit", 0)]  # two tasks
    CALLS.clear()
    topo.prepare(1, {0: {"a": 1}})
    topo.book().recover(0)
    assert CALLS == [("pre_rollback", None)]  # task 0 had prepared txid 1
    CALLS.clear()
    topo.prepare(1, {1: {"a": 1}})
    topo.book().recover(1)  # task 1 prepared txid 1; task 0 had no tuples in it
    assert CALLS == [("pre_commit", 1), ("pre_commit", 1)]
    assert topo.txids() == {1}


def test_keys_are_canonical_and_values_keep_their_types(provider: Any) -> None:
    topo = Topo(provider)
    state = topo.task_state(0)
    one, other = "word", "".join(["wo", "rd"])
    values = {(one, one): 1, (one, other): 2, 7: None, "f": 1.5, "l": [1, "x"],
              b"b": {"k": (1, 2)}}
    for key, value in values.items():
        state.put(key, value)
    state.prepare_commit(0)
    topo.book().commit(0)
    fresh = topo.task_state(0)
    assert dict(fresh) == {("word", "word"): 2, 7: None, "f": 1.5, "l": [1, "x"],
                           b"b": {"k": (1, 2)}}
    assert fresh.get(7, "default") is None
    assert fresh.delete("f") == 1.5
    assert fresh.get("f", "gone") == "gone"
    assert "f" not in dict(fresh)


def test_redis_layout_is_namespaced_per_topology_component_and_task(
        redis_server: EmbeddedRedis) -> None:
    import redis

    provider = RedisKeyValueStateProvider({"jedisPoolConfig": {"host": redis_server.host,
                                                               "port": redis_server.port,
                                                               "database": 3}})
    topo = Topo(provider)
    topo.batch(0, {0: {"a": 1}, 1: {"b": 1}})
    client = redis.Redis(host=redis_server.host, port=redis_server.port, db=3)
    keys = sorted(k.decode() for k in client.keys(f"kstorm:state:{topo.name}:*"))
    assert keys == [f"kstorm:state:{topo.name}:count:0", f"kstorm:state:{topo.name}:count:0$meta",
                    f"kstorm:state:{topo.name}:count:0$undo",
                    f"kstorm:state:{topo.name}:count:1", f"kstorm:state:{topo.name}:count:1$meta",
                    f"kstorm:state:{topo.name}:count:1$undo"]


def test_provider_configuration_in_seed_000s_json_form() -> None:
    config = RedisStateConfig.parse('{"jedisPoolConfig": {"host": "r", "port": 6380, '
                                    '"timeout": 500, "database": 2, "password": "pw"}}')
    assert (config.host, config.port, config.timeout_ms, config.database,
            config.password) == ("r", 6380, 500, 2, "pw")
    assert "pw" not in repr(config)
    settings = TopologyConfig.from_conf({
        "topology.state.provider": "org.apache.storm.redis.state.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"jedisPoolConfig": {"host": "r"}}})
    assert settings.state_provider == "redis"
    assert isinstance(settings.state_provider_instance(), RedisKeyValueStateProvider)
    memory = TopologyConfig.from_conf(
        {"topology.state.provider": "org.apache.storm.state.InMemoryKeyValueStateProvider"})
    assert isinstance(memory.state_provider_instance(), InMemoryKeyValueStateProvider)
    custom = TopologyConfig.from_conf(
        {"topology.state.provider": "kstorm.state:InMemoryKeyValueStateProvider"})
    assert isinstance(custom.state_provider_instance(), InMemoryKeyValueStateProvider)


@pytest.mark.parametrize(("conf", "match"), [
    ({"topology.state.provider": "rocksdb"}, "unknown state provider 'rocksdb'"),
    ({"topology.state.provider": "redis",
      "topology.state.provider.config": {"jedisPoolConfig": {"hots": "x"}}},
     r"unknown key\(s\) \['hots'\]"),
    ({"topology.state.provider": "redis",
      "topology.state.provider.config": {"keyClass": "java.lang.String"}}, "keyClass"),
    ({"topology.state.provider": "redis", "topology.state.provider.config": "{not json"},
     "not valid JSON"),
    ({"topology.state.provider": "redis",
      "topology.state.provider.config": {"valueSerializerClass": "no.such:Serde"}},
     "cannot be imported"),
    ({"topology.state.provider.config": {"jedisPoolConfig": {}}}, "takes no configuration"),
])
def test_bad_provider_configuration_is_refused(conf: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TopologyConfig.from_conf(conf)


def test_a_custom_provider_must_implement_the_protocol() -> None:
    class Plain:
        def get(self, key: Any, default: Any = None) -> Any: ...

    class Provider:
        def new_state(self, namespace: str, conf: Any, context: Any) -> Any:
            return Plain()

    with pytest.raises(ConfigError, match=r"lacks \['put', 'delete'"):
        StateBook(_topology(), "t", {}, Provider(), ["count"])


class JsonSerializer:
    """A value serializer for the test below."""

    def serialize(self, obj: Any) -> bytes:
        import json

        return json.dumps(obj).encode()

    def deserialize(self, data: bytes) -> Any:
        import json

        return json.loads(data)


def test_a_value_serializer_class_is_used(redis_server: EmbeddedRedis) -> None:
    import redis

    config = RedisStateConfig.parse({
        "jedisPoolConfig": {"host": redis_server.host, "port": redis_server.port},
        "valueSerializerClass": f"{__name__}:JsonSerializer"})
    state = RedisKeyValueState(f"ser{next(_names)}:c:0", config)
    state.put("k", {"n": 1})
    state.prepare_commit(0)
    state.commit(0)
    raw = redis.Redis(host=redis_server.host, port=redis_server.port).hvals(state.redis_keys[0])
    assert raw == [b'{"n": 1}']
    assert RedisKeyValueState(state.namespace, config).get("k") == {"n": 1}


def test_an_unreachable_redis_is_named() -> None:
    from kstorm.embedded import free_port

    provider = RedisKeyValueStateProvider({"jedisPoolConfig": {"port": free_port(),
                                                               "host": "127.0.0.1",
                                                               "timeout": 300}})
    with pytest.raises(ConfigError, match=r"redis://127.0.0.1:\d+/0 does not answer"):
        provider.check()


def test_state_init_empty_names_components_with_provider_state_or_is_refused() -> None:
    from kstorm._spark.runner import _check_init_empty

    redis = TopologyConfig.from_conf({"topology.state.provider": "redis",
                                      "kstorm.state.init.empty": ["count"]})
    _check_init_empty("t", redis, ["count", "windows"])  # a stateful bolt: fine
    with pytest.raises(ConfigError, match=r"names \['typo'\], which hold no provider state"):
        _check_init_empty("t", TopologyConfig.from_conf({
            "topology.state.provider": "redis", "kstorm.state.init.empty": ["typo"]}),
            ["count"])
    with pytest.raises(ConfigError, match="does nothing with topology.state.provider = spark"):
        _check_init_empty("t", TopologyConfig.from_conf({
            "kstorm.state.init.empty": ["count"]}), ["count"])
    _check_init_empty("t", TopologyConfig.from_conf({}), [])  # not set: nothing to check


def test_storms_no_argument_in_memory_state_has_the_protocol_and_its_own_keys() -> None:
    from kstorm import InMemoryKeyValueState

    one, other = InMemoryKeyValueState(), InMemoryKeyValueState()
    one.put("cat", 1)
    one.prepare_commit(1)
    one.commit(1)
    one.put("cat", 2)
    assert one.delete("cat") == 2 and one.get("cat") is None
    one.rollback()  # back to the committed state
    assert one.get("cat") == 1 and list(one) == [("cat", 1)]
    assert other.get("cat") is None and list(other) == []  # not shared


def test_a_new_txid_cannot_be_prepared_while_one_is_pending() -> None:
    # Storm's InMemoryKeyValueState: "Cannot prepare a new txn while there is a pending txn"
    state = InMemoryKeyValueState()
    state.put("a", 1)
    state.prepare_commit(1)
    state.put("b", 2)
    with pytest.raises(StateError, match="cannot prepare txid 2 while txid 1 is prepared"):
        state.prepare_commit(2)
    state.prepare_commit(1)  # the same txid again: the changes since join it
    state.commit(1)
    assert dict(state) == {"a": 1, "b": 2}
