"""Rescaling a stateful bolt: its keys follow their key groups (``kstorm/state/rescale.py``).

The pure redistribution and the refusals run without Redis; the provider's tags, the
driver's redistribution at start (:meth:`StateBook.recover`) and its crash cases run
against the embedded ``redis-server``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from kstorm import BaseStatefulBolt, Fields, TopologyBuilder
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import compile_plan
from kstorm._runtime.state_book import StateBook
from kstorm.component import TopologyContext
from kstorm.embedded import EmbeddedRedis
from kstorm.errors import StateError
from kstorm.grouping import stable_hash_one
from kstorm.state import InMemoryKeyValueStateProvider, state_namespace
from kstorm.state.redis import RedisKeyValueStateProvider
from kstorm.state.rescale import MIXED, TAG, redistribute, why_not_keyed
from kstorm.testing import ListSpout
from kstorm.topology import StormTopology
from kstorm.tuple import Tuple


class Count(BaseStatefulBolt):
    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple_: Any) -> None:  # pragma: no cover - not run here
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))


class Counting(Count):
    def execute(self, tuple_: Any) -> None:
        word = tuple_.get_value_by_field("word")
        self.state.put(word, self.state.get(word, 0) + 1)


class Split(BaseStatefulBolt):
    def execute(self, tuple_: Any) -> None:  # pragma: no cover - not run here
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


def _topology(parallelism: int, grouping: str = "fields", bolt: Any = None) -> StormTopology:
    builder = TopologyBuilder()
    builder.set_spout("lines", ListSpout([["a"]], Fields("line")))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    count = builder.set_bolt("count", bolt or Count(), parallelism)
    if grouping == "fields":
        count.fields_grouping("split", Fields("word"))
    elif grouping == "global":
        count.global_grouping("split")
    else:
        count.fields_grouping("lines", Fields("line"))
    return builder.create_topology()


# -- the rule, without Redis -----------------------------------------------------------------

def _tagged(**counts: int) -> dict[bytes, bytes]:
    out = {}
    for word, n in counts.items():
        out[word.encode()] = str(n).encode()
        out[TAG + word.encode()] = str(stable_hash_one(word)).encode()
    return out


def test_every_key_goes_to_the_task_its_key_group_routes_to() -> None:
    words = {f"w{i}": i for i in range(50)}
    old = [_tagged(**{w: n for w, n in words.items() if stable_hash_one(w) % 2 == t})
           for t in range(2)]
    for tasks in (1, 3, 4, 7):
        new = redistribute(old, tasks)
        for task, fields in enumerate(new):
            held = {k.decode() for k in fields if not k.startswith(TAG)}
            assert held == {w for w in words if stable_hash_one(w) % tasks == task}
        assert sum(len(f) for f in new) == 2 * len(words)  # values and their key groups


@pytest.mark.parametrize(("old", "why"), [
    ([{b"a": b"1"}], "has no key group"),
    ([{b"a": b"1", TAG + b"a": b"?"}], "has no key group"),
    ([{b"a": b"1", TAG + b"a": MIXED}], "several key groups"),
    ([{b"a": b"1", TAG + b"a": b"3"}, {b"a": b"2", TAG + b"a": b"4"}], "held by tasks 0 and 1"),
])
def test_what_cannot_follow_one_key_group_is_refused(old: list[dict[bytes, bytes]],
                                                     why: str) -> None:
    with pytest.raises(StateError, match=why):
        redistribute(old, 3)


def test_only_fields_groupings_from_bolts_can_be_rescaled() -> None:
    assert why_not_keyed(_topology(2), "count") is None
    assert "global grouping" in (why_not_keyed(_topology(2, "global"), "count") or "")
    assert "from a spout" in (why_not_keyed(_topology(2, "spout"), "count") or "")
    assert "shuffle grouping" in (why_not_keyed(_topology(2), "split") or "")


# -- the Redis provider and the driver's redistribution ------------------------------------

@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as s:
        yield s


_names = iter(range(10**6))


class Topo:
    """The bolt 'count' of one topology name, run batch by batch as its tasks would."""

    def __init__(self, server: EmbeddedRedis, grouping: str = "fields") -> None:
        self.provider = RedisKeyValueStateProvider({"jedisPoolConfig": {
            "host": server.host, "port": server.port}})
        self.name = f"r{next(_names)}"
        self.grouping = grouping
        self.client = redis.Redis(host=server.host, port=server.port)

    def state(self, task: int, tasks: int) -> Any:
        state = self.provider.new_state(state_namespace(self.name, "count", task), {},
                                        TopologyContext(self.name, "count", task, tasks))
        state.tagging = True
        return state

    def book(self, tasks: int) -> StateBook:
        return StateBook(_topology(tasks, self.grouping), self.name, {}, self.provider,
                         ["count"], "redis")

    def prepare(self, txid: int, tasks: int, words: list[str]) -> None:
        """Each task counts the words routed to it and prepares ``txid``."""
        for task in range(tasks):
            state = self.state(task, tasks)
            for word in words:
                h = stable_hash_one(word)
                if h % tasks == task:
                    state.key_group = h
                    state.put(word, state.get(word, 0) + 1)
                    state.key_group = None
            state.prepare_commit(txid)

    def batch(self, txid: int, tasks: int, words: list[str]) -> None:
        self.prepare(txid, tasks, words)
        self.book(tasks).commit(txid)

    def counts(self, tasks: int) -> dict[str, int]:
        out: dict[str, int] = {}
        for task in range(tasks):
            for word, n in self.state(task, tasks):
                assert stable_hash_one(word) % tasks == task, (word, task)
                assert word not in out
                out[word] = n
        return out


WORDS = [f"w{i % 37}" for i in range(200)]


def _truth(*batches: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for words in batches:
        for w in words:
            out[w] = out.get(w, 0) + 1
    return out


def test_the_provider_records_key_groups_beside_keys_and_hides_them(server: Any) -> None:
    topo = Topo(server)
    topo.batch(0, 1, ["a", "b", "a"])
    state = topo.state(0, 1)
    assert dict(state) == {"a": 2, "b": 1}
    assert len(state) == 2
    raw = topo.client.hgetall(state.redis_keys[0])
    assert raw[TAG + state._k.serialize("a")] == str(stable_hash_one("a")).encode()
    state.key_group = stable_hash_one("b")  # the same key group again: no tag to write
    state.put("b", state.get("b") + 1)
    assert TAG + state._k.serialize("b") not in state._pending
    state.key_group = 12345  # another grouping value writes "a": it has no one key group
    state.put("a", state.get("a") + 1)
    state.prepare_commit(1)
    topo.book(1).commit(1)
    assert topo.client.hget(state.redis_keys[0], TAG + state._k.serialize("a")) == MIXED


def test_a_restart_with_more_then_fewer_tasks_keeps_every_count(server: Any) -> None:
    topo = Topo(server)
    topo.batch(0, 2, WORDS)
    topo.batch(1, 2, WORDS[:50])
    topo.book(4).recover(1)
    assert topo.counts(4) == _truth(WORDS, WORDS[:50])
    assert {topo.state(t, 4).committed_txid() for t in range(4)} == {1}
    topo.batch(2, 4, WORDS[10:90])
    # killed inside the first commit after the change: tasks prepared 3, nothing committed
    topo.prepare(3, 4, WORDS)
    topo.book(3).recover(2)
    assert topo.counts(3) == _truth(WORDS, WORDS[:50], WORDS[10:90])
    assert topo.client.exists(state_namespace(f"kstorm:state:{topo.name}", "count", 3)) == 0
    topo.batch(3, 3, WORDS)
    topo.book(3).recover(3)  # the same count again: nothing moves
    assert topo.counts(3) == _truth(WORDS, WORDS[:50], WORDS[10:90], WORDS)


def test_a_batch_the_sinks_committed_is_committed_before_the_keys_move(server: Any) -> None:
    topo = Topo(server)
    topo.batch(0, 2, WORDS)
    topo.prepare(1, 2, WORDS[:20])  # the sinks committed 1; the state's commit was cut off
    topo.book(5).recover(1)
    assert topo.counts(5) == _truth(WORDS, WORDS[:20])


def test_a_global_grouped_bolt_keeps_refusing_another_parallelism(server: Any) -> None:
    topo = Topo(server, grouping="global")
    topo.batch(0, 1, WORDS)
    with pytest.raises(StateError, match="now runs 2 task.*global grouping"):
        topo.book(2).recover(0)
    assert topo.counts(1) == _truth(WORDS)  # left as it was


def test_state_without_key_groups_is_refused_and_left_as_it_was(server: Any) -> None:
    topo = Topo(server)
    for task in range(2):  # written before kstorm recorded key groups
        state = topo.provider.new_state(state_namespace(topo.name, "count", task), {},
                                        TopologyContext(topo.name, "count", task, 2))
        state.put(f"k{task}", 1)
        state.prepare_commit(0)
    topo.book(2).commit(0)
    with pytest.raises(StateError, match="has no key group"):
        topo.book(3).recover(0)
    assert {w: n for w, n in topo.state(0, 2)} == {"k0": 1}


def test_the_memory_provider_refuses_with_the_reason() -> None:
    InMemoryKeyValueStateProvider.clear()
    provider = InMemoryKeyValueStateProvider()
    for task in range(2):
        state = provider.new_state(state_namespace("m", "count", task), {},
                                   TopologyContext("m", "count", task, 2))
        state.put("a", 1)
        state.prepare_commit(0)
    StateBook(_topology(2), "m", {}, provider, ["count"], "memory").commit(0)
    with pytest.raises(StateError, match="memory provider cannot move keys"):
        StateBook(_topology(3), "m", {}, provider, ["count"], "memory").recover(0)


def test_the_executor_records_the_routing_hash_of_the_tuple_being_executed(server: Any
                                                                          ) -> None:
    topo = Topo(server)
    topology = _topology(1, bolt=Counting())
    plan = compile_plan(topology)
    state = topo.provider.new_state(state_namespace(topo.name, "count", 0), {},
                                    TopologyContext(topo.name, "count", 0, 1))
    ex = StageExecutor(topology, plan, plan.stage_of["count"], topology_name=topo.name,
                       conf={}, batch_id=0, partition=0, state_for=lambda c, t: state)
    words = ["cat", "dog", "cat", "eel"]
    list(ex.process((0, Tuple([w], Fields("word"), "split")) for w in words))
    list(ex.finish())
    assert state.tagging and state.key_group is None
    state.prepare_commit(0)
    topo.book(1).commit(0)
    raw = topo.client.hgetall(state.redis_keys[0])
    assert {w: raw[TAG + state._k.serialize(w)] for w in set(words)} == {
        w: str(stable_hash_one(w)).encode() for w in set(words)}
    assert dict(topo.state(0, 1)) == {"cat": 2, "dog": 1, "eel": 1}


def test_a_crash_during_the_move_leaves_the_old_layout_and_the_next_start_moves_it(
        server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    topo = Topo(server)
    topo.batch(0, 2, WORDS)

    def killed(self: Any, *args: Any, **kwargs: Any) -> None:
        raise SystemExit("killed before EXEC")

    with monkeypatch.context() as patch:
        patch.setattr(redis.client.Pipeline, "execute", killed)
        with pytest.raises(SystemExit):
            topo.book(4).recover(0)
    assert topo.counts(2) == _truth(WORDS)  # nothing of the new layout
    assert not topo.client.exists(f"kstorm:state:{topo.name}:count:2$meta")
    topo.book(4).recover(0)
    assert topo.counts(4) == _truth(WORDS)


# -- the spark provider's values (kstorm/_spark/stage.py MapStateKeyValue) -------------------

def test_spark_provider_values_follow_their_key_group_with_the_group_kept() -> None:
    from kstorm.state.rescale import new_group, split_value, tag_value, task_fields

    words = [f"w{i}" for i in range(40)]
    old: list[dict[bytes, bytes]] = [{}, {}]
    for i, w in enumerate(words):
        h = stable_hash_one(w)
        old[h % 2][w.encode()] = tag_value(new_group(None, h), str(i).encode())
    new = redistribute([task_fields(t.items()) for t in old], 3)
    seen = {}
    for task, fields in enumerate(new):
        for k, v in fields.items():
            if k.startswith(TAG):
                continue
            group, payload = split_value(v)
            assert int(group) % 3 == task and fields[TAG + k] == group
            seen[k.decode()] = int(payload)
    assert seen == {w: i for i, w in enumerate(words)}
    untagged = [{b"a": b"\x80x"}]
    with pytest.raises(StateError, match="has no key group"):
        redistribute([task_fields(t.items()) for t in untagged], 2)
    with pytest.raises(StateError, match="several key groups"):
        redistribute([task_fields([(b"a", tag_value(MIXED, b"\x80x"))])], 2)
    with pytest.raises(StateError, match="has no key group"):
        redistribute([task_fields([(b"a", tag_value(new_group(None, None), b"\x80x"))])], 2)
