"""The example topologies do what their docstrings say, on a real broker, Redis and Spark."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import pytest

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

    # windows whose end the final watermark (min over partitions of max ts - lag) passed
    watermark = min(max(v["ts"] for v in vs) for vs in views.values()) - LAG_MS
    users: dict[str, set[str]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for view in (v for vs in views.values() for v in vs):
        start = view["ts"] - view["ts"] % WINDOW_MS
        if start + WINDOW_MS < watermark:
            key = f"page-views:{view['page']}:{start}"
            counts[key] += 1
            users[key].add(view["user"])
    expected = {k: {"views": counts[k], "users": len(users[k])} for k in counts}
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
