"""A dead-letter storm is never silent: a bolt that sends most of a batch to dead letters
with one exception type gets a WARNING naming it, the error, the count and the policy."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kstorm import BaseBasicBolt, Fields, TopologyBuilder
from kstorm.testing import ListSpout, TopologyTestDriver


class Ported(BaseBasicBolt):
    """A literal port's mistake: every input raises the same AttributeError."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        if tuple_.values[0] != "ok":
            collector.emit([tuple_.getString(0)])  # Java's name: no such method


def _topology() -> Any:
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([], Fields("word")))
    builder.set_bolt("split", Ported()).shuffle_grouping("words")
    return builder.create_topology()


def test_most_of_a_batch_dead_lettered_with_one_error_is_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with TopologyTestDriver(_topology()) as driver, caplog.at_level(logging.WARNING, "kstorm"):
        driver.pipe("words", [["a"], ["b"], ["c"], ["ok"]])
        assert len(driver.dead_letters) == 3
    warned = [r.getMessage() for r in caplog.records if "dead letters" in r.getMessage()]
    assert len(warned) == 1
    assert "bolt 'split' sent 3 of the 4 tuples" in warned[0]
    assert "AttributeError" in warned[0] and "kstorm.bolt.error.policy = 'fail'" in warned[0]


def test_a_few_bad_records_among_many_are_no_storm(caplog: pytest.LogCaptureFixture) -> None:
    with TopologyTestDriver(_topology()) as driver, caplog.at_level(logging.WARNING, "kstorm"):
        driver.pipe("words", [["a"], *[["ok"]] * 20])
        assert len(driver.dead_letters) == 1
    assert not [r for r in caplog.records if "dead letters" in r.getMessage()]
