"""Tick tuples (``topology.tick.tuple.freq.secs``) on the test driver, and what is refused.

Storm's rolling counts (storm-starter's ``RollingCountBolt``) count in memory and emit on
each tick: every task of the bolt gets one tuple ``[secs]`` from ``__system`` on ``__tick``
per period of batch time, at most once a period, unanchored.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from kstorm import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseWindowedBolt,
    Config,
    Fields,
    TopologyBuilder,
    TupleUtils,
)
from kstorm._runtime.ticks import counts, due, tick_periods
from kstorm.errors import ConfigError, TopologyError
from kstorm.testing import CaptureSink, ListSpout, TopologyTestDriver
from kstorm.windowing import Duration

KEY = Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS


class RollingCount(BaseRichBolt):
    """Counts words; on each tick emits ``(word, count, task)`` for what it saw, then resets."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector, self.task, self.counts = collector, context.task_index, Counter()
        self.ticks: list[list[Any]] = []

    def execute(self, tuple_: Any) -> None:
        if TupleUtils.is_tick(tuple_):
            self.ticks.append(list(tuple_.values))
            for word, n in sorted(self.counts.items()):
                self.collector.emit([word, n, self.task])
            self.collector.emit("ticks", [self.task, tuple_.get_integer_by_field("rate_secs")])
            self.counts.clear()
        else:
            self.counts[tuple_.get_string_by_field("word")] += 1
        self.collector.ack(tuple_)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count", "task"))
        declarer.declare_stream("ticks", Fields("task", "secs"))


class OwnTicks(RollingCount):
    def get_component_configuration(self) -> dict[str, Any]:
        return {KEY: 2}


class Words(BaseBasicBolt):
    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.values[0]])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class Windowed(BaseWindowedBolt):
    def execute(self, window: Any) -> None:
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))


def _topology(bolt: Any = None, *, tasks: int = 2, secs: float | None = None,
              grouping: str = "fields") -> Any:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([], Fields("word")))
    declarer = b.set_bolt("count", bolt or RollingCount(), tasks)
    if grouping == "fields":
        declarer.fields_grouping("words", Fields("word"))
    else:
        declarer.shuffle_grouping("words")
    if secs is not None:
        declarer.add_configuration(KEY, secs)
    b.set_bolt("out", CaptureSink()).shuffle_grouping("count")
    b.set_bolt("ticks", CaptureSink()).shuffle_grouping("count", "ticks")
    return b.create_topology()


def test_every_task_gets_one_tick_a_period_and_emits_what_it_counted() -> None:
    with TopologyTestDriver(_topology(), {KEY: 5}, start_time_ms=1_000) as driver:
        driver.pipe("words", [["a"], ["b"], ["a"], ["c"]])
        assert driver.output("count") == []  # nothing until the first tick
        driver.advance_time(3_000)  # 4 s: before the first period boundary (5 s)
        assert driver.output("count", "ticks") == []
        driver.advance_time(1_000)  # 5 s: a batch without input carries the ticks
        assert sorted(driver.output("count", "ticks")) == [[0, 5], [1, 5]]
        counted = Counter({w: n for w, n, _ in driver.output("count")})
        assert counted == Counter(a=2, b=1, c=1)
        # one task per word (fields grouping), so each word was counted by one task
        assert len({(w, t) for w, _, t in driver.output("count")}) == 3
        driver.pipe("words", [["a"]])
        driver.advance_time(12_000)  # 17 s: two periods passed, one tick (at most once)
        assert sorted(driver.output("count", "ticks")) == [[0, 5], [0, 5], [1, 5], [1, 5]]
        assert driver.output("count")[-1][:2] == ["a", 1]


def test_ticks_are_not_anchored_and_never_reach_a_sink_as_data() -> None:
    with TopologyTestDriver(_topology(secs=1), {"topology.guarantee": "at-least-once"},
                            start_time_ms=0) as driver:
        driver.pipe("words", [["x"], ["y"]])
        driver.advance_time(1_000)
        driver.drain()
        assert sorted(t.values[0] for t in driver.received("out")) == ["x", "y"]
        assert driver.counters["words.acked"] == 2  # the ticks opened no tuple tree
        assert not driver.dead_letters


def test_a_bolt_s_own_period_wins_over_the_topology_s() -> None:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([], Fields("word")))
    b.set_bolt("own", OwnTicks(), 1).shuffle_grouping("words")
    b.set_bolt("set", RollingCount(), 1).shuffle_grouping("words").add_configuration(KEY, 3)
    b.set_bolt("default", RollingCount(), 1).shuffle_grouping("words")
    b.set_bolt("plain", Words(), 1).shuffle_grouping("words")
    topology = b.create_topology()
    assert tick_periods(topology, 10) == {"own": 2.0, "set": 3.0, "default": 10.0,
                                          "plain": 10.0}
    assert tick_periods(topology) == {"own": 2.0, "set": 3.0}


def test_a_shuffle_grouped_bolt_gets_ticks_on_each_task_too() -> None:
    with TopologyTestDriver(_topology(tasks=3, secs=1, grouping="shuffle")) as driver:
        driver.pipe("words", [[w] for w in "abcdef"])
        driver.advance_time(1_000)
        assert sorted(t for t, _ in driver.output("count", "ticks")) == [0, 1, 2]
        assert sum(n for _, n, _ in driver.output("count")) == 6


def test_ticks_do_not_fuse_the_bolt_into_its_upstream_stage() -> None:
    with TopologyTestDriver(_topology(secs=1)) as driver:
        stage = driver.plan.stages[driver.plan.stage_of["count"]]
    assert stage.head == "count" and stage.raw_spout is None and stage.tick_secs == 1.0


@pytest.mark.parametrize("value", [0, -1, "5", True])
def test_a_bad_period_is_refused_naming_the_bolt(value: Any) -> None:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([], Fields("word")))
    with pytest.raises(TopologyError, match=r"bolt 'count'.*tick.tuple.freq.secs"):
        b.set_bolt("count", RollingCount()).shuffle_grouping("words").add_configuration(
            KEY, value)


def test_a_bad_topology_period_is_refused() -> None:
    with pytest.raises(ConfigError, match="tick.tuple.freq.secs"):
        TopologyTestDriver(_topology(), {KEY: 0})


def test_a_period_on_a_spout_or_a_windowed_bolt_is_refused_with_the_reason() -> None:
    b = TopologyBuilder()
    with pytest.raises(TopologyError, match="applies to bolts only"):
        b.set_spout("words", ListSpout([], Fields("word"))).add_configuration(KEY, 1)
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([], Fields("word")))
    windowed = Windowed().with_tumbling_window(Duration.seconds(5))
    b.set_bolt("w", windowed).shuffle_grouping("words").add_configuration(KEY, 1)
    with pytest.raises(TopologyError, match="windowed bolt fires on its own timer"):
        tick_periods(b.create_topology())
    # the topology-wide setting leaves windowed bolts and sinks out
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([], Fields("word")))
    b.set_bolt("w", windowed).shuffle_grouping("words")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")
    assert tick_periods(b.create_topology(), 1) == {}


def test_due_ticks_follow_whole_periods_of_batch_time() -> None:
    periods = {"a": 5.0, "b": 2.0}
    start = counts(periods, 3_999)
    assert due(start, counts(periods, 5_000)) == ["a", "b"]
    assert due(start, counts(periods, 5_999)) == ["a", "b"]
    assert due(counts(periods, 6_000), counts(periods, 7_999)) == []
    assert due({}, counts(periods, 10_000)) == []  # a bolt new to the checkpoint waits
