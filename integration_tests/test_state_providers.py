"""Stateful bolts with ``topology.state.provider = redis`` on Spark (seed 000).

- A word count whose checkpoint is deleted resumes from the sink with its counts intact
  (the state lives in Redis at the sink's txid), where the ``spark`` provider must refuse.
- The hooks run in seed 000's order across the task (``pre_prepare``) and the driver
  (``pre_commit``), recorded in a Redis list in the order they ran.
- The memory provider is refused on Spark, naming why.
- A batch given up after failed attempts (dead-letter policy) commits none of the state its
  failed attempts prepared.
- A custom ``StateProvider`` ("package.module:Class") runs in the tasks and on the driver.
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from topologies import SplitSentence, WordCount
from wc_topology import provider_conf

from kstorm import (
    BaseBasicBolt,
    ConfigError,
    FailedException,
    Fields,
    KafkaSpout,
    TopologyBuilder,
    submit_topology,
)
from kstorm._kafka.client import create_topic
from serdes import StringSerde
from sinks.redis import RedisConfig, RedisSink

pytestmark = pytest.mark.integration


class HookedWordCount(WordCount):
    """The word count, recording its hooks as ``hook:txid:task`` in a Redis list."""

    def __init__(self, redis_url: str, key: str) -> None:
        self.redis_url, self.key = redis_url, key
        self.task = -1

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.task = context.task_index

    def _record(self, what: str) -> None:
        redis.Redis.from_url(self.redis_url).rpush(self.key, what)

    def pre_prepare(self, txid: int) -> None:
        self._record(f"pre_prepare:{txid}:task")

    def pre_commit(self, txid: int) -> None:
        self._record(f"pre_commit:{txid}:driver")

    def pre_rollback(self) -> None:
        self._record("pre_rollback")


def _topology(topic: str, redis_url: str, prefix: str, count: Any = None) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSpout(topic, value_serde=StringSerde(field="sentence"),
                                              max_offsets_per_batch=30))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", count or WordCount(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_url), key=prefix + ":{word}",
                                        value="count", merge="max")
                     ).fields_grouping("count", Fields("word"))
    return builder.create_topology()


def _counts(client: redis.Redis, name: str) -> dict[str, int]:
    return {k.split(":", 1)[1]: int(v) for k, v in
            ((k, client.get(k)) for k in client.keys(f"{name}:*"))}


def test_redis_provider_counts_survive_a_deleted_checkpoint(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    topic = f"stp-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 2)
    first = ["a b a", "b c a", "d"] * 40
    produce(kafka.bootstrap_servers, topic, first)
    name, checkpoint = topic, tmp_path / "checkpoint"
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now", "kstorm.checkpoint.dir": str(checkpoint),
            **provider_conf("redis", redis_server.url)}
    assert submit_topology(name, conf, _topology(topic, redis_server.url, name)
                           ).await_termination(180)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    truth = Counter(w for s in first for w in s.split())
    assert _counts(client, name) == truth
    assert client.exists(f"kstorm:state:{name}:count:0", f"kstorm:state:{name}:count:1") == 2

    shutil.rmtree(checkpoint)
    more = ["a e", "e"] * 25
    produce(kafka.bootstrap_servers, topic, more)
    assert submit_topology(name, conf, _topology(topic, redis_server.url, name)
                           ).await_termination(180)
    truth.update(w for s in more for w in s.split())
    assert _counts(client, name) == truth


def test_hooks_run_in_order_in_the_task_and_on_the_driver(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    topic = f"sth-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 1)
    produce(kafka.bootstrap_servers, topic, ["x y"] * 90)  # 3 batches of 30
    key = f"{topic}:hooks"
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now",
            "kstorm.checkpoint.dir": str(tmp_path / "checkpoint"),
            **provider_conf("redis", redis_server.url)}
    topology = _topology(topic, redis_server.url, topic, HookedWordCount(redis_server.url, key))
    assert submit_topology(topic, conf, topology).await_termination(180)
    calls = redis.Redis.from_url(redis_server.url, decode_responses=True).lrange(key, 0, -1)
    txids = sorted({int(c.split(":")[1]) for c in calls})
    assert txids == [0, 1, 2], calls
    for txid in txids:
        mine = [c for c in calls if c.split(":")[1] == str(txid)]
        # the tasks that had tuples prepare, then the driver commits every task (2 tasks)
        prepares = [i for i, c in enumerate(calls) if c == f"pre_prepare:{txid}:task"]
        commits = [i for i, c in enumerate(calls) if c == f"pre_commit:{txid}:driver"]
        assert len(commits) == 2 and 1 <= len(prepares) <= 2, mine
        assert max(prepares) < min(commits), calls
    assert "pre_rollback" not in calls


def test_the_memory_provider_is_refused_on_spark(spark: Any, kafka: Any, redis_server: Any,
                                                 tmp_path: Path) -> None:
    topic = f"stm-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 1)
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now",
            "kstorm.checkpoint.dir": str(tmp_path / "checkpoint"),
            "topology.state.provider": "memory"}
    with pytest.raises(ConfigError, match=r"memory keeps state in one process.*\['count'\]"):
        submit_topology(topic, conf, _topology(topic, redis_server.url, topic))


class FailsBatchOne(BaseBasicBolt):
    """Passes ``(word, count)`` on, except in batch 1, where every attempt fails."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.context = context  # prepared once per task: context.batch_id is the current batch

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        if self.context.batch_id == 1:
            raise FailedException("batch 1 fails on every attempt")
        collector.emit(list(tuple_.values))


def test_a_given_up_batch_leaves_no_trace_in_provider_state(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    """Failed attempts prepared state; the dead-lettered batch must not commit it."""
    topic = f"stf-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 1)
    sentences = [f"a b w{i % 7}" for i in range(90)]  # batches of 30: 0..29, 30..59, 60..89
    produce(kafka.bootstrap_servers, topic, sentences)
    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSpout(topic, value_serde=StringSerde(field="sentence"),
                                              max_offsets_per_batch=30))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("flaky", FailsBatchOne(), 2).fields_grouping("count", Fields("word"))
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_server.url),
                                        key=topic + ":{word}", value="count", merge="max")
                     ).fields_grouping("flaky", Fields("word"))
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now",
            "kstorm.checkpoint.dir": str(tmp_path / "checkpoint"),
            "kstorm.transaction.max.attempts": 2, "kstorm.transaction.backoff.ms": 10,
            "kstorm.transaction.failure.policy": "dead-letter",
            **provider_conf("redis", redis_server.url)}
    handle = submit_topology(topic, conf, builder.create_topology())
    assert handle.await_termination(180)
    assert handle.progress["components"]["__transactions"]["dead_lettered"] == 1
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    kept = sentences[:30] + sentences[60:]
    assert _counts(client, topic) == Counter(w for s in kept for w in s.split())


def test_a_custom_state_provider_runs_in_the_tasks_and_on_the_driver(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    topic = f"stc-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 2)
    sentences = ["a b a", "c"] * 30
    produce(kafka.bootstrap_servers, topic, sentences)
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now",
            "kstorm.checkpoint.dir": str(tmp_path / "checkpoint"),
            "topology.state.provider": "custom_state:TaggedRedisStateProvider",
            "user.state.redis": redis_server.url}
    assert submit_topology(topic, conf, _topology(topic, redis_server.url, topic)
                           ).await_termination(180)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert _counts(client, topic) == Counter(w for s in sentences for w in s.split())
    stored = client.hgetall(f"kstorm:state:custom/{topic}:count:0$meta")
    assert stored["committed"] == client.hget(f"kstorm:{topic}:store:offsets", "txid")
