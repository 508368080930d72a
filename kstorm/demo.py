"""``kstorm demo``: a self-contained tour on the embedded broker.

It starts the embedded Kafka-compatible broker, produces a deterministic stream of page-view
events, and runs this topology until the topic is drained::

    views (KafkaSpout, JSON) --shuffle--> split (one tuple per page of a visit)
          --fields("page")--> count (stateful: count per page and 10 s event-time window)
          --fields("page")--> results (sink, written in each batch's commit phase)

then reads the result table back from the store the sink wrote, checks every count against
one computed independently from the produced events, and prints a summary.

The sink is the exactly-once :class:`sinks.redis.RedisSink` on an embedded ``redis-server``
(or ``KSTORM_REDIS_URL``); where ``redis-server`` is not installed, an in-memory table on the
driver stands in and the demo says so. ``KSTORM_BOOTSTRAP_SERVERS`` points it at a real
broker instead of the embedded one (the Docker compose file sets both).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kstorm.bolt import BaseBasicBolt, BaseStatefulBolt, BasicOutputCollector, OutputCollector
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.sink import BaseSink, SinkBatch
from kstorm.tuple import Fields, Tuple

WINDOW_MS = 10_000
PAGES = ["home", "search", "cart", "checkout", "item", "help", "login", "offers"]
START_MS = 1_700_000_000_000


def events(n: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``n`` deterministic page-view events, ~200 per second of event time."""
    rng = random.Random(seed)
    for i in range(n):
        visited = rng.sample(PAGES, rng.randint(1, 4))
        yield {"user": f"user-{rng.randint(1, 500)}", "ts": START_MS + i * 5 + rng.randint(0, 4),
               "path": " ".join(visited)}


def expected_counts(evts: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    """The ground truth: views per (page, window start)."""
    out: Counter[tuple[str, int]] = Counter()
    for e in evts:
        for page in e["path"].split():
            out[(page, e["ts"] - e["ts"] % WINDOW_MS)] += 1
    return out


class SplitPath(BaseBasicBolt):
    """One ``(page, ts)`` tuple per page of a visit."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``page``, ``ts``."""
        declarer.declare(Fields("page", "ts"))

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Split the visit's path."""
        ts = tuple_.get_value_by_field("ts")
        for page in tuple_.get_string_by_field("path").split():
            collector.emit([page, ts])


class WindowCount(BaseStatefulBolt):
    """Counts per page and tumbling 10 s event-time window; emits the batch's new totals."""

    def init_state(self, state: Any) -> None:
        """The task's counts, checkpointed with every batch."""
        self.state = state

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Start a batch."""
        self.collector = collector
        self.touched: set[tuple[str, int]] = set()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``page``, ``window_start``, ``count``."""
        declarer.declare(Fields("page", "window_start", "count"))

    def execute(self, tuple_: Tuple) -> None:
        """Count one view."""
        ts = tuple_.get_value_by_field("ts")
        key = (tuple_.get_string_by_field("page"), ts - ts % WINDOW_MS)
        self.state.put(key, self.state.get(key, 0) + 1)
        self.touched.add(key)
        self.collector.ack(tuple_)

    def finish_batch(self) -> None:
        """Emit each touched window's total once per batch."""
        for page, start in sorted(self.touched):
            self.collector.emit([page, start, self.state.get((page, start))])


class LatestTableSink(BaseSink):
    """Keeps the latest count per (page, window) on the driver (replaced by Redis later)."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, int], int] = {}
        self.last_batch = -1

    def commit(self, batch: SinkBatch) -> None:
        """Totals are absolute, so applying a batch twice is harmless (idempotent)."""
        for t in batch.tuples:
            page, start, count = t.values
            self.table[(page, start)] = count
        self.last_batch = batch.batch_id


@dataclass
class DemoResult:
    """What the demo measured."""

    events: int
    results: int
    mismatches: int
    seconds: float
    table: dict[tuple[str, int], int]
    store: str


KEY_PREFIX = "demo:views:"


def _results_sink(redis_url: str | None) -> BaseSink:
    if redis_url is None:
        return LatestTableSink()
    from sinks.redis import RedisConfig, RedisSink

    return RedisSink(RedisConfig.from_url(redis_url), key=KEY_PREFIX + "{page}:{window_start}",
                     value="count", merge="set", mode="transactional")


def _read_back(sink: BaseSink) -> dict[tuple[str, int], int]:
    if isinstance(sink, LatestTableSink):
        return dict(sink.table)
    values = sink.read_all(KEY_PREFIX)  # type: ignore[attr-defined]
    out = {}
    for key, count in values.items():
        page, start = key[len(KEY_PREFIX):].rsplit(":", 1)
        out[(page, int(start))] = int(count)
    return out


@contextlib.contextmanager
def _services() -> Iterator[tuple[str, str | None, str]]:
    """(bootstrap servers, redis url or None, description of the store)."""
    from kstorm.embedded import EmbeddedKafka, EmbeddedRedis
    from kstorm.errors import MissingDependencyError

    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KSTORM_BOOTSTRAP_SERVERS")
        if not bootstrap:
            bootstrap = stack.enter_context(EmbeddedKafka()).bootstrap_servers
        url = os.environ.get("KSTORM_REDIS_URL")
        store = f"Redis at {url}" if url else ""
        if not url:
            try:
                url = stack.enter_context(EmbeddedRedis()).url
                store = f"embedded redis-server at {url}"
            except MissingDependencyError:
                url, store = None, "in-memory table (redis-server is not installed)"
        yield bootstrap, url, store


def run(n_events: int = 20_000, partitions: int = 4, per_batch: int = 5_000,
        show: bool = True) -> DemoResult:
    """Run the demo; returns what it measured (the CLI prints it)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kstorm import KafkaSpout, TopologyBuilder, submit_topology
    from serdes import JsonSerde

    console = Console(quiet=not show)
    with _services() as (bootstrap, redis_url, store):
        console.print(f"[bold]kstorm demo[/]: broker {bootstrap}; results to {store}")
        evts = list(events(n_events))
        topic = f"demo.views.{int(time.time())}"
        _produce(bootstrap, topic, partitions, evts)
        builder = TopologyBuilder()
        spout = KafkaSpout(topic, value_serde=JsonSerde({"user": str, "ts": int,
                                                                 "path": str}),
                           max_offsets_per_batch=per_batch)
        builder.set_spout("views", spout)
        builder.set_bolt("split", SplitPath(), 2).shuffle_grouping("views")
        builder.set_bolt("count", WindowCount(), 4).fields_grouping("split", Fields("page"))
        builder.set_bolt("results", _results_sink(redis_url)).fields_grouping("count",
                                                                              Fields("page"))
        conf = {"kafka.bootstrap.servers": bootstrap,
                "kstorm.trigger": "available-now",
                "kstorm.spark.master": os.environ.get("KSTORM_SPARK_MASTER", "local[*]"),
                "kstorm.checkpoint.dir": tempfile.mkdtemp(prefix="kstorm-demo-")}
        started = time.monotonic()
        handle = submit_topology("demo", conf, builder.create_topology())
        columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                   TimeElapsedColumn()]
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("processing", total=n_events, info="starting Spark")
            while not handle.await_termination(0.5):
                p = handle.progress
                done = p["components"].get("split", {}).get("executed", 0)
                bar.update(task, completed=done, info=f"{done:,} events, {p['batches']} batches")
        seconds = time.monotonic() - started
        table = _read_back(handle.sinks["results"])
    truth = expected_counts(evts)
    mismatches = sum(1 for k in truth.keys() | table.keys() if truth.get(k) != table.get(k))
    return DemoResult(n_events, len(table), mismatches, seconds, table, store)


def _produce(bootstrap: str, topic: str, partitions: int, evts: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer

    from kstorm._kafka.client import create_topic
    from kstorm._kafka.connection import KafkaConnection

    create_topic(bootstrap, topic, partitions)
    connection = KafkaConnection(bootstrap_servers=bootstrap)
    producer = Producer(connection.client_config("producer", role_config={"linger.ms": 20}))
    for e in evts:
        producer.produce(topic, key=e["user"].encode(), value=json.dumps(e).encode())
        producer.poll(0)
    producer.flush(30)
