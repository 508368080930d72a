"""Watching a running topology: a Prometheus endpoint and one log line per committed batch."""

from __future__ import annotations

import logging
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from topologies import SplitSentence

from kstorm import Fields, TopologyBuilder, submit_topology
from kstorm.errors import ConfigError
from kstorm.testing import CaptureSink, ListSpout

pytestmark = pytest.mark.integration


def _topology() -> Any:
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([[["a b"], ["b"]], [["c"]]], Fields("line")))
    builder.set_bolt("split", SplitSentence("line")).shuffle_grouping("words")
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("split")
    return builder.create_topology()


def _run_to_end(name: str, tmp_path: Path, **conf: Any) -> Any:
    """Submit ``_topology()`` available-now with ``conf``; the handle once it ended."""
    handle = submit_topology(name, {"kstorm.checkpoint.dir": str(tmp_path / "ck"),
                                    "kstorm.trigger": "available-now", **conf}, _topology())
    try:
        assert handle.await_termination(180)
    finally:
        handle.stop()
    return handle


def test_metrics_endpoint_and_a_log_line_per_batch(spark: Any, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kstorm.progress")
    handle = submit_topology("observed", {"kstorm.checkpoint.dir": str(tmp_path / "ck"),
                                          "kstorm.trigger": "available-now",
                                          "kstorm.metrics.port": 0}, _topology())
    try:
        assert handle.await_termination(180)
        assert handle.metrics_url is not None
        body = urllib.request.urlopen(handle.metrics_url, timeout=5).read().decode()  # noqa: S310
        batches = handle.progress["batches"]
        assert f'kstorm_batches_total{{topology="observed"}} {float(batches)}' in body
        assert ('kstorm_component_events_total{component="split",event="emitted",'
                'topology="observed"} 4.0') in body
        lines = [r.getMessage() for r in caplog.records if r.name == "kstorm.progress"]
        assert len(lines) == batches and "topology 'observed' batch 0 (txid 0)" in lines[0]
        port = int(handle.metrics_url.split(":")[2].split("/")[0])
    finally:
        handle.stop()
    with socket.socket() as probe:  # closed with the topology
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_busy_metrics_port_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))  # noqa: S104
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"cannot serve metrics on port {port}"):
            submit_topology("busy", {"kstorm.checkpoint.dir": str(tmp_path / "ck"),
                                     "kstorm.trigger": "available-now",
                                     "kstorm.metrics.port": port}, _topology())


def test_counters_move_while_it_runs(spark: Any, tmp_path: Path) -> None:
    import time

    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([[[f"w{b} x"]] for b in range(8)], Fields("line")))
    builder.set_bolt("split", SplitSentence("line")).shuffle_grouping("words")
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("split")
    handle = submit_topology("moving", {"kstorm.checkpoint.dir": str(tmp_path / "ck"),
                                        "kstorm.trigger": "continuous",
                                        "kstorm.trigger.interval.ms": 300,
                                        "kstorm.metrics.port": 0}, builder.create_topology())
    try:
        seen: list[float] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and (len(set(seen)) < 3 or seen[-1] < 8):
            body = urllib.request.urlopen(handle.metrics_url, timeout=5).read().decode()  # noqa: S310
            for line in body.splitlines():
                if line.startswith('kstorm_batches_total{topology="moving"}'):
                    seen.append(float(line.split()[-1]))
            time.sleep(0.2)
        assert len(set(seen)) >= 3, seen  # scraped at three different points of the run
        assert seen == sorted(seen) and seen[-1] >= 8, seen
    finally:
        handle.stop()


def test_the_batch_line_has_inputs_late_tuples_and_the_watermark(
        spark: Any, kafka: Any, topic_name: str, tmp_path: Path, produce: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    import json

    from kstorm import KafkaSpout
    from kstorm._kafka.client import create_topic
    from kstorm.windowing import Duration
    from kstorm.windowing.aggregate import Agg, WindowedAggregate
    from serdes import JsonSerde

    create_topic(kafka.bootstrap_servers, topic_name, 1)
    stamps = [*range(0, 50_000, 1000), 1_000, *range(50_000, 100_000, 1000)]  # one late
    produce(kafka.bootstrap_servers, topic_name,
            [json.dumps({"key": "a", "ts": ts}) for ts in stamps])
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic_name, value_serde=JsonSerde(
        {"key": str, "ts": int}), max_offsets_per_batch=51, first_batch_max_offsets=51))
    builder.set_bolt("per_key", WindowedAggregate(key="key", n=Agg.count())
                     .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
                     .with_lag(Duration.seconds(5))).fields_grouping("events", Fields("key"))
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("per_key")
    caplog.set_level(logging.INFO, logger="kstorm.progress")
    handle = submit_topology(topic_name, {"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                          "kstorm.checkpoint.dir": str(tmp_path / "ck"),
                                          "kstorm.trigger": "available-now",
                                          "kstorm.metrics.port": 0},
                             builder.create_topology())
    try:
        assert handle.await_termination(180)
        body = urllib.request.urlopen(handle.metrics_url, timeout=10).read().decode()  # noqa: S310
    finally:
        handle.stop()
    assert (f'kstorm_consumer_lag{{partition="0",spout="events",topic="{topic_name}",'
            f'topology="{topic_name}"}} 0.0') in body  # drained
    lines = [r.getMessage() for r in caplog.records if r.name == "kstorm.progress"]
    assert len(lines) == 2, lines
    assert "in events ? records" in lines[0] and "1 late" in lines[0]
    assert "in events 50 records" in lines[1] and "0 late" in lines[1]
    assert "watermark {'per_key': 94000}" in lines[1], lines[1]


def test_topology_debug_logs_every_emitted_tuple_on_the_driver(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kstorm.debug")
    handle = _run_to_end("debugged", tmp_path, **{"topology.debug": True})
    shown = [r.getMessage() for r in caplog.records if r.name == "kstorm.debug"]
    split = sorted(m.split(": ", 1)[1] for m in shown if ": split emitted on default" in m)
    assert split == ["split emitted on default: ['a']", "split emitted on default: ['b']",
                     "split emitted on default: ['b']", "split emitted on default: ['c']"]
    assert handle.captured == []  # logged, not kept (kstorm.capture.emitted is off)


def test_workers_in_one_process_run_as_storm_s_local_cluster_and_say_so(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kstorm")
    handle = _run_to_end("local-workers", tmp_path, **{"topology.workers": 3})
    assert sorted(v[0] for v in handle.sinks["out"].values) == ["a", "b", "b", "c"]
    notes = [r.getMessage() for r in caplog.records if "topology.workers = 3" in r.getMessage()]
    assert len(notes) == 1 and "as Storm's LocalCluster" in notes[0]
