"""State that lived only in a lost checkpoint is never reset silently (issue: state, item 4).

A ``BaseStatefulBolt`` word count (the tour's, docs/tour.md) writes running counts to the
exactly-once Redis sink. The checkpoint is deleted; a restart would resume from the sink's
offsets with the bolt's ``KeyValueState`` empty (every count then overwritten with a small
number). kstorm refuses: a ``StateError`` naming the component and what to do, and Redis left
untouched.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from topologies import SplitSentence, WordCount

from kstorm import Fields, KafkaSpout, StateError, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from serdes import StringSerde
from sinks.redis import RedisConfig, RedisSink

pytestmark = pytest.mark.integration


def _topology(topic: str, redis_url: str, prefix: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSpout(topic, value_serde=StringSerde(field="sentence")))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_url), key=prefix + ":{word}",
                                        value="count", merge="max")
                     ).fields_grouping("count", Fields("word"))
    return builder.create_topology()


def test_a_lost_checkpoint_with_stateful_bolts_is_refused_not_reset(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    topic = f"lost-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 1)
    produce(kafka.bootstrap_servers, topic, ["a b a", "b c a"] * 50)
    name, checkpoint = topic, tmp_path / "checkpoint"
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now", "kstorm.checkpoint.dir": str(checkpoint)}
    handle = submit_topology(name, conf, _topology(topic, redis_server.url, name))
    assert handle.await_termination(180)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    before = {k: client.get(k) for k in client.keys(f"{name}:*")}
    assert before == {f"{name}:a": "150", f"{name}:b": "100", f"{name}:c": "50"}

    shutil.rmtree(checkpoint)
    produce(kafka.bootstrap_servers, topic, ["a"])
    with pytest.raises(StateError, match=r"'count' \(a stateful bolt") as info:
        submit_topology(name, conf, _topology(topic, redis_server.url, name))
    assert "restore the checkpoint" in info.value.hint
    assert {k: client.get(k) for k in client.keys(f"{name}:*")} == before
    assert not checkpoint.exists()  # nothing was started
