"""The latency benchmark's topologies, run in a child process until SIGTERM.

``--kind windowed``: KafkaSpout (JSON ``{key, ts, value}``) -> WindowedAggregate(key, count,
sum(value)), tumbling ``--window-ms``, lag ``--lag-ms``, event time ``ts`` -> RedisSink
``lw:<key>:<window_start>`` (transactional: each key's txid is kept, which is how the
benchmark learns which batch made a window visible).

``--kind stateless``: KafkaSpout -> RedisSink ``ls:<key>`` = the event's value (merge set,
transactional): the batch record's end offsets tell which events each commit made visible.

Both run in continuous mode (processing-time trigger ``--trigger-ms``), exactly once, and
stop on SIGTERM (exit 0). ``--out`` receives the topology's progress at the end.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path
from typing import Any

NAME = "latency"
SINK = "store"
WINDOW_PREFIX = "lw:"
STATELESS_PREFIX = "ls:"


def build(kind: str, topic: str, redis_url: str, *, window_ms: int, lag_ms: int) -> Any:
    """The topology of ``kind`` (module docstring)."""
    from bench.topology import WINDOW_RECORD
    from kstorm import Fields, KafkaSpout, TopologyBuilder
    from kstorm.windowing import Duration
    from kstorm.windowing.aggregate import Agg, WindowedAggregate
    from serdes import JsonSerde
    from sinks.redis import RedisConfig, RedisSink

    spout = KafkaSpout(topic, value_serde=JsonSerde({"key": str, "ts": int, "value": int}),
                       group_id=f"{NAME}-{kind}")
    config = RedisConfig.from_url(redis_url)
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    if kind == "windowed":
        agg = (WindowedAggregate(key="key", count=Agg.count(), total=Agg.sum("value"))
               .with_tumbling_window(Duration.millis(window_ms)).with_timestamp_field("ts")
               .with_lag(Duration.millis(lag_ms)))
        builder.set_bolt("per_key", agg).fields_grouping("events", Fields("key"))
        sink = RedisSink(config, key=WINDOW_PREFIX + "{key}:{window_start}",
                         value=WINDOW_RECORD, merge="set", mode="transactional")
        builder.set_bolt(SINK, sink).shuffle_grouping("per_key")
    else:
        sink = RedisSink(config, key=STATELESS_PREFIX + "{key}", value="value", merge="set",
                         mode="transactional")
        builder.set_bolt(SINK, sink).shuffle_grouping("events")
    return builder.create_topology()


def main() -> None:
    """Command line: see the module docstring."""
    from kstorm import submit_topology

    parser = argparse.ArgumentParser(prog="python -m bench.latency_topology")
    for flag in ("--bootstrap", "--redis", "--topic", "--checkpoint", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--kind", choices=("windowed", "stateless"), required=True)
    parser.add_argument("--window-ms", type=int, default=1_000)
    parser.add_argument("--lag-ms", type=int, default=500)
    parser.add_argument("--trigger-ms", type=int, default=250)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    conf = {"kafka.bootstrap.servers": args.bootstrap,
            "kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": args.trigger_ms,
            "kstorm.spark.master": args.master,
            "kstorm.spark.conf": dict(kv.split("=", 1) for kv in args.spark_conf),
            **dict(kv.split("=", 1) for kv in args.conf)}
    topology = build(args.kind, args.topic, args.redis, window_ms=args.window_ms,
                     lag_ms=args.lag_ms)
    submitted = time.time()
    handle = submit_topology(NAME, conf, topology)
    while not stop["now"] and handle.is_active:
        time.sleep(0.1)
    failed = not handle.is_active
    progress = handle.progress
    try:
        durations = [dict(p["durationMs"], rows=p["numInputRows"])
                     for p in handle._query.recentProgress if p is not None]  # noqa: SLF001
    except Exception:  # noqa: BLE001 - diagnostics only; the JVM may be gone
        durations = []
    handle.stop()
    Path(args.out).write_text(json.dumps({
        "submitted": submitted, "failed": failed, "batches": progress["batches"],
        "commit_seconds": progress["commit_seconds"], "spark_batches": durations}))
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
