"""At-least-once on Spark and Kafka (issue 5; seeds 001 and 003).

Each test runs KafkaSpout -> work (``acking_topology.Flaky``) -> CaptureSink in-process,
over its own topic, and checks what a user would see: which records were re-run (the
bolt's execution log), what reached the sink, the spout's counters, the dead-letter topic
and the consumer group's committed offsets.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from acking_topology import Flaky, executions, flaky_topology

from kstorm import KafkaSpout, submit_topology
from kstorm._kafka import create_topic
from kstorm.runtime import TopologyHandle
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
