"""Session windows and the enrichment join at 1M events, against a raw consumer and Spark SQL.

One command each, from the repository root::

    python -m bench.beyond_storm sessions      # --events N (default 1,000,000), --no-write
    python -m bench.beyond_storm enrichment

In one run, on the embedded broker (tansu):

1. produce the events (``sessions``: clicks of 10,000 users on 4 partitions, one a
   millisecond, so a user's clicks are ~10 s apart and a 30 s gap cuts sessions;
   ``enrichment``: clicks of 1,000 campaigns, 1 % of an unknown one, and the campaign
   table on a topic of its own);
2. the **raw baseline**: one confluent-kafka consumer, ``json.loads`` and a dict doing the
   same work (sessions per user; a table lookup and a count per advertiser): plain Python on
   one core, no state, no sink, no failure handling;
3. **kstorm**: ``KafkaSpout`` -> a session-windowed bolt (``with_session_window``, event
   time, 2 tasks) / ``TableJoinBolt`` (2 tasks) -> a sink on the driver, available-now,
   batches of at most 100,000 offsets; its output is checked against the ground truth
   computed here;
4. **Spark SQL**, the peer with the feature: ``session_window`` / a broadcast join over the
   same rows as an in-memory DataFrame (a batch query: no Kafka connector here), timed
   from the query to its collected result.

Figures (machine, load, command) go to ``bench/results/beyond_storm.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kstorm import BaseSink, BaseWindowedBolt, Fields
from kstorm.windowing import Duration

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # (this module's bolt, for Spark's workers too)
    sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
    [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
RESULTS = REPO / "bench" / "results" / "beyond_storm.md"
BASE = 1_700_000_000_000
GAP_MS, LAG_MS = 30_000, 1_000
USERS, CAMPAIGNS, PARTITIONS = 10_000, 1_000, 4


# -- the data --------------------------------------------------------------------------------

def session_clicks(n: int, seed: int = 45) -> list[tuple[int, int]]:
    """``(user, ts)``: one click a millisecond, by a random user."""
    rng = random.Random(seed)
    return [(rng.randrange(USERS), BASE + i) for i in range(n)]


def true_sessions(clicks: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """``(user, first ts) -> (clicks, last ts)`` of every session, by the definition."""
    current: dict[int, tuple[int, int, int]] = {}  # user -> (first, last, count)
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for user, ts in sorted(clicks, key=lambda c: c[1]):
        cur = current.get(user)
        if cur is not None and ts - cur[1] <= GAP_MS:
            current[user] = (cur[0], ts, cur[2] + 1)
            continue
        if cur is not None:
            out[(user, cur[0])] = (cur[2], cur[1])
        current[user] = (ts, ts, 1)
    out.update({(u, c[0]): (c[2], c[1]) for u, c in current.items()})
    return out


def enrichment_data(n: int, seed: int = 45) -> tuple[dict[int, str], list[int]]:
    """The campaign table (campaign -> advertiser) and each click's campaign."""
    rng = random.Random(seed)
    table = {c: f"adv-{c % 37}" for c in range(CAMPAIGNS)}
    return table, [rng.randrange(CAMPAIGNS) if rng.random() > 0.01 else CAMPAIGNS + 1
                   for _ in range(n)]


def produce(bootstrap: str, topic: str, payloads: list[bytes], partition_of: list[int]) -> None:
    """Produce ``payloads`` (each to its partition) and wait for every delivery."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10_000, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 500_000, "acks": "all"})
    for payload, p in zip(payloads, partition_of, strict=True):
        while True:
            try:
                producer.produce(topic, payload, partition=p)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not deliver every record to {topic}")


# -- the raw baseline ------------------------------------------------------------------------

def _consume(bootstrap: str, topic: str, n: int) -> Any:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 10, "max.partition.fetch.bytes": 8_388_608})
    meta = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in meta])
    read = 0
    try:
        while read < n:
            msgs = [m for m in consumer.consume(10_000, 1.0) if m.error() is None]
            read += len(msgs)
            yield msgs
    finally:
        consumer.close()


def raw_sessions(bootstrap: str, topic: str, n: int) -> tuple[float, int]:
    """Seconds to sessionize ``topic`` in a dict, and the sessions found."""
    loads, started = json.loads, time.monotonic()
    current: dict[int, list[int]] = {}
    done = 0
    for msgs in _consume(bootstrap, topic, n):
        for msg in msgs:
            click = loads(msg.value())
            cur = current.get(click["user"])
            if cur is not None and click["ts"] - cur[1] <= GAP_MS:
                cur[1] = click["ts"]
                cur[2] += 1
            else:
                done += cur is not None
                current[click["user"]] = [click["ts"], click["ts"], 1]
    return time.monotonic() - started, done + len(current)


def raw_enrichment(bootstrap: str, clicks: str, campaigns: str, n: int) -> tuple[float, Counter]:
    """Seconds to read the table, join every click and count per advertiser."""
    loads, started = json.loads, time.monotonic()
    table = {}
    for msgs in _consume(bootstrap, campaigns, CAMPAIGNS):
        for msg in msgs:
            row = loads(msg.value())
            table[row["campaign_id"]] = row["advertiser"]
    counts: Counter[str] = Counter()
    for msgs in _consume(bootstrap, clicks, n):
        for msg in msgs:
            advertiser = table.get(loads(msg.value())["campaign_id"])
            if advertiser is not None:
                counts[advertiser] += 1
    return time.monotonic() - started, counts


# -- kstorm ----------------------------------------------------------------------------------

class Collect(BaseSink):
    """Keeps what it receives, on the driver."""

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []

    def commit(self, batch: Any) -> None:
        """Keep the batch's tuples' values."""
        self.rows.extend(list(t.values) for t in batch.tuples)


class Sessions(BaseWindowedBolt):
    """``(user, first ts, clicks)`` per closed session."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, window: Any) -> None:
        """One tuple per session."""
        tuples = window.get()
        self.collector.emit([tuples[0].get_integer_by_field("user"),
                             min(t.get_integer_by_field("ts") for t in tuples), len(tuples)])

    def declare_output_fields(self, declarer: Any) -> None:
        """The user, the session's first click, its clicks."""
        declarer.declare(Fields("user", "start", "clicks"))


def _session_bolt() -> Sessions:
    return (Sessions().with_session_window(Duration.millis(GAP_MS))
            .with_timestamp_field("ts").with_lag(Duration.millis(LAG_MS)))


def batch_seconds(handle: Any) -> float:
    """The sum of the topology's micro-batch durations (Spark's ``triggerExecution``)."""
    return sum(b["durationMs"].get("triggerExecution", 0) for b in handle.recent_batches) / 1e3


def run_kstorm(topology: Any, checkpoint: str, bootstrap: str) -> tuple[float, Any]:
    """Seconds from submit to drained, and the handle."""
    from kstorm import submit_topology

    started = time.monotonic()
    handle = submit_topology("beyond-storm", {
        "kafka.bootstrap.servers": bootstrap, "kstorm.trigger": "available-now",
        "kstorm.checkpoint.dir": checkpoint, "kstorm.shuffle.partitions": 2}, topology)
    if not handle.await_termination(1_800):
        handle.stop()
        raise RuntimeError("kstorm did not drain the topic within 30 minutes")
    return time.monotonic() - started, handle


# -- the two benchmarks ----------------------------------------------------------------------

def sessions(n: int, kafka: Any, checkpoint: str) -> dict[str, Any]:
    """The sessions benchmark (module docstring)."""
    from kstorm import Fields, KafkaSpout, TopologyBuilder
    from kstorm._kafka.client import create_topic
    from serdes import JsonSerde

    clicks = session_clicks(n)
    create_topic(kafka.bootstrap_servers, "sessions", partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, "sessions",
            [json.dumps({"user": u, "ts": ts}).encode() for u, ts in clicks],
            [u % PARTITIONS for u, _ in clicks])
    truth = true_sessions(clicks)
    raw_s, raw_found = raw_sessions(kafka.bootstrap_servers, "sessions", n)
    assert raw_found == len(truth), (raw_found, len(truth))

    builder = TopologyBuilder()
    builder.set_spout("clicks", KafkaSpout("sessions", value_serde=JsonSerde(
        {"user": int, "ts": int}), max_offsets_per_batch=100_000))
    builder.set_bolt("sessions", _session_bolt(), 2).fields_grouping("clicks", Fields("user"))
    builder.set_bolt("out", Collect()).shuffle_grouping("sessions")
    k_s, handle = run_kstorm(builder.create_topology(), checkpoint, kafka.bootstrap_servers)
    got = {(u, s): c for u, s, c in handle.sinks["out"].rows}
    # every emitted session is a true one, and every true one whose gap ended well before
    # the final watermark (the earliest partition's last click minus the lag) was emitted;
    # the rest are still open, as they would be in a running Storm topology
    last = {p: max(ts for u, ts in clicks if u % PARTITIONS == p) for p in range(PARTITIONS)}
    watermark = min(last.values()) - LAG_MS
    exact = all(k in truth and truth[k][0] == c for k, c in got.items())
    closed = {k for k, (_, end) in truth.items() if end + GAP_MS < watermark - 1_000}
    complete = bool(closed) and closed <= set(got)  # (none closed: nothing was checked)
    spark_s = spark_sessions(clicks)
    return {"events": n, "raw_s": raw_s, "kstorm_s": k_s, "spark_s": spark_s,
            "batches_s": batch_seconds(handle),
            "sessions": len(got), "truth": len(truth), "exact": exact and complete}


def spark_sessions(clicks: list[tuple[int, int]]) -> float:
    """Seconds Spark SQL takes to count the sessions of the same clicks (in memory)."""
    import pandas as pd
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    spark = SparkSession.builder.getOrCreate()
    frame = spark.createDataFrame(pd.DataFrame(
        {"user": [u for u, _ in clicks], "ts": [t / 1000 for _, t in clicks]}))
    frame = frame.withColumn("ts", F.col("ts").cast("timestamp")).cache()
    frame.count()
    started = time.monotonic()
    frame.groupBy("user", F.session_window("ts", f"{GAP_MS // 1000} seconds")).count().collect()
    took = time.monotonic() - started
    frame.unpersist()
    return took


def enrichment(n: int, kafka: Any, checkpoint: str) -> dict[str, Any]:
    """The enrichment benchmark (module docstring)."""
    from kstorm import Fields, KafkaSpout, TableJoinBolt, TopologyBuilder
    from kstorm._kafka.client import create_topic
    from serdes import JsonSerde

    table, campaign_of = enrichment_data(n)
    create_topic(kafka.bootstrap_servers, "campaigns", partitions=1)
    create_topic(kafka.bootstrap_servers, "ad-clicks", partitions=PARTITIONS)
    produce(kafka.bootstrap_servers, "campaigns",
            [json.dumps({"campaign_id": c, "advertiser": a}).encode() for c, a in table.items()],
            [0] * len(table))
    produce(kafka.bootstrap_servers, "ad-clicks",
            [json.dumps({"user": i % USERS, "campaign_id": c}).encode()
             for i, c in enumerate(campaign_of)], [i % PARTITIONS for i in range(n)])
    truth = Counter(table[c] for c in campaign_of if c in table)
    raw_s, raw_counts = raw_enrichment(kafka.bootstrap_servers, "ad-clicks", "campaigns", n)
    assert raw_counts == truth

    builder = TopologyBuilder()
    builder.set_spout("campaigns", KafkaSpout("campaigns", value_serde=JsonSerde(
        {"campaign_id": int, "advertiser": str})))
    builder.set_spout("clicks", KafkaSpout("ad-clicks", value_serde=JsonSerde(
        {"user": int, "campaign_id": int}), max_offsets_per_batch=100_000))
    builder.set_bolt("enrich", TableJoinBolt("clicks", "campaigns", "campaign_id").select(
        "campaigns:advertiser"), 2).fields_grouping("clicks", Fields("campaign_id")) \
        .fields_grouping("campaigns", Fields("campaign_id"))
    builder.set_bolt("out", Collect()).shuffle_grouping("enrich")
    k_s, handle = run_kstorm(builder.create_topology(), checkpoint, kafka.bootstrap_servers)
    got = Counter(row[0] for row in handle.sinks["out"].rows)
    spark_s = spark_enrichment(table, campaign_of)
    return {"events": n, "raw_s": raw_s, "kstorm_s": k_s, "spark_s": spark_s,
            "batches_s": batch_seconds(handle),
            "joined": sum(got.values()), "truth": sum(truth.values()), "exact": got == truth}


def spark_enrichment(table: dict[int, str], campaign_of: list[int]) -> float:
    """Seconds Spark SQL takes to join the same clicks with the table and count."""
    import pandas as pd
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    spark = SparkSession.builder.getOrCreate()
    clicks = spark.createDataFrame(pd.DataFrame({"campaign_id": campaign_of})).cache()
    rows = spark.createDataFrame(pd.DataFrame(
        {"campaign_id": list(table), "advertiser": list(table.values())})).cache()
    clicks.count(), rows.count()
    started = time.monotonic()
    clicks.join(F.broadcast(rows), "campaign_id").groupBy("advertiser").count().collect()
    took = time.monotonic() - started
    clicks.unpersist(), rows.unpersist()
    return took


# -- the report ------------------------------------------------------------------------------

def report(which: str, r: dict[str, Any], command: str) -> str:
    """The markdown record of one run."""
    n = r["events"]
    rate = {k: n / r[f"{k}_s"] for k in ("raw", "kstorm", "batches", "spark")}
    load = os.getloadavg()[0]
    what = ("sessions (30 s gap, event time, 2 tasks)" if which == "sessions"
            else "clicks joined with a 1,000-row campaign table (2 tasks), counted")
    counted = ("sessions (the rest still open at the final watermark)" if which == "sessions"
               else "clicks joined")
    lines = [
        f"## {which}, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `{command}`; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load {load:.1f} at the end; {n:,} events: {what}.",
        "",
        "| job (same run) | seconds | events/s | ratio to raw |",
        "| --- | ---: | ---: | ---: |",
        f"| raw Python consumer + dict | {r['raw_s']:.1f} | {rate['raw']:,.0f} | 1.00× |",
        f"| kstorm, submit to drained (Spark start included) | {r['kstorm_s']:.1f} | "
        f"{rate['kstorm']:,.0f} | {rate['kstorm'] / rate['raw']:.2f}× |",
        f"| kstorm, its micro-batches only (Spark's batch durations) | {r['batches_s']:.1f} | "
        f"{rate['batches']:,.0f} | {rate['batches'] / rate['raw']:.2f}× |",
        f"| Spark SQL over the rows in memory (query only) | {r['spark_s']:.1f} | "
        f"{rate['spark']:,.0f} | {rate['spark'] / rate['raw']:.2f}× |",
        "",
        f"kstorm's output equals the ground truth: {'yes' if r['exact'] else 'NO'} "
        f"({r.get('sessions', r.get('joined')):,} of {r['truth']:,} {counted}).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.beyond_storm sessions|enrichment [--events N] [--no-write]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.beyond_storm")
    parser.add_argument("which", choices=("sessions", "enrichment"))
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kstorm.embedded import EmbeddedKafka

    with EmbeddedKafka() as kafka, tempfile.TemporaryDirectory(prefix="kstorm-bb-") as tmp:
        run = sessions if args.which == "sessions" else enrichment
        result = run(args.events, kafka, tmp)
    command = " ".join(["python -m bench.beyond_storm", *(argv or sys.argv[1:])])
    text = report(args.which, result, command)
    print(text)
    if not args.no_write:
        old = RESULTS.read_text() if RESULTS.exists() else (
            "# Session windows and the enrichment join (`python -m bench.beyond_storm`)\n\n")
        RESULTS.write_text(old + text + "\n")
    return 0 if result["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
