"""The example topologies do what their docstrings say, on a real broker, Redis and Spark."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import pytest
from page_views_truth import page_views_truth

from examples import page_views
from kstorm import submit_topology
from kstorm._kafka.client import create_topic

pytestmark = pytest.mark.integration

WINDOW_MS, LAG_MS, BASE = 10_000, 5_000, 1_700_000_000_000
PAGES, USERS = ["/home", "/cart", "/help"], [f"u-{i}" for i in range(10)]


def test_page_views_counts_views_and_distinct_users_per_closed_window(
        spark: Any, kafka: Any, redis_server: Any, topic_name: str, checkpoint_dir: Any,
        produce: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = kafka.bootstrap_servers
    create_topic(bootstrap, topic_name, partitions=2)
    rng = random.Random(13)
    views: dict[int, list[dict[str, Any]]] = {}
    for partition in range(2):  # in order, 30 s of event time per partition
        views[partition] = [{"user": rng.choice(USERS), "page": rng.choice(PAGES),
                             "ts": BASE + i * 100 + 7} for i in range(300)]
        produce(bootstrap, topic_name, [json.dumps(v) for v in views[partition]],
                partition=partition)
    monkeypatch.setenv("PAGE_VIEWS_TOPIC", topic_name)
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    handle = submit_topology(f"pv{topic_name[-8:]}", {
        "kafka.bootstrap.servers": bootstrap, "kstorm.trigger": "available-now",
        "kstorm.checkpoint.dir": str(checkpoint_dir)}, page_views.topology().create_topology())
    try:
        assert handle.await_termination(180), "the example topology did not drain its topic"
    finally:
        handle.stop()

    expected = page_views_truth(views)
    stored = handle.sinks["store"].read_all("page-views:")
    assert stored == expected
    assert len(expected) == 6  # 3 pages x the 2 windows closed by the watermark


def test_transactional_global_count_example_counts_every_tuple_once(
        spark: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from examples import transactional_global_count as example

    monkeypatch.setenv("REDIS_URL", redis_server.url)
    assert example.main() == 0
    out = capsys.readouterr().out
    assert "global-count:total = 19 (expected 19)" in out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("txid")] == \
        ["txid 1", "txid 2", "txid 3"]  # Storm: "the first batch has id 1"


def test_transactional_word_count_example_updates_both_stores_exactly(
        spark: Any, kafka: Any, redis_server: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from examples import transactional_word_count as example

    monkeypatch.setenv("REDIS_URL", redis_server.url)
    monkeypatch.setenv("KSTORM_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    assert example.main() == 0
    assert "per word exact, per length exact" in capsys.readouterr().out


def test_storm_s_stateful_windowing_example_sums_the_same_windows_on_spark(
        spark: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The port of storm-starter's StatefulWindowingTopology on Spark: the running sums of
    its Count(5)-every-Count(3) windows, as the test driver and Storm compute them."""
    from examples.storm_windowing import stateful_windowing

    n = 61
    handle = submit_topology("storm-stateful-windowing", {
        "kstorm.trigger": "available-now", "kstorm.checkpoint.dir": str(tmp_path / "c")},
        stateful_windowing(limit=n, seed=11, sleep_ms=0))
    assert handle.await_termination(300)
    rand = random.Random(11)
    values = [rand.randrange(1000) for _ in range(n)]
    expected, running = [], 0
    for end in range(3, n + 1, 3):
        running += sum(values[max(0, end - 5):end])
        expected.append(str(running))
    printed = [line for line in capsys.readouterr().out.splitlines() if line.isdigit()]
    assert printed == expected


def test_storm_s_sliding_windows_take_the_spout_s_emit_order_on_spark(
        spark: Any, tmp_path: Any) -> None:
    """storm-starter's SlidingWindowTopology windows on Spark: the last 30 of a free-form
    spout's tuples every 10, then 3 of those windows' outputs at a time, whatever the
    micro-batches (17 tuples each here) -- the tuples keep their emit order through the
    envelope and the exchange in between. The example's own ``SlidingWindowSumBolt``, whose
    running sum is an instance field, gives each window's sum (its fields go with its
    windows, whichever Python worker runs its task)."""
    from examples.storm_windowing import RandomIntegerSpout, SlidingWindowSumBolt
    from kstorm import BaseWindowedBolt, Fields, TopologyBuilder
    from kstorm.testing import CaptureSink
    from kstorm.windowing import Count

    class Values_(BaseWindowedBolt):
        def prepare(self, conf: Any, context: Any, collector: Any) -> None:
            self.collector = collector

        def declare_output_fields(self, declarer: Any) -> None:
            declarer.declare(Fields("values"))

        def execute(self, window: Any) -> None:
            self.collector.emit([[t.get_value(0) for t in window.get()]])

    n = 125
    builder = TopologyBuilder()
    builder.set_spout("integer", RandomIntegerSpout(n, 13, 0), 1)
    builder.set_bolt("sliding", Values_().with_window(Count.of(30), Count.of(10)), 1
                     ).shuffle_grouping("integer")
    builder.set_bolt("tumbling", Values_().with_tumbling_window(Count.of(3)), 1
                     ).shuffle_grouping("sliding")
    builder.set_bolt("sliding-out", CaptureSink()).shuffle_grouping("sliding")
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("tumbling")
    builder.set_bolt("sum", SlidingWindowSumBolt().with_window(Count.of(30), Count.of(10)), 1
                     ).shuffle_grouping("integer")
    builder.set_bolt("sums", CaptureSink()).shuffle_grouping("sum")
    handle = submit_topology("storm-sliding-window", {
        "kstorm.trigger": "available-now", "kstorm.checkpoint.dir": str(tmp_path / "c"),
        "kstorm.spout.max.batch.tuples": 17}, builder.create_topology())
    assert handle.await_termination(300)
    rand = random.Random(13)
    values = [rand.randrange(1000) for _ in range(n)]
    windows = [values[max(0, end - 30):end] for end in range(10, n + 1, 10)]
    assert [row[0] for row in handle.sinks["sliding-out"].values] == windows
    assert [row[0] for row in handle.sinks["out"].values] == [
        windows[i:i + 3] for i in range(0, len(windows) - 2, 3)]
    assert [row[0] for row in handle.sinks["sums"].values] == [sum(w) for w in windows]


def test_enrichment_counts_each_advertiser_s_clicks_per_closed_window(
        spark: Any, kafka: Any, redis_server: Any, checkpoint_dir: Any, produce: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/enrichment.py: clicks joined with a compacted campaign topic, then counted
    per advertiser and 10 s window; every stored count equals the one computed here."""
    from examples import enrichment

    bootstrap = kafka.bootstrap_servers
    suffix = f"{random.randrange(16**6):06x}"
    clicks_topic, campaigns_topic = f"clicks-{suffix}", f"campaigns-{suffix}"
    create_topic(bootstrap, clicks_topic, partitions=2)
    create_topic(bootstrap, campaigns_topic, partitions=1)
    table = {c: f"adv-{c % 3}" for c in range(6)}  # campaign 6 has no row: its clicks drop
    produce(bootstrap, campaigns_topic, [json.dumps({"campaign_id": c, "advertiser": a})
                                         for c, a in table.items()])
    rng = random.Random(5)
    clicks = {p: [{"user": rng.choice(USERS), "campaign_id": rng.randint(0, 6),
                   "ts": BASE + i * 100 + p} for i in range(300)] for p in range(2)}
    for p, rows in clicks.items():
        produce(bootstrap, clicks_topic, [json.dumps(c) for c in rows], partition=p)
    monkeypatch.setenv("CLICKS_TOPIC", clicks_topic)
    monkeypatch.setenv("CAMPAIGNS_TOPIC", campaigns_topic)
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    handle = submit_topology(f"en{suffix}", {
        "kafka.bootstrap.servers": bootstrap, "kstorm.trigger": "available-now",
        "kstorm.checkpoint.dir": str(checkpoint_dir)}, enrichment.topology().create_topology())
    try:
        assert handle.await_termination(180), "the example did not drain its topics"
    finally:
        handle.stop()

    joined = [c for rows in clicks.values() for c in rows if c["campaign_id"] in table]
    watermark = max(c["ts"] for c in joined) - LAG_MS  # one windowed task: one stream
    expected: dict[str, int] = defaultdict(int)
    for click in joined:  # Storm's windows: end - 10 s < ts <= end, start = end - 10 s
        end = -(-click["ts"] // WINDOW_MS) * WINDOW_MS
        if end <= watermark:
            expected[f"clicks:{table[click['campaign_id']]}:{end - WINDOW_MS}"] += 1
    assert handle.sinks["store"].read_all("clicks:") == dict(expected)
    # 3 advertisers x the 2 windows the watermark closed, and the window ending at BASE
    # (one click exactly on it)
    assert len(expected) == 7


def test_sessions_stores_each_closed_session_of_each_user_once(
        spark: Any, kafka: Any, redis_server: Any, topic_name: str, checkpoint_dir: Any,
        produce: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/sessions.py: every session the final watermark closed, exactly, from a
    ground truth cut here by the definition (a user's views, cut at gaps over 30 s)."""
    from examples import sessions

    gap, lag = 30_000, 5_000
    create_topic(kafka.bootstrap_servers, topic_name, partitions=2)
    rng = random.Random(17)
    views: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    clock = BASE
    for _ in range(600):  # one stream of time; a user's views all in one partition
        clock += rng.choice([100, 900, 4_000, 12_000])
        user = rng.choice(USERS)
        views[int(user.split("-")[1]) % 2].append(
            {"user": user, "page": rng.choice(PAGES), "ts": clock})
    for partition, rows in views.items():
        produce(kafka.bootstrap_servers, topic_name, [json.dumps(v) for v in rows],
                partition=partition)
    monkeypatch.setenv("SESSIONS_TOPIC", topic_name)
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    handle = submit_topology(f"ss{topic_name[-8:]}", {
        "kafka.bootstrap.servers": kafka.bootstrap_servers, "kstorm.trigger": "available-now",
        "kstorm.checkpoint.dir": str(checkpoint_dir)}, sessions.topology().create_topology())
    try:
        assert handle.await_termination(180), "the example did not drain its topic"
    finally:
        handle.stop()

    # per task the watermark is the lowest partition's latest timestamp minus the lag;
    # a session closes once it passes last + gap (a session left open is not stored)
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for view in (v for rows in views.values() for v in rows):
        by_user[view["user"]].append(view)
    truth: dict[str, dict[str, int]] = {}
    for user, rows in by_user.items():
        cut: list[list[dict[str, Any]]] = []
        for view in sorted(rows, key=lambda v: v["ts"]):
            if cut and view["ts"] - cut[-1][-1]["ts"] <= gap:
                cut[-1].append(view)
            else:
                cut.append([view])
        for s in cut:
            truth[f"sessions:{user}:{s[0]['ts']}"] = {
                "end": s[-1]["ts"] + gap, "views": len(s), "pages": len({v["page"] for v in s})}
    stored = handle.sinks["store"].read_all("sessions:")
    assert stored and all(truth.get(k) == v for k, v in stored.items()), stored
    watermark = min(rows[-1]["ts"] for rows in views.values()) - lag
    surely_closed = {k for k, v in truth.items() if v["end"] < watermark - 15_000}
    assert surely_closed <= set(stored)
    assert len(surely_closed) > 20
