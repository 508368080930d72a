"""The Prometheus view of a topology's progress (``kstorm.metrics.port``)."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest

from kstorm._runtime.metrics import MetricsServer, registry_for
from kstorm._runtime.progress import Progress


def test_counters_gauges_offsets_and_dead_letters() -> None:
    progress = Progress()
    progress.add_counters({"split.emitted": 5, "count.executed": 5})
    progress.increment({"__transactions.failed": 2})
    progress.set_gauges({"__acker.pending": 7})
    progress.batch_committed(3, {"words": {"events": {"0": 120, "1": 98}}}, 0.25, 0.125)
    text = generate_latest(registry_for("wc", progress, lambda: 4)).decode()
    for line in ['kstorm_batches_total{topology="wc"} 1.0',
                 'kstorm_commit_blocking_seconds_total{topology="wc"} 0.125',
                 'kstorm_last_batch_id{topology="wc"} 3.0',
                 'kstorm_commit_seconds_total{topology="wc"} 0.25',
                 'kstorm_component_events_total{component="split",event="emitted",'
                 'topology="wc"} 5.0',
                 'kstorm_component_events_total{component="__transactions",event="failed",'
                 'topology="wc"} 2.0',
                 'kstorm_component_gauge{component="__acker",name="pending",topology="wc"} 7.0',
                 'kstorm_dead_letters_total{topology="wc"} 4.0',
                 'kstorm_source_end_offset{partition="1",spout="words",topic="events",'
                 'topology="wc"} 98.0']:
        assert line in text, line


def test_served_over_http_on_a_free_port_until_closed() -> None:
    progress = Progress()
    progress.add_counters({"split.emitted": 1})
    server = MetricsServer("wc", progress, lambda: 0, 0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        body = urllib.request.urlopen(url, timeout=5).read().decode()  # noqa: S310 - local
        assert 'kstorm_batches_total{topology="wc"} 0.0' in body
        progress.batch_committed(0, {}, 0.1)
        body = urllib.request.urlopen(url, timeout=5).read().decode()  # noqa: S310
        assert 'kstorm_batches_total{topology="wc"} 1.0' in body  # read at scrape time
    finally:
        server.close()


def test_consumer_lag_is_asked_at_scrape_time_and_never_negative() -> None:
    progress = Progress()
    progress.batch_committed(0, {"words": {"events": {"0": 100, "1": 50}}}, 0.1)
    asked: list[tuple[str, list[tuple[str, int]]]] = []

    def highs(spout: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        asked.append((spout, partitions))
        return {("events", 0): 130, ("events", 1): 40}  # a broker reporting a short high mark

    text = generate_latest(registry_for("wc", progress, lambda: 0, highs)).decode()
    assert asked == [("words", [("events", 0), ("events", 1)])]
    assert 'kstorm_consumer_lag{partition="0",spout="words",topic="events",topology="wc"} 30.0' \
        in text
    assert 'kstorm_consumer_lag{partition="1",spout="words",topic="events",topology="wc"} 0.0' \
        in text

    def down(spout: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        raise RuntimeError("broker away")

    text = generate_latest(registry_for("wc", progress, lambda: 0, down)).decode()
    assert "kstorm_batches_total" in text and 'kstorm_consumer_lag{' not in text
