"""The windowed-bolt kill test's topology, run in a subprocess that can be SIGKILLed.

KafkaSpout (JSON ``{key, ts, value}``) --global--> CountingWindows (a stateful user windowed
bolt: tumbling 1 s, lag 500 ms, event time, message id field ``offset``) --> two RedisSinks:

- ``store``: ``<prefix>:w:<start>`` = ``{"count", "total", "seq"}`` (``seq`` numbers the
  windows in the bolt's checkpointed ``KeyValueState``);
- ``fires``: ``<prefix>:f:<start>`` counts how many times each window fired.

With ``--relay``: KafkaSpout --fields(key)--> Relay (2 tasks: a shuffled stage, so *ordered*)
--global--> RelayWindows (tumbling ``Count(50)``) --> ``store``: ``<prefix>:f:<id>`` counts the
windows each event was in (``id`` = partition * 10**9 + offset).

The run exits by itself (code 0) once both sinks' offset records reach the topic's end
offsets read at start. Run it (``PYTHONPATH`` must hold the repo and ``integration_tests``)::

    python -m wb_topology --bootstrap 127.0.0.1:9092 --redis-url redis://127.0.0.1:6379/0 \\
        --topic events --checkpoint /tmp/ckpt --name wb1

The module also holds the data: :func:`generate_events` -- out of order within each
partition by less than the lag, so no tuple is ever late whatever the batches are, and the
windows (and their order) do not depend on where kills cut the stream.

Example:
    >>> [e.ts - T0_MS for e in generate_events(3, seed=1)][:1]
    [0]
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from typing import Any

from _runner import EXIT_DONE, watch
from eo_topology import Event, topic_ends
from wc_topology import provider_conf

WINDOW_MS = 1_000
LAG_MS = 500
JITTER_MS = 400  # < LAG_MS: never late
PARTITIONS = 4
T0_MS = 1_700_000_000_000
SINKS = ("store", "fires")

log = logging.getLogger("wb_topology")


def generate_events(n: int, *, seed: int = 42, partitions: int = PARTITIONS) -> list[Event]:
    """``n`` events, 1 ms of event time apart, each delayed by 0..JITTER_MS ms (first: 0)."""
    rng = random.Random(seed)
    return [Event(i % partitions, f"k{rng.randrange(100):02d}",
                  T0_MS + i + (rng.randrange(JITTER_MS) if i else 0), rng.randint(1, 100))
            for i in range(n)]


def window_value(row: dict[str, Any]) -> dict[str, int]:
    """The stored record of one window."""
    return {"count": row["count"], "total": row["total"], "seq": row["seq"]}


RELAY_COUNT = 50  # events per count window in the --relay topology


def relay_topology(topic: str, redis_url: str, prefix: str, *, mode: str,
                   max_per_batch: int) -> Any:
    """The ``--relay`` topology of the module docstring."""
    from windowed_bolts import Relay, RelayWindows

    from kstorm import Fields, KafkaSpout, TopologyBuilder
    from kstorm.windowing import Count
    from serdes import JsonSerde
    from sinks.redis import RedisConfig, RedisSink

    spout = KafkaSpout(topic, value_serde=JsonSerde({"key": str, "ts": int, "value": int}),
                       max_offsets_per_batch=max_per_batch, first_batch_max_offsets=None,
                       group_id=f"{prefix}-group")
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("relay", Relay(), 2).fields_grouping("events", Fields("key"))
    builder.set_bolt("windows", RelayWindows().with_tumbling_window(Count(RELAY_COUNT))
                     ).global_grouping("relay")
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_url), key=prefix + ":f:{id}",
                                        merge="count", mode=mode)  # type: ignore[arg-type]
                     ).shuffle_grouping("windows")
    return builder.create_topology()


def build_topology(topic: str, redis_url: str, prefix: str, *, mode: str,
                   max_per_batch: int, persistent: bool = False) -> Any:
    """The topology of the module docstring."""
    from windowed_bolts import CountingWindows

    from kstorm import KafkaSpout, TopologyBuilder
    from kstorm.windowing import Duration
    from serdes import JsonSerde
    from sinks.redis import RedisConfig, RedisSink

    spout = KafkaSpout(topic, value_serde=JsonSerde({"key": str, "ts": int, "value": int}),
                       max_offsets_per_batch=max_per_batch, first_batch_max_offsets=None,
                       group_id=f"{prefix}-group")
    bolt = (CountingWindows().with_tumbling_window(Duration.millis(WINDOW_MS))
            .with_timestamp_field("ts").with_lag(Duration.millis(LAG_MS))
            .with_message_id_field("offset"))
    if persistent:  # the tuples in the state backend, a few chunks in memory
        bolt = bolt.with_persistence().with_max_events_in_memory(500)
    config = RedisConfig.from_url(redis_url)
    store = RedisSink(config, key=prefix + ":w:{start}", value=window_value, merge="set",
                      mode=mode)  # type: ignore[arg-type]
    fires = RedisSink(config, key=prefix + ":f:{start}", merge="count",
                      mode=mode)  # type: ignore[arg-type]
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("windows", bolt).global_grouping("events")
    builder.set_bolt("store", store).shuffle_grouping("windows")
    builder.set_bolt("fires", fires).shuffle_grouping("windows")
    return builder.create_topology()


def run(args: argparse.Namespace) -> int:
    """Run until both sinks have committed the topic's end offsets; 0 on success."""
    from kstorm import submit_topology

    ends = topic_ends(args.bootstrap, args.topic)
    conf = {"kafka.bootstrap.servers": args.bootstrap,
            "kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": 100,
            "kstorm.spark.master": "local[2]", "kstorm.shuffle.partitions": 2}
    conf.update(provider_conf(args.provider, args.redis_url))  # redis: windows + state there
    if args.relay:
        topology = relay_topology(args.topic, args.redis_url, args.prefix or args.name,
                                  mode=args.mode, max_per_batch=args.max_per_batch)
    else:
        topology = build_topology(args.topic, args.redis_url, args.prefix or args.name,
                                  mode=args.mode, max_per_batch=args.max_per_batch,
                                  persistent=args.persistent)
    handle = submit_topology(args.name, conf, topology)

    def drained() -> int | None:
        records = [handle.sinks[s].committed() for s in SINKS if s in handle.sinks]
        return EXIT_DONE if all(r.offsets.get(args.topic) == ends for r in records) else None

    return watch(handle, "wb", drained, args.timeout)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m wb_topology``."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="wb_topology")
    for flag in ("--bootstrap", "--redis-url", "--topic", "--checkpoint", "--name"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--prefix", default=None)
    parser.add_argument("--mode", default="transactional", choices=("opaque", "transactional"))
    parser.add_argument("--max-per-batch", type=int, default=4_000)
    parser.add_argument("--provider", default="spark", choices=("spark", "redis"))
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--relay", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
