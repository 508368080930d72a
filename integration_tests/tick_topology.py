"""Rolling counts on tick tuples (storm-starter's ``RollingCountBolt``), for Spark's workers.

- :class:`RollingCount`: counts words in memory; on each tick emits ``(word, count)`` for
  what it counted since the last one and ``(task, 1)`` on stream ``ticks``.
- :class:`StatefulRollingCount`: the same with the counts in its ``KeyValueState``, so a
  failed or replayed batch neither loses nor repeats a count (exactly once).
- :func:`topology`: a ``KafkaSpout`` of words -> both bolts (fields grouping, 2 tasks, a
  1 s tick) -> exactly-once ``RedisSink``s adding the counts under ``<prefix>:plain:<word>``
  and ``<prefix>:state:<word>``, and the ticks under ``<prefix>:ticks:<bolt>:<task>``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

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
