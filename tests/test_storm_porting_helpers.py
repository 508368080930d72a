"""Issue 42 item 14: Storm's small helpers, as a ported topology calls them.

Where the seed documents describe the helper, the docstring quotes them; TestWordSpout,
FeederSpout, setMaxTaskParallelism and TopologyContext's graph questions are not in the
seeds, so those tests follow Storm's API (``org.apache.storm.testing``,
``BoltDeclarer``, ``TopologyContext``) and say so.
"""

from __future__ import annotations

from typing import Any

import pytest

from kstorm import BaseBasicBolt, BaseRichBolt, Fields, TopologyBuilder, Tuple
from kstorm.component import GlobalStreamId, TopologyContext
from kstorm.errors import ConfigError, TopologyError
from kstorm.grouping import GroupingKind
from kstorm.testing import FeederSpout, ListSpout, TestWordSpout, TopologyTestDriver
from kstorm.windowing import Count, Duration, TimeUnit


def test_get_values_and_typed_getters_return_none_for_a_null() -> None:
    """Seed 000: ``String word = tuple.getString(0);`` — Storm's typed getters cast the value,
    so a null field gives null; kstorm's give None instead of raising."""
    t = Tuple(["cat", None, None, 2], Fields("word", "count", "flag", "n"), "split")
    assert t.get_values() == ["cat", None, None, 2]
    assert t.get_string(0) == "cat"
    assert t.get_integer(1) is None
    assert t.get_long(1) is None
    assert t.get_double(1) is None
    assert t.get_boolean(2) is None
    assert t.get_binary(2) is None
    assert t.get_integer_by_field("count") is None
    assert t.get_long_by_field("n") == 2
    assert t.get_double_by_field("n") == 2.0
    with pytest.raises(TypeError, match="not int"):
        t.get_integer(0)


def test_count_of_and_duration_constructors_as_storm_writes_them() -> None:
    """Seed 004: ``new SlidingWindowBolt().withWindow(new Count(30), new Count(10))`` and
    "withTumblingWindow(BaseWindowedBolt.Duration duration)" — Storm builds them with
    ``Count.of(n)``, ``Duration.of(ms)``, ``new Duration(10, TimeUnit.SECONDS)`` and
    ``Duration.seconds(10)``."""
    assert Count.of(30) == Count(30)
    assert Duration.of(1_500) == Duration.millis(1_500)
    assert Duration(10, TimeUnit.SECONDS) == Duration.seconds(10) == Duration.of(
        10, TimeUnit.SECONDS)
    assert Duration(2, TimeUnit.MINUTES).millis == 120_000
    assert Duration(1_500, TimeUnit.MICROSECONDS).millis == 1  # truncated, as Java's toMillis
    with pytest.raises(ConfigError, match="TimeUnit"):
        Duration(10, "seconds")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least 1"):
        Count.of(0)


class Exclaim(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.get_string(0) + "!!!"])


def test_test_word_spout_emits_storms_words_on_field_word() -> None:
    """Storm's ``org.apache.storm.testing.TestWordSpout`` (storm-starter's
    ExclamationTopology: ``builder.setSpout("word", new TestWordSpout(), 10)``): random words
    from nathan, mike, jackson, golda, bertels on field "word"."""
    b = TopologyBuilder()
    b.set_spout("word", TestWordSpout(limit=50, seed=7))
    b.set_bolt("exclaim1", Exclaim(), 3).shuffle_grouping("word")
    topology = b.create_topology()
    assert topology.components["word"].streams["default"] == Fields("word")
    with TopologyTestDriver(topology) as driver:
        driver.run()
        words = [w for [w] in driver.output("word")]
        assert len(words) == 50
        assert set(words) <= {"nathan", "mike", "jackson", "golda", "bertels"}
        assert len(set(words)) > 1
        assert sorted(driver.output("exclaim1")) == sorted([[w + "!!!"] for w in words])


def test_feeder_spout_emits_what_the_test_feeds() -> None:
    """Storm's ``org.apache.storm.testing.FeederSpout``: ``feed(values[, messageId])`` from
    the test; the spout emits the fed tuples in order, with their message ids."""
    spout = FeederSpout(Fields("sentence"))
    b = TopologyBuilder()
    b.set_spout("feeder", spout)
    b.set_bolt("exclaim", Exclaim()).shuffle_grouping("feeder")
    with TopologyTestDriver(b.create_topology()) as driver:
        spout.feed(["a"])
        spout.feed(["b"], "id-b")
        driver.run()
        assert driver.output("exclaim") == [["a!!!"], ["b!!!"]]
        spout.feed(["c"])
        driver.run()
        assert driver.output("exclaim") == [["a!!!"], ["b!!!"], ["c!!!"]]
        assert spout.pending == 0
    with pytest.raises(ConfigError, match=r"2 value\(s\) for fields \[.sentence.\]"):
        spout.feed(["x", "y"])


def test_set_max_task_parallelism_caps_the_declared_parallelism() -> None:
    """Storm's ``BoltDeclarer.setMaxTaskParallelism(n)`` (storm-starter's
    ``TestWordSpout(false)`` caps itself at 1): the component runs at most n tasks."""
    b = TopologyBuilder()
    b.set_spout("word", TestWordSpout(limit=1), 10).set_max_task_parallelism(3)
    b.set_bolt("exclaim", Exclaim(), 2).shuffle_grouping("word").set_max_task_parallelism(5)
    topology = b.create_topology()
    assert topology.components["word"].parallelism == 3
    assert topology.components["exclaim"].parallelism == 2  # a cap above changes nothing
    with pytest.raises(TopologyError, match="int >= 1"):
        b.set_bolt("other", Exclaim()).set_max_task_parallelism(0)


SEEN: dict[str, Any] = {}


class Introspect(BaseRichBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def prepare(self, conf: Any, context: TopologyContext, collector: Any) -> None:
        SEEN.update(conf=dict(conf), sources=context.get_this_sources(),
                    id=context.get_this_component_id(), task=context.get_this_task_id(),
                    fields=context.get_component_output_fields("words"),
                    targets=context.get_this_targets(),
                    task_to_component=context.get_task_to_component(),
                    component_of_2=context.get_component_id(2),
                    components=context.get_component_ids(), storm_id=context.get_storm_id())

    def execute(self, tuple_: Any) -> None:
        pass


def test_topology_context_describes_the_graph_and_conf_has_storms_defaults() -> None:
    """Seed 001: "This timeout can be configured on a topology-specific basis using the
    Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS configuration and defaults to 30 seconds." — a bolt
    reading it from ``prepare``'s conf finds 30; and Storm's TopologyContext answers
    ``getThisSources()``, ``getComponentOutputFields(component, stream)``,
    ``getThisComponentId()``, ``getThisTaskId()``."""
    SEEN.clear()
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("a",)]], Fields("word")), 2)
    b.set_bolt("inspect", Introspect()).shuffle_grouping("words")
    with TopologyTestDriver(b.create_topology(), {"user.x": 1}) as driver:
        driver.run()
    assert SEEN["conf"]["topology.message.timeout.secs"] == 30
    assert SEEN["conf"]["topology.max.spout.pending"] is None
    assert SEEN["conf"]["user.x"] == 1
    ((source, grouping),) = SEEN["sources"].items()
    assert source == GlobalStreamId("words", "default")
    assert grouping.kind is GroupingKind.SHUFFLE
    assert SEEN["id"] == "inspect"
    assert SEEN["task"] == 1  # tasks numbered from 1 by component id: inspect, then words
    assert SEEN["fields"] == Fields("word")
    assert SEEN["targets"] == {"default": {}}
    # getTaskToComponent(), getComponentId(taskId), getComponentIds(), getStormId()
    assert SEEN["task_to_component"] == {1: "inspect", 2: "words", 3: "words"}
    assert SEEN["component_of_2"] == "words"
    assert SEEN["components"] == {"inspect", "words"}
    assert isinstance(SEEN["storm_id"], str) and SEEN["storm_id"]
    with pytest.raises(TopologyError, match="without its topology"):
        TopologyContext("t", "c").get_this_sources()
