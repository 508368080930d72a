"""Rolling counts on tick tuples (storm-starter's ``RollingCountBolt``), for Spark's workers.

- :class:`RollingCount`: counts words in memory; on each tick emits ``(word, count)`` for
  what it counted since the last one and ``(task, 1)`` on stream ``ticks``.
- :class:`StatefulRollingCount`: the same with the counts in its ``KeyValueState``, so a
  failed or replayed batch neither loses nor repeats a count (exactly once).
- :func:`topology`: a ``KafkaSpout`` of words -> both bolts (fields grouping, 2 tasks, a
  1 s tick) -> exactly-once ``RedisSink``s adding the counts under ``<prefix>:plain:<word>``
  and ``<prefix>:state:<word>``, and the ticks under ``<prefix>:ticks:<bolt>:<task>``.
- :func:`kill_topology` and the killable runner, for the tick kill test: a ``KafkaSpout``
  of words (small batches) -> :class:`StatefulRollingCount` (2 tasks, fields grouping, a
  1 s tick, its state on the ``redis`` provider in the sink's database, so it outlives a
  deleted checkpoint) -> an exactly-once ``RedisSink`` (id ``store``) adding the counts
  under ``<name>:count:<word>``. The continuous trigger; the run exits 0 once the stored
  counts add up to ``--expected``, 2 if they pass it, 1 if the topology stopped, 3 on
  timeout:

    python -m tick_topology --topic T --bootstrap B --redis-url U --checkpoint D \\
        --name N --expected K [--timeout S]
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from typing import Any

from _runner import arguments, count_reached, kafka_conf, parse, watch

from kstorm import (
    BaseRichBolt,
    BaseStatefulBolt,
    Config,
    Fields,
    KafkaSpout,
    TopologyBuilder,
    TupleUtils,
)
from serdes import StringSerde
from sinks.redis import RedisConfig, RedisSink

log = logging.getLogger("tick_topology")
SINK_ID = "store"


class RollingCount(BaseRichBolt):
    """Counts in memory, emits and resets on each tick."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector, self.task, self.counts = collector, context.task_index, Counter()

    def execute(self, tuple_: Any) -> None:
        if TupleUtils.is_tick(tuple_):
            for word, n in sorted(self.counts.items()):
                self.collector.emit([word, n])
            self.collector.emit("ticks", [self.task, 1])
            self.counts.clear()
        else:
            self.counts[tuple_.get_string_by_field("word")] += 1
        self.collector.ack(tuple_)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))
        declarer.declare_stream("ticks", Fields("task", "n"))


class StatefulRollingCount(BaseStatefulBolt):
    """Counts in its state, emits and deletes them on each tick."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector, self.task = collector, context.task_index

    def execute(self, tuple_: Any) -> None:
        if TupleUtils.is_tick(tuple_):
            pending = sorted(self.state)
            for word, n in pending:
                self.collector.emit([word, n])
                self.state.delete(word)
            self.collector.emit("ticks", [self.task, 1])
        else:
            word = tuple_.get_string_by_field("word")
            self.state.put(word, self.state.get(word, 0) + 1)
        self.collector.ack(tuple_)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))
        declarer.declare_stream("ticks", Fields("task", "n"))


def topology(topic: str, redis_url: str, prefix: str, tick_secs: float = 1.0) -> Any:
    """The topology described in the module docstring."""
    b = TopologyBuilder()
    b.set_spout("words", KafkaSpout(topic, value_serde=StringSerde(field="word")))
    redis = RedisConfig.from_url(redis_url)
    for name, bolt in (("plain", RollingCount()), ("state", StatefulRollingCount())):
        b.set_bolt(name, bolt, 2).fields_grouping("words", Fields("word")).add_configuration(
            Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, tick_secs)
        b.set_bolt(f"{name}-out", RedisSink(redis, key=f"{prefix}:{name}:{{word}}",
                                            value="count", merge="add")).shuffle_grouping(name)
        b.set_bolt(f"{name}-ticks", RedisSink(redis, key=f"{prefix}:ticks:{name}:{{task}}",
                                              value="n", merge="add")
                   ).shuffle_grouping(name, "ticks")
    return b.create_topology()


def kill_topology(topic: str, redis_url: str, name: str, max_per_batch: int = 40) -> Any:
    """The kill test's topology (module docstring)."""
    b = TopologyBuilder()
    b.set_spout("words", KafkaSpout(topic, value_serde=StringSerde(field="word"),
                                    max_offsets_per_batch=max_per_batch))
    b.set_bolt("rolling", StatefulRollingCount(), 2).fields_grouping(
        "words", Fields("word")).add_configuration(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 1)
    b.set_bolt(SINK_ID, RedisSink(RedisConfig.from_url(redis_url), key=f"{name}:count:{{word}}",
                                  value="count", merge="add")).shuffle_grouping("rolling")
    return b.create_topology()


def stored_total(client: Any, name: str) -> int:
    """The sum of the counts stored under ``<name>:count:*``."""
    return sum(int(client.get(key) or 0) for key in client.scan_iter(f"{name}:count:*"))


def run(args: argparse.Namespace) -> int:
    """Run until the stored counts add up to ``--expected`` (0), or pass it (2)."""
    import redis
    from tick_topology import kill_topology  # its bolt a class the workers import, not __main__'s
    from wc_topology import provider_conf

    from kstorm import submit_topology

    conf = kafka_conf(args, **provider_conf("redis", args.redis_url))
    handle = submit_topology(args.name, conf, kill_topology(args.topic, args.redis_url,
                                                            args.name))
    client = redis.Redis.from_url(args.redis_url, socket_timeout=5)
    return watch(handle, "ticks", lambda: count_reached(stored_total(client, args.name),
                                                         args.expected),
                 args.timeout, retry_on=(redis.RedisError,))


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    parser = arguments("tick_topology")
    parser.add_argument("--expected", type=int, required=True, help="words in --topic")
    return run(parse(parser, argv))


if __name__ == "__main__":
    sys.exit(main())
