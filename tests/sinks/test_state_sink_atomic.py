"""#11 item 2: state and sink in one atomic step where they share a Redis.

With ``topology.state.provider = redis`` and a RedisSink on the same server and database,
the sink's commit script also commits every task's prepared state at the batch's txid: the
values, the batch record and the states change together or not at all. Runs against a real
``redis-server`` (the embedded one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from kstorm import BaseStatefulBolt, Fields, TopologyBuilder
from kstorm._runtime.state_book import StateBook
from kstorm.embedded import EmbeddedRedis
from kstorm.errors import SinkError
from kstorm.sink import SinkBatch
from kstorm.state import InMemoryKeyValueStateProvider
from kstorm.state.redis import RedisKeyValueStateProvider, StateCommit
from kstorm.testing import ListSpout
from kstorm.tuple import Tuple
from sinks.redis import RedisConfig, RedisSink

_names = iter(range(10**6))


class Count(BaseStatefulBolt):
    def init_state(self, state: Any) -> None:  # pragma: no cover - not run here
        self.state = state

    def execute(self, tuple_: Any) -> None:  # pragma: no cover - not run here
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))

    def pre_commit(self, txid: int) -> None:
        HOOKS.append(txid)


HOOKS: list[int] = []


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as s:
        yield s


class Setup:
    def __init__(self, server: EmbeddedRedis, *, merge: str = "add",
                 max_entries: int = 10_000, mode: str = "opaque") -> None:
        self.name = f"atomic{next(_names)}"
        self.client = redis.Redis(host=server.host, port=server.port)
        self.provider = RedisKeyValueStateProvider(
            {"jedisPoolConfig": {"host": server.host, "port": server.port}})
        builder = TopologyBuilder()
        builder.set_spout("words", ListSpout([[("a",)]], Fields("word")))
        builder.set_bolt("count", Count(), 2).fields_grouping("words", Fields("word"))
        self.book = StateBook(builder.create_topology(), self.name, {}, self.provider,
                              ["count"], "redis")
        self.book.recover(None)
        config = RedisConfig(host=server.host, port=server.port)
        value = None if merge == "count" else "n"
        self.sink = RedisSink(config, key=self.name + ":{word}", value=value, merge=merge,
                              max_entries_per_call=max_entries, mode=mode,  # type: ignore[arg-type]
                              ).bind(self.name, "store")

    def prepare(self, txid: int, counts: dict[int, dict[str, int]]) -> None:
        for task, kv in counts.items():
            state = self.book.tasks[task].state
            for k, v in kv.items():
                state.put(k, state.get(k, 0) + v)
            state.prepare_commit(txid)

    def commit(self, txid: int, rows: list[dict[str, Any]]) -> Any:
        states = self.book.atomic_commit(txid)
        assert self.sink.accepts_states(states)
        return self.sink.commit_batch(txid, rows, {"t": {0: txid + 1}}, states=states)

    def committed(self) -> set[int | None]:
        return {t.state.committed_txid() for t in self.book.tasks}

    def values(self) -> list[dict[Any, Any]]:
        fresh = StateBook(self.book.topology, self.name, {}, self.provider, ["count"], "redis")
        return [dict(t.state) for t in fresh.tasks]


def test_the_sink_script_commits_values_record_and_states_together(server: EmbeddedRedis
                                                                   ) -> None:
    s = Setup(server)
    s.prepare(0, {0: {"a": 2}, 1: {"b": 1}})
    result = s.commit(0, [{"word": "a", "n": 2}, {"word": "b", "n": 1}])
    assert result.applied
    assert s.committed() == {0}
    assert s.values() == [{"a": 2}, {"b": 1}]
    assert int(s.client.get(f"{s.name}:a")) == 2
    s.prepare(1, {0: {"a": 3}})  # task 1 prepared nothing: its empty commit is in the step
    s.commit(1, [{"word": "a", "n": 3}])
    assert s.committed() == {1}
    assert s.values() == [{"a": 5}, {"b": 1}]
    assert s.sink.committed().txid == 1


def test_a_failing_sink_script_commits_no_state(server: EmbeddedRedis) -> None:
    s = Setup(server)
    s.client.hset(f"{s.name}:bad", "x", "1")  # a hash where the sink writes a plain key
    s.prepare(0, {0: {"a": 1}})
    with pytest.raises(SinkError, match="holds a hash"):
        s.commit(0, [{"word": "bad", "n": 1}])
    assert s.committed() == {None}  # not committed: still prepared, recovery decides
    assert s.book.tasks[0].state.prepared_txid() == 0
    assert s.sink.committed().txid is None


@pytest.mark.parametrize("mode", ["transactional", "opaque"])
def test_a_replay_of_a_committed_batch_commits_its_states_again(server: EmbeddedRedis,
                                                                mode: str) -> None:
    s = Setup(server, mode=mode)
    s.prepare(0, {0: {"a": 1}})
    s.commit(0, [{"word": "a", "n": 1}])
    s.book.rollback(0)  # a later sink failed: the attempt re-runs, its states taken back
    assert s.committed() == {None}
    s.prepare(0, {0: {"a": 1}})
    result = s.commit(0, [{"word": "a", "n": 1}])
    # transactional: skipped; opaque: applied again from the values before txid 0
    assert result.applied == (mode == "opaque")
    assert int(s.client.get(f"{s.name}:a")) == 1
    assert s.committed() == {0}
    assert s.values() == [{"a": 1}, {}]


@pytest.mark.parametrize("replay", [False, True])
def test_a_staged_batch_carries_the_states_too(server: EmbeddedRedis, replay: bool) -> None:
    s = Setup(server, max_entries=1, mode="transactional")  # three keys: three chunks
    rows = [{"word": w, "n": 1} for w in "xyz"]
    s.prepare(0, {0: {"x": 1}, 1: {"y": 2}})
    s.commit(0, rows)
    if replay:
        s.book.rollback(0)
        s.prepare(0, {0: {"x": 1}, 1: {"y": 2}})
        assert not s.commit(0, rows).applied
    assert s.committed() == {0}
    assert s.values() == [{"x": 1}, {"y": 2}]
    assert [int(s.client.get(f"{s.name}:{w}")) for w in "xyz"] == [1, 1, 1]


def test_hooks_run_before_the_step(server: EmbeddedRedis) -> None:
    s = Setup(server)
    HOOKS.clear()
    s.book.pre_commit(4)
    assert HOOKS == [4, 4]  # one per task


def test_only_a_lua_merge_sink_on_the_same_server_carries_states(server: EmbeddedRedis
                                                                 ) -> None:
    s = Setup(server)
    states = s.book.atomic_commit(3)
    assert isinstance(states, StateCommit) and states.tasks == 2 and states.txid == 3
    other = RedisSink(RedisConfig(host=server.host, port=server.port, database=1),
                      key="k:{word}", merge="count")
    assert not other.accepts_states(states)
    python_merge = RedisSink(RedisConfig(host=server.host, port=server.port), key="k:{word}",
                             value="n", merge=lambda old, new: new)
    assert not python_merge.accepts_states(states)
    with pytest.raises(SinkError, match="cannot carry"):
        python_merge.bind(s.name, "p").commit_batch(3, [], {}, states=states)
    memory = StateBook(s.book.topology, s.name, {}, InMemoryKeyValueStateProvider(),
                       ["count"], "memory")
    assert memory.atomic_commit(3) is None


def test_the_sink_contract_passes_states_through_commit(server: EmbeddedRedis) -> None:
    s = Setup(server, merge="count")
    s.prepare(0, {1: {"q": 1}})
    states = s.book.atomic_commit(0)
    tuples = [Tuple(["q"], Fields("word"), "words")]
    s.sink.commit(SinkBatch(0, 0, tuples, {"t": {0: 1}}, {}, states=states))
    assert s.committed() == {0}
    assert int(s.client.get(f"{s.name}:q")) == 1
