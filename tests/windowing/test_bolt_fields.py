"""A windowed bolt's own fields follow its windows: other instances, failed attempts."""

from __future__ import annotations

import logging
import threading
from typing import Any, ClassVar

import pytest

from kstorm import Fields, TopologyBuilder, Values
from kstorm._runtime import bolt_fields
from kstorm.bolt import BaseBasicBolt, OutputCollector
from kstorm.errors import FailedException
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import CaptureSink, ListSpout
from kstorm.windowing import BaseWindowedBolt, Count


class RunningSum(BaseWindowedBolt):
    """storm-starter's SlidingWindowSumBolt: a running sum from get_new and get_expired."""

    def __init__(self) -> None:
        super().__init__()
        self.sum = 0

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.lock = threading.Lock()  # does not pickle: stays as prepare made it

    def execute(self, window: Any) -> None:
        self.sum += sum(t.get_value(0) for t in window.get_new())
        self.sum -= sum(t.get_value(0) for t in window.get_expired())
        self.collector.emit(Values(self.sum, sum(t.get_value(0) for t in window.get())))

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("sum", "truth"))


class FailOnce(BaseBasicBolt):
    """Fails the first attempt of batch ``batch`` after the windows fired."""

    batch: ClassVar[int | None] = None

    def prepare(self, conf: Any, context: Any) -> None:
        self.context = context

    def execute(self, tuple_: Any, collector: Any) -> None:
        if self.context.batch_id == type(self).batch:
            type(self).batch = None
            raise FailedException("the first attempt fails downstream of the windows")
        collector.emit(list(tuple_.values))

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("sum", "truth"))


def _topology(batches: list[list[tuple[int]]]) -> Any:
    b = TopologyBuilder()
    b.set_spout("n", ListSpout(batches, Fields("n")))
    b.set_bolt("sum", RunningSum().with_window(Count(4), Count(2))).global_grouping("n")
    b.set_bolt("check", FailOnce()).shuffle_grouping("sum")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("check")
    return b.create_topology()


def test_a_failed_attempt_leaves_no_trace_in_the_bolts_fields() -> None:
    batches = [[(i * 3 + j,) for j in range(3)] for i in range(6)]
    FailOnce.batch = 2
    with TopologyTestDriver(_topology(batches)) as driver:
        driver.run()
        rows = driver.output("out")
        retried = sum(n for k, n in driver.counters.items() if k.startswith("__transactions."))
    assert FailOnce.batch is None and retried == 1  # batch 2 failed once, then committed
    assert rows, "no window fired"
    assert all(s == truth for s, truth in rows), rows


def test_another_instance_takes_the_fields_the_windows_carry() -> None:
    first, second = RunningSum(), RunningSum()
    first.sum, first.collector = 7, OutputCollector(None, None, None)
    saved = bolt_fields.save(first, "sum")
    bolt_fields.restore(second, saved)
    assert second.sum == 7
    assert not hasattr(second, "collector")  # the runtime's objects are not carried


def test_the_instance_that_saved_them_keeps_its_own_until_it_changes() -> None:
    bolt = RunningSum()
    bolt.sum = 1
    saved = bolt_fields.save(bolt, "sum")
    bolt.cache = object()  # not part of the saved fields, and it stays
    bolt_fields.restore(bolt, saved)
    assert hasattr(bolt, "cache")
    bolt.sum = 99  # the batch runs and fails before the next save
    bolt_fields.restore(bolt, saved)  # the next attempt: back to the windows' fields
    assert bolt.sum == 1


def test_fields_that_do_not_pickle_stay_and_are_named_once(
        caplog: pytest.LogCaptureFixture) -> None:
    bolt = RunningSum()
    bolt.sum, bolt.lock = 3, threading.Lock()
    caplog.set_level(logging.INFO, logger="kstorm.windowing")
    saved = bolt_fields.save(bolt, "sum-unpicklable")
    bolt_fields.save(bolt, "sum-unpicklable")
    other = RunningSum()
    bolt_fields.restore(other, saved)
    assert other.sum == 3
    assert not hasattr(other, "lock")
    named = [r for r in caplog.records if "do not pickle" in r.getMessage()]
    assert len(named) == 1 and "['lock']" in named[0].getMessage()


class Handed:
    """A state without seed 000's methods (as Spark's map state is), and picklable."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


def test_the_state_the_runtime_handed_the_bolt_stays_its_own() -> None:
    bolt, state = RunningSum(), Handed()
    bolt.state, bolt.sum = state, 5
    saved = bolt_fields.save(bolt, "sum", (state,))
    other = RunningSum()
    bolt_fields.restore(other, saved)
    assert other.sum == 5 and not hasattr(other, "state")
