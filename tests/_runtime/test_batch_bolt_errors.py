"""An exception from a batch bolt's ``execute`` fails its transaction, as Storm's
*Transactional topologies* says: "If the bolt throws an exception ... the transaction will
fail and be replayed" -- never a commit of the batch without the tuple."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from kstorm import (
    BaseBasicBolt,
    BaseTransactionalBolt,
    Fields,
    ICommitter,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)
from kstorm.errors import KstormError
from kstorm.testing import CaptureSink, TopologyTestDriver


class Partial(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "n"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.get_value_by_field("word"), 1])


class FlakySum(BaseTransactionalBolt, ICommitter):
    """Sums; raises on the word ``bad`` for its first ``failures`` attempts in all."""

    failures: ClassVar[int] = 1
    raised: ClassVar[int] = 0

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.sum = collector, id, 0

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("txid", "total"))

    def execute(self, tuple_: Any) -> None:
        if tuple_.values[0] == "bad" and type(self).raised < type(self).failures:
            type(self).raised += 1
            msg = "a flaky store"
            raise ValueError(msg)
        self.sum += tuple_.values[1]

    def finish_batch(self) -> None:
        self.collector.emit([self.id.transaction_id, self.sum])


def _topology() -> Any:
    spout = MemoryTransactionalSpout({0: [["a"]]}, Fields("word"), 10)
    builder = TransactionalTopologyBuilder("count", "spout", spout)
    builder.set_bolt("partial", Partial(), 2).shuffle_grouping("spout")
    builder.set_committer_bolt("sum", FlakySum()).global_grouping("partial")
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("sum")
    return builder.build_topology()


def test_an_execute_error_replays_the_transaction_and_the_count_is_whole() -> None:
    FlakySum.failures, FlakySum.raised = 1, 0
    with TopologyTestDriver(_topology(), {"kstorm.transaction.backoff.ms": 0}) as driver:
        driver.pipe("spout", [["a"], ["bad"], ["c"]])
        assert FlakySum.raised == 1
        assert driver.output("out") == [[1, 3]]  # a global count of 3 stores 3 (txid 1)
        assert driver.dead_letters == []


def test_an_execute_error_every_attempt_fails_the_topology_under_the_fail_policy() -> None:
    FlakySum.failures, FlakySum.raised = 100, 0
    conf = {"kstorm.transaction.backoff.ms": 0, "kstorm.transaction.max.attempts": 3}
    with TopologyTestDriver(_topology(), conf) as driver:
        with pytest.raises(KstormError, match=r"batch bolt 'sum' raised ValueError"):
            driver.pipe("spout", [["a"], ["bad"]])
        assert FlakySum.raised == 3
        assert driver.output("out") == []
