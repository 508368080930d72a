"""Per-component configuration, as Storm's declarers give it: ``set_max_spout_pending``,
``add_configuration`` / ``add_configurations``; topology-wide keys refused on a component.

Storm's *Guaranteeing message processing*: "The maximum number of spout tuples that can be
pending on a single spout task ... is set with ``Config.TOPOLOGY_MAX_SPOUT_PENDING``", which
Storm's ``SpoutDeclarer.setMaxSpoutPending`` sets for one spout.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_list_spout_acking import AT_LEAST_ONCE, Work

from kstorm import Fields, TopologyBuilder
from kstorm.acking import RetryPolicy
from kstorm.errors import TopologyError
from kstorm.testing import CaptureSink, ListSpout, TopologyTestDriver


@pytest.fixture(autouse=True)
def _reset() -> None:
    Work.seen, Work.always = [], False


def _topology(spout: ListSpout, cap: int | None) -> Any:
    b = TopologyBuilder()
    declarer = b.set_spout("words", spout)
    if cap is not None:
        declarer.set_max_spout_pending(cap)
    b.set_bolt("work", Work(), 1).shuffle_grouping("words")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    return b.create_topology()


def test_a_spout_s_own_max_spout_pending_holds_its_next_batch_back() -> None:
    spout = ListSpout([[("x1",), ("x2",)], [("a",), ("b",)]], Fields("word"),
                      retry=RetryPolicy(initial_delay_ms=1_000))
    with TopologyTestDriver(_topology(spout, 2), AT_LEAST_ONCE) as driver:
        driver.run()
        assert sorted(w for [w] in driver.output("out")) == ["a", "b", "x1", "x2"]
    # as with the topology-wide key: the retries run before list batch 1
    assert Work.seen == ["0:0", "0:1", "0:0", "0:1", "1:0", "1:1"]


def test_without_a_cap_the_batches_do_not_wait() -> None:
    spout = ListSpout([[("x1",), ("x2",)], [("a",), ("b",)]], Fields("word"),
                      retry=RetryPolicy(initial_delay_ms=1_000))
    with TopologyTestDriver(_topology(spout, None), AT_LEAST_ONCE) as driver:
        driver.run()
    assert Work.seen == ["0:0", "0:1", "1:0", "1:1", "0:0", "0:1"]


def test_topology_wide_keys_are_refused_on_a_component_naming_it() -> None:
    b = TopologyBuilder()
    spout = b.set_spout("words", ListSpout([], Fields("word")))
    bolt = b.set_bolt("work", Work()).shuffle_grouping("words")
    with pytest.raises(TopologyError, match=r"bolt 'work': 'topology.message.timeout.secs'"
                                            r" is a topology-wide key"):
        bolt.add_configuration("topology.message.timeout.secs", 5)
    with pytest.raises(TopologyError, match="applies to spouts only"):
        bolt.add_configurations({"topology.max.spout.pending": 5})
    with pytest.raises(TopologyError, match="int >= 1"):
        spout.set_max_spout_pending(0)
    bolt.add_configuration("my.own.key", 7).set_debug(True)  # the user's keys pass
    assert b.create_topology().components["work"].conf == {"my.own.key": 7,
                                                           "topology.debug": True}


def test_a_count_window_longer_than_max_spout_pending_is_refused_at_start() -> None:
    """Storm's ``WindowedBoltExecutor.validate``: "Window length + sliding interval count
    (...) is more than topology.max.spout.pending (...)" -- at least once, the spout would
    stop emitting before the window fills, and every tree would time out."""
    from kstorm import BaseWindowedBolt
    from kstorm.errors import ConfigError
    from kstorm.windowing import Count

    class Sum(BaseWindowedBolt):
        def declare_output_fields(self, declarer: Any) -> None:
            declarer.declare(Fields("n"))

        def execute(self, window: Any) -> None:
            """Nothing: only the start is tested."""

    def topology(cap: int) -> Any:
        b = TopologyBuilder()
        b.set_spout("words", ListSpout([[("a",)]], Fields("word"))).set_max_spout_pending(cap)
        b.set_bolt("sum", Sum().with_window(Count(10), Count(5))).shuffle_grouping("words")
        return b.create_topology()

    with pytest.raises(ConfigError, match=r"window length \+ sliding interval count \(15\) "
                                          r"is more than topology.max.spout.pending \(8\)"):
        TopologyTestDriver(topology(8), AT_LEAST_ONCE)
    TopologyTestDriver(topology(15), AT_LEAST_ONCE).close()  # fits
