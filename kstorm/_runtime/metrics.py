"""Prometheus metrics of a running topology, read from its :class:`Progress` on each scrape.

With ``kstorm.metrics.port`` set, the driver serves ``/metrics`` (prometheus-client's HTTP
server; port 0 picks a free one, ``TopologyHandle.metrics_url`` says which). Nothing is
counted twice: a scrape renders what the commit phase already keeps.

========================================  ========  ======================================
metric                                    type      labels
========================================  ========  ======================================
``kstorm_batches_total``                  counter   topology
``kstorm_last_batch_id``                  gauge     topology
``kstorm_commit_seconds_total``           counter   topology (time in the commit phase)
``kstorm_commit_blocking_seconds_total``  counter   topology (of which batches waited for)
``kstorm_component_events_total``         counter   topology, component, event (emitted,
                                                    executed, acked, failed, late,
                                                    dead_lettered...; ``__transactions``:
                                                    failed attempts by kind)
``kstorm_component_gauge``                gauge     topology, component, name (pending...)
``kstorm_dead_letters_total``             counter   topology
``kstorm_source_end_offset``              gauge     topology, spout, topic, partition (the
                                                    last committed batch's end offsets)
``kstorm_consumer_lag``                   gauge     topology, spout, topic, partition: the
                                                    partition's high watermark (asked at
                                                    scrape time) minus that end offset
========================================  ========  ======================================

Example:
    >>> from prometheus_client import generate_latest
    >>> progress = Progress()
    >>> progress.add_counters({"split.emitted": 3})
    >>> text = generate_latest(registry_for("wc", progress, lambda: 0)).decode()
    >>> line = 'kstorm_component_events_total{component="split",event="emitted",topology="wc"}'
    >>> f"{line} 3.0" in text
    True
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kstorm._runtime.progress import Progress

log = logging.getLogger("kstorm.metrics")


HighWatermarks = Callable[[str, list[tuple[str, int]]], dict[tuple[str, int], int]]
"""``(spout, [(topic, partition)...]) -> {(topic, partition): high watermark}``."""


class _ProgressCollector:
    def __init__(self, topology: str, progress: Progress, dead_letters: Callable[[], int],
                 highs: HighWatermarks | None = None) -> None:
        self.topology, self.progress, self.dead_letters = topology, progress, dead_letters
        self.highs = highs

    def collect(self) -> Iterator[Metric]:
        snap = self.progress.snapshot()
        t = self.topology
        batches = CounterMetricFamily("kstorm_batches", "Batches committed",
                                      labels=["topology"])
        batches.add_metric([t], snap["batches"])
        yield batches
        if snap["last_batch_id"] is not None:
            last = GaugeMetricFamily("kstorm_last_batch_id", "Last committed Spark batch id",
                                     labels=["topology"])
            last.add_metric([t], snap["last_batch_id"])
            yield last
        seconds = CounterMetricFamily("kstorm_commit_seconds", "Time spent in commit phases",
                                      labels=["topology"])
        seconds.add_metric([t], snap["commit_seconds"])
        yield seconds
        blocking = CounterMetricFamily(
            "kstorm_commit_blocking_seconds",
            "Time batches waited for their commit phase (less than kstorm_commit_seconds when "
            "the sinks' commit overlaps the next batch)", labels=["topology"])
        blocking.add_metric([t], snap["commit_blocking_seconds"])
        yield blocking
        events = CounterMetricFamily("kstorm_component_events",
                                     "Per-component counters (tuples and outcomes)",
                                     labels=["topology", "component", "event"])
        gauges = GaugeMetricFamily("kstorm_component_gauge", "Per-component current values",
                                   labels=["topology", "component", "name"])
        gauge_keys = set(self.progress.gauges)
        for component, values in sorted(snap["components"].items()):
            for name, value in sorted(values.items()):
                if f"{component}.{name}" in gauge_keys:
                    gauges.add_metric([t, component, name], value)
                else:
                    events.add_metric([t, component, name], value)
        yield events
        yield gauges
        dead = CounterMetricFamily("kstorm_dead_letters", "Dead-letter records written",
                                   labels=["topology"])
        dead.add_metric([t], self.dead_letters())
        yield dead
        offsets = GaugeMetricFamily("kstorm_source_end_offset",
                                    "End offset of the last committed batch, per partition",
                                    labels=["topology", "spout", "topic", "partition"])
        lag = GaugeMetricFamily("kstorm_consumer_lag",
                                "Records in the partition after the last committed batch",
                                labels=["topology", "spout", "topic", "partition"])
        for spout, ends in sorted(snap["offsets"].items()):
            committed = {(topic, int(p)): end for topic, partitions in _topics(ends)
                         for p, end in partitions.items()}
            for (topic, partition), offset in sorted(committed.items()):
                offsets.add_metric([t, spout, topic, str(partition)], offset)
            if self.highs is not None and committed:
                try:
                    highs = self.highs(spout, sorted(committed))
                except Exception:  # noqa: BLE001 - a scrape never fails for lag
                    log.warning("metrics: no high watermarks for spout %r", spout,
                                exc_info=True)
                    highs = {}
                for (topic, partition), high in sorted(highs.items()):
                    lag.add_metric([t, spout, topic, str(partition)],
                                   max(0, high - committed[(topic, partition)]))
        yield offsets
        yield lag


def _topics(ends: Any) -> Iterator[tuple[str, dict[Any, int]]]:
    if not isinstance(ends, dict):
        return
    for topic, partitions in ends.items():
        if isinstance(partitions, dict) and all(isinstance(v, int)
                                                for v in partitions.values()):
            yield topic, partitions


def registry_for(topology: str, progress: Progress, dead_letters: Callable[[], int],
                 highs: HighWatermarks | None = None) -> CollectorRegistry:
    """A registry whose metrics are the topology's progress at scrape time."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ProgressCollector(topology, progress, dead_letters, highs))  # type: ignore[arg-type]
    return registry


class MetricsServer:
    """``/metrics`` over HTTP for one topology (stopped with the topology)."""

    def __init__(self, topology: str, progress: Progress, dead_letters: Callable[[], int],
                 port: int, host: str = "0.0.0.0",  # noqa: S104 - scraped from outside
                 highs: HighWatermarks | None = None) -> None:
        from prometheus_client import start_http_server

        self.registry = registry_for(topology, progress, dead_letters, highs)
        self._server, self._thread = start_http_server(port, host, registry=self.registry)
        self.port = int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
