"""A window fires once, end to end (issue 11.8): a partition that delivers late cannot reopen it.

Partition 0 delivers 100 s of events for key ``a`` while partition 1 has delivered nothing;
the topology drains and the windows the watermark passed are stored (``merge="set"``). Then
partition 1 delivers its first 20 events, with early timestamps, and the topology runs again
from its checkpoint: those events are late (they go to the late-tuple stream), and every
stored window keeps its count -- it used to fire again and go from 10 to the late count.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from kstorm import Fields, KafkaSpout, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from kstorm.testing import CaptureSink
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

pytestmark = pytest.mark.integration


def _topology(topic: str, redis_url: str, prefix: str) -> Any:
    agg = (WindowedAggregate(key="key", n=Agg.count())
           .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
           .with_lag(Duration.seconds(5)).with_late_tuple_stream("late"))
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic, value_serde=JsonSerde({"key": str,
                                                                         "ts": int})))
    builder.set_bolt("per_key", agg).fields_grouping("events", Fields("key"))
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_url),
                                        key=prefix + ":{key}:{window_start}", value="n",
                                        merge="set", mode="transactional")
                     ).shuffle_grouping("per_key")
    builder.set_bolt("late", CaptureSink()).shuffle_grouping("per_key", "late")
    return builder.create_topology()


def test_a_partition_delivering_late_cannot_fire_a_window_again(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    topic = f"fires-once-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 2)
    base = 1_700_000_000_000
    event = lambda ts: json.dumps({"key": "a", "ts": base + ts})  # noqa: E731
    produce(kafka.bootstrap_servers, topic, [event(s * 1000) for s in range(1, 101)],
            partition=0)
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now", "kstorm.checkpoint.dir": str(tmp_path / "ck")}
    handle = submit_topology(topic, conf, _topology(topic, redis_server.url, topic))
    assert handle.await_termination(180)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    stored = {k: client.get(k) for k in client.keys(f"{topic}:*")}
    assert len(stored) == 9 and set(stored.values()) == {"10"}, stored

    produce(kafka.bootstrap_servers, topic, [event(s * 1000) for s in range(1, 21)],
            partition=1)
    handle = submit_topology(topic, conf, _topology(topic, redis_server.url, topic))
    assert handle.await_termination(180)
    assert {k: client.get(k) for k in client.keys(f"{topic}:*")} == stored
    late = handle.sinks["late"].values
    assert len(late) == 20, late  # each one on the late stream, with its original fields
    assert sorted(v[0]["ts"] - base for v in late) == [s * 1000 for s in range(1, 21)]
