"""The benchmark topology, run in its own process: ``python -m bench.topology ...``.

KafkaSpout (JSON with a schema) -> WindowedAggregate(key; count, sum of value), tumbling
10 s, lag 5 s, event time ``ts`` -> RedisSink (transactional, exactly once). Each window is
one Redis string, readable in ``redis-cli``::

    GET w:k0042:1700000010000      ->  {"count":12,"sum":5403}

The process writes a JSON report (``--out``): monotonic times of the submit and of the end,
the late count and window count from the topology's progress, and Spark's per-batch phase
durations. ``time.monotonic`` is system-wide on Linux, so the parent (which watches the
commits in Redis) compares these with its own clock.

Example:
    python -m bench.topology --bootstrap 127.0.0.1:9092 --redis redis://127.0.0.1:6379/0 \\
        --topic events --checkpoint /tmp/ckpt --out /tmp/report.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

TOPOLOGY = "standard"
SINK = "store"
KEY_PREFIX = "w:"


WINDOW_RECORD = {"count": "count", "sum": "total"}
"""The Redis value of one window, a JSON record ``{"count": n, "sum": s}`` from these fields
(a record of named fields, not a function: the sink then writes the closed windows straight
from their Arrow columns, ``sinks/redis/_columns.py``)."""


def build(topic: str, redis_url: str, max_offsets_per_batch: int) -> Any:
    """The benchmark's StormTopology."""
    from kstorm import Fields, KafkaSpout, TopologyBuilder
    from kstorm.windowing import Duration
    from kstorm.windowing.aggregate import Agg, WindowedAggregate
    from serdes import JsonSerde
    from sinks.redis import RedisConfig, RedisSink

    spout = KafkaSpout(topic, value_serde=JsonSerde({"key": str, "ts": int, "value": int}),
                       max_offsets_per_batch=max_offsets_per_batch, group_id="bench")
    agg = (WindowedAggregate(key="key", count=Agg.count(), total=Agg.sum("value"))
           .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
           .with_lag(Duration.seconds(5)))
    sink = RedisSink(RedisConfig.from_url(redis_url), key=KEY_PREFIX + "{key}:{window_start}",
                     value=WINDOW_RECORD, merge="set", mode="transactional")
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("per_key", agg).fields_grouping("events", Fields("key"))
    builder.set_bolt(SINK, sink).shuffle_grouping("per_key")
    return builder.create_topology()


def _offsets_total(offsets: dict[str, Any]) -> int:
    return sum(int(end) for per_spout in offsets.values() for parts in per_spout.values()
               for end in parts.values())


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Submit, watch the commits until the topic is drained, report."""
    from kstorm import submit_topology

    conf = {"kafka.bootstrap.servers": args.bootstrap,
            "kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "available-now",
            "kstorm.spark.master": args.master,
            "kstorm.spark.conf": dict(kv.split("=", 1) for kv in args.spark_conf),
            **dict(kv.split("=", 1) for kv in args.conf)}
    topology = build(args.topic, args.redis, args.max_offsets)
    submitted = time.monotonic()
    handle = submit_topology(TOPOLOGY, conf, topology)
    started = time.monotonic()
    handle.await_termination(timeout=None)
    finished = time.monotonic()
    progress = handle.progress
    # Spark's own per-batch phases (ms): diagnostics for "where the time goes".
    durations = [dict(p["durationMs"], rows=p["numInputRows"])
                 for p in handle._query.recentProgress if p is not None]
    component = progress["components"].get("per_key", {})
    return {"submitted": submitted, "started": started, "finished": finished,
            "batches": progress["batches"],
            "events": _offsets_total(progress["offsets"]),
            "executed": component.get("executed", 0), "late": component.get("late", 0),
            "windows": component.get("windows", 0),
            "first_commit_after_s": progress["first_commit_after_s"],
            "commit_seconds": progress["commit_seconds"],
            "commit_blocking_seconds": progress["commit_blocking_seconds"],
            "dead_letters": progress["dead_letters"], "spark_batches": durations}


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m bench.topology")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-offsets", type=int, default=500_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark setting (repeatable)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra topology setting, e.g. kstorm.commit.overlap=false")
    args = parser.parse_args()
    report = run(args)
    Path(args.out).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
