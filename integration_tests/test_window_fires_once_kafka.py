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



def _sessions(topic: str, sink: Any) -> Any:
    agg = (WindowedAggregate(key="key", n=Agg.count())
           .with_session_window(Duration.seconds(3)).with_timestamp_field("ts")
           .with_lag(Duration.seconds(5)).with_late_tuple_stream("late"))
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic, value_serde=JsonSerde({"key": str,
                                                                         "ts": int})))
    builder.set_bolt("per_key", agg).fields_grouping("events", Fields("key"))
    builder.set_bolt("store", sink).shuffle_grouping("per_key")
    builder.set_bolt("late", CaptureSink()).shuffle_grouping("per_key", "late")
    return builder.create_topology()


@pytest.mark.parametrize("kind", ["redis", "kafka"])
def test_aggregate_sessions_fire_once_across_restarts_and_a_lost_checkpoint(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any,
        kind: str) -> None:
    """Open sessions survive a restart (checkpoint) and a lost checkpoint (the sink's state).

    Each session reaches the sink once: a Redis key per session (``merge="set"``), or one
    record per session in the output topic (read committed).
    """
    topic = f"sessions-once-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 2)
    base = 1_700_000_000_000
    event = lambda key, s: json.dumps({"key": key, "ts": base + s * 1000})  # noqa: E731
    produce(kafka.bootstrap_servers, topic,
            [event("a", s) for s in range(1, 11)] + [event("b", 6)]
            + [event("a", s) for s in range(20, 26)] + [event("z", 60)], partition=0)
    produce(kafka.bootstrap_servers, topic, [event("z", 59)], partition=1)
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.trigger": "available-now", "kstorm.checkpoint.dir": str(tmp_path / "ck")}
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    output = f"{topic}-out"
    if kind == "kafka":
        create_topic(kafka.bootstrap_servers, output, 1)

    def sink() -> Any:
        if kind == "redis":
            return RedisSink(RedisConfig.from_url(redis_server.url),
                             key=topic + ":{key}:{session_start}",
                             value={"n": "n", "end": "session_end"}, merge="set",
                             mode="transactional")
        from sinks.kafka import KafkaSink

        return KafkaSink(output, key="key", value_serde=JsonSerde(
            {"key": str, "session_start": int, "session_end": int, "n": int}))

    def stored() -> dict[str, Any]:
        if kind == "redis":
            return {k.split(":", 1)[1]: json.loads(client.get(k))
                    for k in client.keys(f"{topic}:*")}
        records = [json.loads(m.value()) for m in _read_committed(kafka.bootstrap_servers,
                                                                  output)]
        keys = [f"{r['key']}:{r['session_start']}" for r in records]
        assert len(keys) == len(set(keys)), keys  # each session once
        return {k: {"n": r["n"], "end": r["session_end"]}
                for k, r in zip(keys, records, strict=True)}

    def run() -> Any:
        handle = submit_topology(topic, conf, _sessions(topic, sink()))
        assert handle.await_termination(180)
        return handle

    run()  # watermark 54 s: a's two sessions and b's closed, z's [59, 60] open
    first = {f"a:{base + 1000}": {"n": 10, "end": base + 13_000},
             f"a:{base + 20_000}": {"n": 6, "end": base + 28_000},
             f"b:{base + 6000}": {"n": 1, "end": base + 9000}}
    assert stored() == first

    # from the checkpoint: z's open session grows; a at 5 s would reopen a closed session
    produce(kafka.bootstrap_servers, topic, [event("z", 62), event("a", 5), event("z", 100)],
            partition=0)
    produce(kafka.bootstrap_servers, topic, [event("z", 99)], partition=1)
    handle = run()
    assert stored() == {**first, f"z:{base + 59_000}": {"n": 3, "end": base + 65_000}}
    assert [v[0]["ts"] - base for v in handle.sinks["late"].values] == [5000]

    # the checkpoint is lost: z's open [99, 100] comes back from the sink's stored state
    import shutil

    shutil.rmtree(tmp_path / "ck")
    produce(kafka.bootstrap_servers, topic, [event("z", 101), event("z", 200)], partition=0)
    produce(kafka.bootstrap_servers, topic, [event("y", 199)], partition=1)
    handle = run()
    assert stored() == {**first, f"z:{base + 59_000}": {"n": 3, "end": base + 65_000},
                        f"z:{base + 99_000}": {"n": 3, "end": base + 104_000}}
    assert handle.sinks["late"].values == []  # resumed at the sink's offsets, not replayed


def _read_committed(bootstrap: str, topic: str) -> list[Any]:
    """Every committed record of ``topic`` (one partition), from offset 0 to its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            message = consumer.poll(30)
            assert message is not None, f"{topic}: not read to its end"
            if message.error() is None:
                out.append(message)
            elif message.error().code() == KafkaError._PARTITION_EOF:
                return out
            else:
                raise AssertionError(f"{topic}: {message.error()}")
    finally:
        consumer.close()
