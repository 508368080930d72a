"""Agg.count_distinct and Agg.top_k end to end: tansu -> Spark -> exactly-once Redis.

3 partitions of JSON events ``{key, ts, user, item}`` (some out of order within the lag,
~2% later than the lag) go through KafkaSpout -> WindowedAggregate(key; count, distinct
users, top-3 items), tumbling 10 s, lag 5 s -> RedisSink (JSON values). The first part of
the records is processed, the checkpoint is deleted, the rest is produced and processed:
the second run starts from the offsets and the open windows stored in Redis. Every window
in Redis must equal the ground truth computed here from the produced records and their
(partition, offset), with the rules of ``notes/runtime.md``: per partition in offset order a
record is late iff its ts is below (max ts of the partition's earlier records) - lag; a
window is in Redis iff its end is below the final watermark (min over partitions of their
max ts - lag).
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter, defaultdict
from typing import Any

import pytest

from kstorm import Fields, KafkaSpout, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from kstorm.testing import CaptureSink, ListSpout, run_to_completion
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

pytestmark = pytest.mark.integration

WINDOW_MS, LAG_MS, K = 10_000, 5_000, 3
PARTITIONS, PER_PARTITION, FIRST_PART = 3, 900, 500
ITEMS = ["pen", "cup", "ink", "mug", "pad", "box"]
RUN_TIMEOUT = 180.0


def window_value(row: dict[str, Any]) -> dict[str, Any]:
    """The Redis value of one window."""
    return {"n": row["n"], "users": row["users"], "top": row["top"]}


def build(topic: str, redis_url: str) -> Any:
    spout = KafkaSpout(topic, value_serde=JsonSerde({"key": str, "ts": int, "user": str,
                                                     "item": str}),
                       max_offsets_per_batch=400)
    agg = (WindowedAggregate(key="key", n=Agg.count(), users=Agg.count_distinct("user"),
                             top=Agg.top_k("item", K))
           .with_tumbling_window(Duration.millis(WINDOW_MS)).with_timestamp_field("ts")
           .with_lag(Duration.millis(LAG_MS)))
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("per_key", agg).fields_grouping("events", Fields("key"))
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_url),
                                        key="dt:{key}:{window_start}", value=window_value,
                                        merge="set", mode="transactional")
                     ).shuffle_grouping("per_key")
    return builder.create_topology()


def events(partition: int, rng: random.Random) -> list[dict[str, Any]]:
    ts, out = 1_700_000_000_000 + partition * 700, []
    for _ in range(PER_PARTITION):
        ts += rng.randint(0, 120)
        r = rng.random()  # ~2% later than the lag, ~8% out of order within it
        jitter = (-rng.randint(6_000, 9_000) if r < 0.02
                  else -rng.randint(0, 3_000) if r < 0.1 else 0)
        out.append({"key": f"s{rng.randint(0, 2)}", "ts": ts + jitter,
                    "user": f"u{rng.randint(0, 40)}",
                    "item": rng.choices(ITEMS, weights=[8, 5, 5, 3, 2, 1])[0]})
    return out


def ground_truth(by_partition: dict[int, list[dict[str, Any]]]
                 ) -> tuple[dict[str, dict[str, Any]], int, set[tuple[str, int]]]:
    """Windows in Redis, late count, and the windows holding records of both parts."""
    rows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    parts: dict[tuple[str, int], set[bool]] = defaultdict(set)
    maxima, late = {}, 0
    for p, records in by_partition.items():  # records are in offset order
        for offset, e in enumerate(records):
            if p in maxima and e["ts"] < maxima[p] - LAG_MS:
                late += 1
                continue
            maxima[p] = max(e["ts"], maxima.get(p, e["ts"]))
            start = -(-e["ts"] // WINDOW_MS) * WINDOW_MS - WINDOW_MS
            rows[(e["key"], start)].append(e)
            parts[(e["key"], start)].add(offset < FIRST_PART)
    watermark = min(maxima.values()) - LAG_MS
    out = {}
    for (key, start), es in rows.items():
        if start + WINDOW_MS < watermark:
            items = Counter(e["item"] for e in es)
            top = sorted(items.items(), key=lambda ic: (-ic[1], ic[0]))[:K]
            out[f"dt:{key}:{start}"] = {"n": len(es), "users": len({e["user"] for e in es}),
                                        "top": [list(t) for t in top]}
    spanning = {w for w, seen in parts.items() if len(seen) == 2}
    return out, late, spanning


def run(name: str, settings: dict[str, Any], topology: Any) -> Any:
    handle = submit_topology(name, settings, topology)
    try:
        assert handle.await_termination(RUN_TIMEOUT), f"{name} still running"
    finally:
        handle.stop()
    return handle


def test_distinct_and_top_k_windows_survive_a_lost_checkpoint(spark, kafka, redis_server,
                                                              topic_name, checkpoint_dir,
                                                              produce):
    bootstrap = kafka.bootstrap_servers
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    rng = random.Random(4004)
    by_partition = {p: events(p, rng) for p in range(PARTITIONS)}
    settings = {"kafka.bootstrap.servers": bootstrap, "kstorm.checkpoint.dir":
                str(checkpoint_dir), "kstorm.trigger": "available-now",
                "kstorm.spark.master": "local[2]"}
    name = f"dt{topic_name[-8:]}"
    for p, records in by_partition.items():
        produce(bootstrap, topic_name, [json.dumps(e) for e in records[:FIRST_PART]],
                partition=p)
    first = run(name, settings, build(topic_name, redis_server.url))

    shutil.rmtree(checkpoint_dir)  # the next run resumes from what Redis holds
    for p, records in by_partition.items():
        produce(bootstrap, topic_name, [json.dumps(e) for e in records[FIRST_PART:]],
                partition=p)
    second = run(name, settings, build(topic_name, redis_server.url))

    expected, late, spanning = ground_truth(by_partition)
    stored = second.sinks["store"].read_all("dt:")
    assert stored == expected
    assert len(expected) >= 12 and late >= 20
    # some windows were open across the lost checkpoint and still came out whole
    assert {f"dt:{k}:{s}" for k, s in spanning} & set(expected)
    assert sum(h.progress["components"]["per_key"]["late"] for h in (first, second)) == late
    assert second.progress["offsets"]["events"] == {
        topic_name: {str(p): PER_PARTITION for p in range(PARTITIONS)}}


def test_late_tuples_are_routed_and_left_out_of_the_counters(spark, tmp_path):
    # lag 2 s: after t=20 s arrives, anything before 18 s is late (as for Agg.count)
    rows = [[("k", 1000, "pen"), ("k", 20_000, "cup"), ("k", 17_000, "ink"),
             ("k", 19_000, "cup"), ("k", 12_000, "cup")],
            [("k", 5_000, "mug"), ("k", 40_000, "pen")]]
    agg = (WindowedAggregate(key="key", n=Agg.count(), items=Agg.count_distinct("item"),
                             top=Agg.top_k("item", 2))
           .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
           .with_lag(Duration.seconds(2)).with_late_tuple_stream("late"))
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(rows, Fields("key", "ts", "item")))
    b.set_bolt("w", agg).fields_grouping("events", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")
    b.set_bolt("late", CaptureSink()).shuffle_grouping("w", stream="late")
    result = run_to_completion(b.create_topology(), {"kstorm.checkpoint.dir": str(tmp_path)})
    late = sorted((t.values[0]["ts"], t.values[0]["item"]) for t in result.sinks["late"].tuples)
    assert late == [(5_000, "mug"), (12_000, "cup"), (17_000, "ink")]
    assert result.progress["components"]["w"]["late"] == 3
    # watermark 38 s closes (0,10] and (10,20]; (30,40] stays open
    assert result.sinks["out"].values == [["k", 0, 10_000, 1, 1, [["pen", 1]]],
                                          ["k", 10_000, 20_000, 2, 1, [["cup", 2]]]]
