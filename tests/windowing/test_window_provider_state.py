"""Windows held by a state provider (#11 item 6): stored as changes, restored exactly.

A task reloaded from the provider's committed state before every batch must fire exactly
the windows a task that never left memory fires, whatever the batch boundaries; a batch
writes its new tuples once and deletes the ones the windows let go; a damaged state is an
error naming the bolt; the driver's :class:`StateBook` commits and recovers the windows'
namespaces like a stateful bolt's.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from kstorm import Fields, TopologyBuilder
from kstorm._runtime.state_book import StateBook
from kstorm._runtime.window_kvstore import KVChunks, WindowKV, internal_state, window_namespace
from kstorm._runtime.window_store import DictBackend, PersistentTuples
from kstorm._runtime.window_task import Collect, WindowedTask
from kstorm.component import TopologyContext
from kstorm.embedded import EmbeddedRedis
from kstorm.errors import StateError
from kstorm.state import InMemoryKeyValueStateProvider, state_namespace
from kstorm.state.redis import RedisKeyValueStateProvider
from kstorm.testing import ListSpout
from kstorm.tuple import Tuple
from kstorm.windowing import BaseStatefulWindowedBolt, BaseWindowedBolt, Count, Duration
from kstorm.windowing.config import WindowConfig

FIELDS = Fields("key", "ts", "offset")
_names = iter(range(10**6))


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture(params=["memory", "redis"])
def provider(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        InMemoryKeyValueStateProvider.clear()
        return InMemoryKeyValueStateProvider()
    server = request.getfixturevalue("redis_server")
    return RedisKeyValueStateProvider({"jedisPoolConfig": {"host": server.host,
                                                           "port": server.port}})


def _state(provider: Any, name: str, task: int = 0) -> Any:
    namespace = window_namespace(name, "w", task)
    return internal_state(provider, namespace, {}, TopologyContext(name, "w", task, 1))


CONFIGS = {
    "event-time tumbling, message ids": WindowConfig(
        Duration.millis(100), tumbling=True, timestamp_field="ts",
        lag=Duration.millis(30), message_id_field="offset"),
    "event-time sliding": WindowConfig(
        Duration.millis(200), Duration.millis(50), timestamp_field="ts",
        lag=Duration.millis(20)),
    "count sliding": WindowConfig(Count(7), Count(3)),
    "persistent processing time": WindowConfig(
        Duration.millis(100), tumbling=True, persistent=True, max_events_in_memory=5),
}


def _tuples(n: int, rng: random.Random) -> list[Tuple]:
    out, ts = [], 1_000
    for i in range(n):
        ts += rng.randrange(0, 12)
        out.append(Tuple([f"k{rng.randrange(5)}", ts - rng.randrange(25), i], FIELDS,
                         "events"))
    return out


def _fired(out: Collect) -> list[tuple[Any, list[Any]]]:
    return [(bounds, [t.values for t in w]) for bounds, w in zip(out.bounds, out.windows,
                                                                  strict=True)]


def _task(config: WindowConfig, kv: Any) -> WindowedTask:
    store = PersistentTuples(KVChunks(kv), config.max_events_in_memory) \
        if config.persistent else None
    return WindowedTask("w", config, (), store)


@pytest.mark.parametrize("shape", list(CONFIGS))
def test_a_task_reloaded_every_batch_fires_what_one_in_memory_fires(provider: Any, shape: str
                                                                    ) -> None:
    config = CONFIGS[shape]
    rng = random.Random(list(CONFIGS).index(shape))
    tuples = _tuples(400, rng)
    name = f"wp{next(_names)}"
    memory, reloaded = Collect(), Collect()
    kept = WindowedTask("w", config, (), PersistentTuples(DictBackend(), 5)
                        if config.persistent else None)
    at, now, txid = 0, 10_000, 0
    while at < len(tuples):
        size = rng.choice([0, 1, 3, 17, 40])
        batch = tuples[at:at + size]
        at += size
        now += rng.randrange(0, 120)
        kept.process(batch, now, memory)
        kv = _state(provider, name)
        task, windows = _task(config, kv), WindowKV(kv, "w")
        windows.load(task)
        task.process(batch, now, reloaded)
        windows.save(task)
        kv.prepare_commit(txid)
        kv.commit(txid)
        txid += 1
    assert memory.windows, "the run fired no window: the test checks nothing"
    assert _fired(reloaded) == _fired(memory)
    assert reloaded.late_tuples == memory.late_tuples


class _Recording:
    """A state that counts what a batch writes."""

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}
        self.puts: list[Any] = []
        self.deletes: list[Any] = []

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self.puts.append(key)
        self.data[key] = value

    def delete(self, key: Any) -> Any:
        self.deletes.append(key)
        return self.data.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self.data.items()))


def test_a_batch_writes_its_new_tuples_once_and_deletes_what_the_windows_let_go() -> None:
    config = WindowConfig(Count(10), tumbling=True)
    kv, task, out = _Recording(), WindowedTask("w", config), Collect()
    windows = WindowKV(kv, "w")
    tuples = [Tuple([f"k{i}", i, i], FIELDS, "events") for i in range(30)]
    task.process(tuples[:6], 1, out)
    assert windows.save(task) == 6
    assert sorted(k for k in kv.puts if k[0] == "t") == [("t", i) for i in range(6)]
    kv.puts.clear()
    task.process(tuples[6:13], 2, out)  # the first window fires; its tuples stay, as
    assert windows.save(task) == 7        # the next window's get_expired() reports them
    assert len([k for k in kv.puts if k[0] == "t"]) == 7  # only the new ones
    assert kv.deletes == []
    task.process(tuples[13:20], 3, out)  # the second window fires: the first's are let go
    assert windows.save(task) == 7
    assert sorted(kv.deletes) == [("t", i) for i in range(10)]
    assert sorted(k for k in kv.data if k[0] == "t") == [("t", i) for i in range(10, 20)]
    again = WindowedTask("w", config)
    assert WindowKV(kv, "w").load(again)
    after = Collect()
    again.process(tuples[20:30], 4, after)
    assert [[t.values[0] for t in w] for w in after.windows] == [
        [f"k{i}" for i in range(20, 30)]]
    assert [[t.values[0] for t in w] for w in out.windows] == [
        [f"k{i}" for i in range(0, 10)], [f"k{i}" for i in range(10, 20)]]


def test_a_missing_tuple_is_an_error_naming_the_bolt() -> None:
    config = WindowConfig(Count(10), tumbling=True)
    kv, task = _Recording(), WindowedTask("w", config)
    task.process([Tuple([f"k{i}", i, i], FIELDS, "events") for i in range(4)], 1, Collect())
    WindowKV(kv, "w").save(task)
    del kv.data[("t", 2)]
    with pytest.raises(StateError, match=r"windowed bolt 'w'.*missing"):
        WindowKV(kv, "w").load(WindowedTask("w", config))


def test_an_empty_state_leaves_the_task_fresh() -> None:
    task = WindowedTask("w", WindowConfig(Count(3)))
    assert WindowKV(_Recording(), "w").load(task) is False
    assert task.manager.size == 0


def test_window_state_ignores_the_users_value_serializer(redis_server: EmbeddedRedis) -> None:
    provider = RedisKeyValueStateProvider({
        "jedisPoolConfig": {"host": redis_server.host, "port": redis_server.port},
        "valueSerializerClass": "tests.windowing.test_window_provider_state:IntOnly"})
    name = f"wp{next(_names)}"
    kv = _state(provider, name)
    task = WindowedTask("w", WindowConfig(Count(5)))
    task.process([Tuple(["a", 1, 1], FIELDS, "events")], 1, Collect())
    WindowKV(kv, "w").save(task)
    kv.prepare_commit(0)
    kv.commit(0)
    again = WindowedTask("w", WindowConfig(Count(5)))
    assert WindowKV(_state(provider, name), "w").load(again)
    assert again.manager.size == 1


class IntOnly:
    """A user's value serializer that handles ints only."""

    def serialize(self, obj: Any) -> bytes:
        if not isinstance(obj, int):
            raise TypeError(obj)
        return str(obj).encode()

    def deserialize(self, data: bytes) -> Any:
        return int(data)


class Windows(BaseWindowedBolt):
    def execute(self, window: Any) -> None:  # pragma: no cover - not run here
        pass


class StatefulWindows(BaseStatefulWindowedBolt):
    def init_state(self, state: Any) -> None:  # pragma: no cover - not run here
        self.state = state

    def execute(self, window: Any) -> None:  # pragma: no cover - not run here
        pass


def _windowed_topology() -> Any:
    builder = TopologyBuilder()
    builder.set_spout("events", ListSpout([[("a", 1, 1)]], FIELDS))
    builder.set_bolt("w", Windows().with_tumbling_window(Count(3)), 2).shuffle_grouping(
        "events")
    builder.set_bolt("s", StatefulWindows().with_tumbling_window(Count(3))).shuffle_grouping(
        "events")
    return builder.create_topology()


def test_the_state_book_commits_and_recovers_the_windows_namespaces(provider: Any) -> None:
    name = f"wp{next(_names)}"
    topology = _windowed_topology()
    book = StateBook(topology, name, {}, provider, [], "test", ["w", "s"])
    assert sorted(t.namespace for t in book.tasks) == sorted([
        window_namespace(name, "w", 0), window_namespace(name, "w", 1),
        window_namespace(name, "s", 0), state_namespace(name, "s", 0)])
    book.recover(None)
    kv = _state(provider, name, 0)
    kv.put(("meta",), "x")
    kv.prepare_commit(0)
    book.commit(0)
    book.commit(1)
    assert {t.state.committed_txid() for t in book.tasks} == {1}
    fresh = StateBook(topology, name, {}, provider, [], "test", ["w", "s"])
    fresh.recover(1)  # at the topology's txid: nothing to do
    with pytest.raises(StateError, match=r"\['s', 'w'\].*behind"):
        StateBook(topology, name, {}, provider, [], "test", ["w", "s"]).recover(4)
    other = f"wp{next(_names)}"
    with pytest.raises(StateError, match=r"is empty"):
        StateBook(topology, other, {}, provider, [], "test", ["w", "s"]).recover(1)
