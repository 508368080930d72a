"""At-least-once on Spark and Kafka (issue 5; seeds 001 and 003).

Each test runs KafkaSpout -> work (``acking_topology.Flaky``) -> CaptureSink in-process,
over its own topic, and checks what a user would see: which records were re-run (the
bolt's execution log), what reached the sink, the spout's counters, the dead-letter topic
and the consumer group's committed offsets.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from acking_topology import (
    AckLoggingKafkaSpout,
    Fan,
    Flaky,
    Leaf,
    acks,
    executions,
    flaky_topology,
)
from kafka_read import committed, read_topic

from kstorm import BaseRichBolt, Fields, KafkaSpout, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from kstorm.acking import RetryPolicy
from kstorm.submit import TopologyHandle
from kstorm.testing import CaptureSink

pytestmark = pytest.mark.integration

RUN_TIMEOUT = 180.0
N = 40
VALUES = [f"v{i:02d}" for i in range(N)]


def conf(kafka: Any, checkpoint: Path, **extra: Any) -> dict[str, Any]:
    return {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.checkpoint.dir": str(checkpoint),
            "kstorm.trigger": "available-now",
            "kstorm.spark.master": "local[2]",
            "topology.guarantee": "at-least-once", **extra}


def setup_topic(kafka: Any, produce: Any, topic: str) -> dict[str, tuple[int, int]]:
    """Two partitions; returns value -> (partition, offset)."""
    create_topic(kafka.bootstrap_servers, topic, 2)
    where = {}
    for p in (0, 1):
        values = VALUES[p::2]
        for value, ack in zip(values, produce(kafka.bootstrap_servers, topic, values,
                                              partition=p), strict=True):
            where[value] = ack
    return where


def run(name: str, settings: dict[str, Any], topology: Any) -> TopologyHandle:
    handle = submit_topology(name, settings, topology)
    try:
        assert handle.await_termination(RUN_TIMEOUT), f"{name} still running"
    finally:
        handle.stop()
    return handle


def spout_counters(handle: TopologyHandle) -> dict[str, int]:
    return handle.progress["components"].get("events", {})


def test_failed_tuples_are_replayed_and_nothing_else_reruns(spark, kafka, topic_name,
                                                            checkpoint_dir, produce, tmp_path):
    setup_topic(kafka, produce, topic_name)
    failing = {"v03", "v17", "v22"}
    sink = CaptureSink()
    topology = flaky_topology(KafkaSpout(topic_name),
                              Flaky(str(tmp_path), failing, mode="fail"), sink)
    handle = run(f"fail-{uuid.uuid4().hex[:6]}", conf(kafka, checkpoint_dir), topology)

    runs = executions(tmp_path)
    assert {v for v, n in runs.items() if n == 2} == failing
    assert {v for v, n in runs.items() if n == 1} == set(VALUES) - failing
    out = [v[0] for v in handle.sinks["out"].values]
    assert Counter(out) == Counter(VALUES)  # each output once, failed ones after their retry
    counters = spout_counters(handle)
    assert counters["acked"] == N
    assert counters["failed"] == len(failing)
    assert counters["replayed"] == len(failing)
    assert counters.get("timed_out", 0) == 0
    assert counters["pending"] == 0


def test_tuples_never_acked_time_out_and_are_replayed(spark, kafka, topic_name,
                                                      checkpoint_dir, produce, tmp_path):
    setup_topic(kafka, produce, topic_name)
    held = {"v01", "v30"}
    sink = CaptureSink()
    topology = flaky_topology(KafkaSpout(topic_name), Flaky(str(tmp_path), held, mode="hold"),
                              sink)
    started = time.monotonic()
    handle = run(f"hold-{uuid.uuid4().hex[:6]}",
                 conf(kafka, checkpoint_dir, **{"topology.message.timeout.secs": 3}), topology)

    assert time.monotonic() - started > 3  # the run waited for the time-out
    runs = executions(tmp_path)
    assert {v for v, n in runs.items() if n == 2} == held
    assert {v for v, n in runs.items() if n == 1} == set(VALUES) - held
    assert Counter(v[0] for v in handle.sinks["out"].values) == Counter(VALUES)
    counters = spout_counters(handle)
    assert counters["timed_out"] == len(held)
    assert counters.get("failed", 0) == 0
    assert counters["replayed"] == len(held)
    assert counters["acked"] == N
    assert counters["pending"] == 0


def test_a_tuple_that_always_fails_goes_to_the_dead_letter_topic_after_its_retries(
        spark, kafka, topic_name, checkpoint_dir, produce, tmp_path):
    where = setup_topic(kafka, produce, topic_name)
    poison = "v05"
    dlq = f"{topic_name}-dlq"
    create_topic(kafka.bootstrap_servers, dlq, 1)
    spout = KafkaSpout(topic_name, retry=RetryPolicy(initial_delay_ms=0, delay_period_ms=50,
                                                     max_retries=2))
    sink = CaptureSink()
    topology = flaky_topology(spout, Flaky(str(tmp_path), {poison}, mode="always"), sink)
    handle = run(f"dlq-{uuid.uuid4().hex[:6]}",
                 conf(kafka, checkpoint_dir, **{"kstorm.dead.letter.topic": dlq}), topology)

    runs = executions(tmp_path)
    assert runs[poison] == 3  # the first attempt and two retries
    assert all(runs[v] == 1 for v in VALUES if v != poison)
    assert Counter(v[0] for v in handle.sinks["out"].values) == Counter(
        v for v in VALUES if v != poison)
    records = read_topic(kafka.bootstrap_servers, dlq)
    assert len(records) == 1
    headers = {k: v.decode() for k, v in records[0].headers()}
    partition, offset = where[poison]
    assert (headers["topic"], headers["partition"], headers["offset"]) == (
        topic_name, str(partition), str(offset))
    assert headers["component"] == "events"
    assert headers["error_type"] == "TupleFailed"
    assert "max_retries=2" in headers["message"]
    assert records[0].value() == poison.encode()
    counters = spout_counters(handle)
    assert counters["dead_lettered"] == 1
    assert counters["failed"] == 3
    assert counters["replayed"] == 2
    assert counters["acked"] == N - 1
    assert counters["pending"] == 0


def test_group_offsets_never_pass_an_unacked_offset(spark, kafka, topic_name, checkpoint_dir,
                                                     produce, tmp_path):
    where = setup_topic(kafka, produce, topic_name)
    held = "v10"  # partition 0, offset 5: its tree is never acked on the first attempt
    partition, offset = where[held]
    tp = (topic_name, partition)
    other = (topic_name, 1 - partition)
    group = f"g-{uuid.uuid4().hex[:8]}"
    sink = CaptureSink()
    topology = flaky_topology(KafkaSpout(topic_name, group_id=group),
                              Flaky(str(tmp_path), {held}, mode="hold"), sink)
    settings = conf(kafka, checkpoint_dir, **{"kstorm.trigger": "continuous",
                                              "kstorm.trigger.interval.ms": 200,
                                              "topology.message.timeout.secs": 8})
    handle = submit_topology(f"slow-{uuid.uuid4().hex[:6]}", settings, topology)
    seen: list[int] = []
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            assert handle.is_active, "the topology stopped"
            assert time.monotonic() < deadline, f"no progress: {handle.progress}"
            offsets = committed(kafka.bootstrap_servers, group, [tp, other])
            # read after the offsets: the sink has a record before the group can pass it
            acked = held in [v[0] for v in handle.sinks["out"].values]
            if offsets[tp] >= 0:
                seen.append(offsets[tp])
                if not acked:
                    assert offsets[tp] <= offset, f"group passed un-acked offset {offset}"
            if acked and offsets[tp] == N // 2:
                break
            time.sleep(0.2)
    finally:
        handle.stop()
    assert offset in seen, f"the group never waited at the un-acked offset: {seen}"
    assert committed(kafka.bootstrap_servers, group, [other])[other] == N // 2
    assert executions(tmp_path)[held] == 2


@pytest.mark.parametrize("how", [{"topology.guarantee": "at-most-once"},
                                 {"topology.acker.executors": 0}])
def test_at_most_once_tracks_nothing_and_loses_failed_tuples(spark, kafka, topic_name,
                                                             checkpoint_dir, produce, tmp_path,
                                                             how):
    setup_topic(kafka, produce, topic_name)
    failing = {"v03", "v17"}
    sink = CaptureSink()
    topology = flaky_topology(KafkaSpout(topic_name),
                              Flaky(str(tmp_path), failing, mode="fail"), sink)
    handle = run(f"amo-{uuid.uuid4().hex[:6]}", conf(kafka, checkpoint_dir, **how), topology)

    assert executions(tmp_path) == Counter(VALUES)  # nothing re-run
    assert Counter(v[0] for v in handle.sinks["out"].values) == Counter(
        v for v in VALUES if v not in failing)  # the failed tuples are lost, as documented
    assert not (checkpoint_dir / "state").exists()  # no acker state
    assert not (checkpoint_dir / "kstorm" / "acking").exists()
    components = handle.progress["components"]
    assert "__acker" not in components
    assert "replayed" not in components.get("events", {})
    assert components["work"]["failed"] == len(failing)


def test_at_most_once_a_kafka_spouts_ack_runs_for_every_record_once_emitted(
        spark, kafka, topic_name, checkpoint_dir, produce, tmp_path):
    """Seed 003: with no ackers the spout acks a tuple right after emit, whatever follows."""
    where = setup_topic(kafka, produce, topic_name)
    failing = {"v03", "v17"}
    spout = AckLoggingKafkaSpout(topic_name, ack_dir=str(tmp_path))
    topology = flaky_topology(spout, Flaky(str(tmp_path), failing, mode="fail"),
                              CaptureSink())
    run(f"amo-ack-{uuid.uuid4().hex[:6]}",
        conf(kafka, checkpoint_dir, **{"topology.acker.executors": 0}), topology)
    assert acks(tmp_path) == Counter((topic_name, p, o) for p, o in where.values())


def test_a_tree_of_ten_thousand_tuples_completes(spark, kafka, topic_name, checkpoint_dir,
                                                  produce):
    create_topic(kafka.bootstrap_servers, topic_name, 1)
    produce(kafka.bootstrap_servers, topic_name, ["root"])
    sink = CaptureSink()
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic_name))
    builder.set_bolt("fan", Fan(10_000)).shuffle_grouping("events")
    builder.set_bolt("leaf", Leaf(), 2).fields_grouping("fan", Fields("i"))
    builder.set_bolt("out", sink).shuffle_grouping("leaf")
    handle = run(f"tree-{uuid.uuid4().hex[:6]}", conf(kafka, checkpoint_dir),
                 builder.create_topology())

    assert sum(n for _, n in handle.sinks["out"].values) == 10_000
    counters = handle.progress["components"]
    assert counters["events"]["acked"] == 1
    assert counters["events"]["pending"] == 0
    assert counters["__acker"]["pending"] == 0
    assert counters["leaf"]["acked"] == 10_000


def test_word_count_with_a_stateful_bolt_runs_at_least_once(spark, kafka, topic_name,
                                                            checkpoint_dir, produce):
    """Trees spanning three stages (split, the stateful count behind a fields grouping)."""
    import json

    from topologies import sentence_records, word_count

    from serdes.json import JsonSerde

    create_topic(kafka.bootstrap_servers, topic_name, 2)
    records = sentence_records(600, seed=3)
    for p in (0, 1):
        produce(kafka.bootstrap_servers, topic_name, records[p::2], partition=p)
    expected = Counter(w for r in records for w in json.loads(r)["sentence"].split())
    spout = KafkaSpout(topic_name, value_serde=JsonSerde({"id": int, "sentence": str}),
                       max_offsets_per_batch=200)
    handle = run(f"wc-{uuid.uuid4().hex[:6]}",
                 conf(kafka, checkpoint_dir, **{"topology.acker.executors": 2}),
                 word_count(spout, CaptureSink()))

    final: dict[str, int] = {}
    for word, count in handle.sinks["out"].values:
        final[word] = max(count, final.get(word, 0))
    assert final == dict(expected)
    components = handle.progress["components"]
    assert components["sentences"]["acked"] == len(records)
    assert components["sentences"]["pending"] == 0
    assert components["count"]["acked"] == sum(expected.values())
    assert components["__acker"]["pending"] == 0


def test_max_spout_pending_bounds_the_unacked_tuples_of_a_batch(spark, kafka, topic_name,
                                                                checkpoint_dir, produce,
                                                                tmp_path):
    setup_topic(kafka, produce, topic_name)
    held = {"v00", "v01", "v02"}  # un-acked until they time out: they hold places
    topology = flaky_topology(KafkaSpout(topic_name), Flaky(str(tmp_path), held, mode="hold"),
                              CaptureSink())
    settings = conf(kafka, checkpoint_dir, **{"topology.max.spout.pending": 10,
                                              "topology.message.timeout.secs": 2})
    handle = run(f"pending-{uuid.uuid4().hex[:6]}", settings, topology)

    rows = [int(b["numInputRows"]) for b in handle.recent_batches]
    assert sum(rows) == N + len(held)  # every record once, plus the retries
    assert max(rows) <= 10
    assert Counter(v[0] for v in handle.sinks["out"].values) == Counter(VALUES)


def test_windowed_bolt_acks_its_tuples_once_their_window_fired(
        spark, kafka, topic_name, checkpoint_dir, produce):
    # seed 004: a windowed bolt's tuples stay in their trees until no window needs them
    # (a tumbling window's: once it fired, its emits anchored to them); nothing times out
    from windowed_bolts import ValueWindows

    from kstorm.windowing import Count

    setup_topic(kafka, produce, topic_name)
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic_name))
    builder.set_bolt("windows", ValueWindows().with_tumbling_window(Count(5))
                     ).global_grouping("events")
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("windows")
    handle = run(f"win-{uuid.uuid4().hex[:6]}",
                 conf(kafka, checkpoint_dir, **{"topology.message.timeout.secs": 3}),
                 builder.create_topology())
    windows = [v[0].split(",") for v in handle.sinks["out"].values]
    assert all(len(w) == 5 for w in windows)
    assert sorted(v for w in windows for v in w) == sorted(VALUES)
    counters = spout_counters(handle)
    assert counters.get("acked") == N
    assert not counters.get("timed_out") and not counters.get("replayed")


class FailsAWindow(BaseRichBolt):
    """Fails the first window result holding ``v07`` (once: a marker file), passes the rest."""

    def __init__(self, directory: str) -> None:
        self.marker = Path(directory) / "failed-a-window"

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("values"))

    def execute(self, tuple_: Any) -> None:
        if "v07" in tuple_.values[0].split(",") and not self.marker.exists():
            self.marker.touch()
            self.collector.fail(tuple_)
            return
        self.collector.emit(tuple_.values, anchors=tuple_)
        self.collector.ack(tuple_)


def test_a_failure_downstream_of_a_window_replays_the_windows_tuples(
        spark, kafka, topic_name, checkpoint_dir, produce, tmp_path):
    # seed 004: the window's emits are anchored to its tuples, so failing one fails their
    # trees: the spout replays exactly those five records, which make a window again
    from windowed_bolts import ValueWindows

    from kstorm.windowing import Count

    setup_topic(kafka, produce, topic_name)
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic_name))
    builder.set_bolt("windows", ValueWindows().with_tumbling_window(Count(5))
                     ).global_grouping("events")
    builder.set_bolt("check", FailsAWindow(str(tmp_path))).shuffle_grouping("windows")
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("check")
    handle = run(f"winfail-{uuid.uuid4().hex[:6]}", conf(kafka, checkpoint_dir),
                 builder.create_topology())
    assert (tmp_path / "failed-a-window").exists()
    windows = [v[0].split(",") for v in handle.sinks["out"].values]
    assert all(len(w) == 5 for w in windows)
    # the failed window's values came back (replayed), every value reached the sink once
    assert Counter(v for w in windows for v in w) == Counter(VALUES)
    counters = spout_counters(handle)
    assert counters["failed"] == 5 and counters["replayed"] == 5
    assert counters["acked"] == N and counters["pending"] == 0
    assert not counters.get("timed_out")


def test_a_lost_checkpoint_does_not_forget_tuples_waiting_for_a_retry(
        spark, kafka, redis_server, topic_name, checkpoint_dir, produce, tmp_path):
    # At least once, the exactly-once sink's offsets are ahead of a failed tuple waiting for
    # its retry; the lowest un-acked offsets stored with them bring it back after the
    # checkpoint is lost.
    import redis as redis_py

    from sinks.redis import RedisConfig, RedisSink

    setup_topic(kafka, produce, topic_name)
    waiting = "v05"
    prefix = f"lost-{uuid.uuid4().hex[:6]}"

    def topology(retry: RetryPolicy) -> Any:
        builder = TopologyBuilder()
        builder.set_spout("events", KafkaSpout(topic_name, retry=retry))
        builder.set_bolt("work", Flaky(str(tmp_path), {waiting}, mode="fail")
                         ).shuffle_grouping("events")
        builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_server.url),
                                            key=prefix + ":{value}", value="value",
                                            merge="set")).shuffle_grouping("work")
        return builder.create_topology()

    name = f"lost-{uuid.uuid4().hex[:6]}"
    client = redis_py.Redis.from_url(redis_server.url)
    # 1: the tuple fails and waits an hour for its retry; everything else is stored
    handle = submit_topology(name, conf(kafka, checkpoint_dir, **{
        "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": 200}),
        topology(RetryPolicy(initial_delay_ms=3_600_000)))
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while len(client.keys(f"{prefix}:*")) < N - 1:
            assert handle.is_active and time.monotonic() < deadline, handle.progress
            time.sleep(0.2)
        # the commit phase writes the sinks before it updates progress: wait for both
        while spout_counters(handle).get("pending") != 1:
            assert handle.is_active and time.monotonic() < deadline, handle.progress
            time.sleep(0.1)
    finally:
        handle.stop()
    assert not client.exists(f"{prefix}:{waiting}")
    # 2: the checkpoint is lost; the topology resumes from the sink's record
    import shutil

    shutil.rmtree(checkpoint_dir)
    run(name, conf(kafka, checkpoint_dir), topology(RetryPolicy()))
    assert client.get(f"{prefix}:{waiting}") == f"\"{waiting}\"".encode()  # JSON
    assert len(client.keys(f"{prefix}:*")) == N
