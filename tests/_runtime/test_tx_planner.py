"""Writing your own transactional spout (Storm's *Transactional topologies*), on the test driver.

The coordinated ``ITransactionalSpout``: the coordinator's ``is_ready`` and
``initialize_transaction(txid, prev_metadata)``, ``parallelism`` emitter tasks each emitting
its part, ``cleanup_before`` with the txids that are done; partitioned and opaque spouts
driven by :meth:`TopologyTestDriver.run` to the end of their input. The planner is the one
Spark's source uses (``kstorm/_runtime/tx_planner.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kstorm import Fields
from kstorm.errors import FailedException
from kstorm.testing import TopologyTestDriver
from kstorm.transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    ICommitter,
    ITransactionalSpout,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    TransactionalCoordinator,
    TransactionalEmitter,
    TransactionalTopologyBuilder,
)
from kstorm.transactional.attempt import TransactionAttempt

WORDS = [f"w{i % 7}" for i in range(23)]


class Journal:
    """What the spout's parts did, in order (one object: the driver runs in this process)."""

    def __init__(self) -> None:
        self.ready: list[bool] = []
        self.metas: list[tuple[int, Any, Any]] = []  # (txid, prev, new)
        self.emits: list[tuple[int, int, int]] = []  # (task, txid, attempt id)
        self.cleanups: list[tuple[int, int]] = []   # (task, txid)
        self.attempts: list[tuple[int, int]] = []   # (txid, attempt id) the committer saw


JOURNAL = Journal()  # the topology holds copies of its components: they write here
GATE = [True]       # what the coordinator's is_ready says


@pytest.fixture(autouse=True)
def _fresh_journal() -> None:
    global JOURNAL
    JOURNAL = Journal()
    GATE[0] = True


class RangeCoordinator(TransactionalCoordinator):
    def __init__(self, size: int, take: int) -> None:
        self.journal, self.size, self.take = JOURNAL, size, take

    def is_ready(self) -> bool:
        self.journal.ready.append(GATE[0])
        return GATE[0]

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        start = 0 if prev_metadata is None else prev_metadata["end"]
        meta = {"start": start, "end": min(start + self.take, self.size)}
        self.journal.metas.append((txid, prev_metadata, meta))
        return meta


class RangeEmitter(TransactionalEmitter):
    def __init__(self, words: list[str], task: int, tasks: int) -> None:
        self.journal, self.words, self.task, self.tasks = JOURNAL, words, task, tasks

    def emit_batch(self, tx: TransactionAttempt, coordinator_meta: Any, collector: Any) -> None:
        self.journal.emits.append((self.task, tx.transaction_id, tx.attempt_id))
        for i in range(coordinator_meta["start"], coordinator_meta["end"]):
            if i % self.tasks == self.task:
                collector.emit([tx, self.words[i]])

    def cleanup_before(self, txid: int) -> None:
        self.journal.cleanups.append((self.task, txid))


class RangeSpout(ITransactionalSpout):
    """A coordinated spout over a list: each transaction takes the next ``take`` words."""

    def __init__(self, words: list[str], take: int) -> None:
        self.words, self.take = words, take

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("tx", "word"))

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> RangeCoordinator:
        return RangeCoordinator(len(self.words), self.take)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> RangeEmitter:
        return RangeEmitter(self.words, context.task_index, context.num_tasks)


class BatchWords(BaseBatchBolt):
    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.words = collector, id, []

    def execute(self, tuple_: Any) -> None:
        self.words.append(tuple_.get_string_by_field("word"))

    def finish_batch(self) -> None:
        self.collector.emit([self.id, len(self.words)])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "count"))


class Total(BaseTransactionalBolt, ICommitter):
    """The committer: the batch's total, once per txid (a failure on a chosen first attempt)."""

    fail_first: set[int] = set()

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.sum = collector, id, 0
        JOURNAL.attempts.append((id.transaction_id, id.attempt_id))

    def execute(self, tuple_: Any) -> None:
        self.sum += tuple_.get_integer_by_field("count")

    def finish_batch(self) -> None:
        txid = self.id.transaction_id
        if txid in self.fail_first:
            self.fail_first.discard(txid)
            raise FailedException(f"txid {txid} fails once on purpose")
        self.collector.emit([txid, self.sum])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("txid", "count"))


def _topology(spout: Any, parallelism: int = 1) -> Any:
    builder = TransactionalTopologyBuilder("range", "spout", spout, parallelism)
    builder.set_bolt("partial", BatchWords(), 2).shuffle_grouping("spout")
    builder.set_committer_bolt("total", Total()).global_grouping("partial")
    return builder.build_topology()


def test_a_coordinated_spout_runs_its_coordinator_and_every_emitter_task() -> None:
    spout = RangeSpout(WORDS, take=5)
    with TopologyTestDriver(_topology(spout, parallelism=3)) as driver:
        driver.run()
        totals = driver.output("total")
    journal = JOURNAL
    # five transactions of 5, 5, 5, 5, 3 words: txids from 1, each total once, in order
    assert totals == [[1, 5], [2, 5], [3, 5], [4, 5], [5, 3]]
    # the coordinator chains the metadata: each transaction gets the previous one's
    assert [(t, p, m) for t, p, m in journal.metas][:2] == [
        (1, None, {"start": 0, "end": 5}), (2, {"start": 0, "end": 5}, {"start": 5, "end": 10})]
    # the sixth transaction is planned but emits nothing: the end of the input
    assert [m["end"] - m["start"] for _, _, m in journal.metas] == [5, 5, 5, 5, 3, 0]
    # all three emitter tasks emit their part of every transaction
    assert sorted({(task, txid) for task, txid, _ in journal.emits}) == [
        (task, txid) for task in range(3) for txid in range(1, 7)]


def test_cleanup_before_gets_the_txids_that_committed() -> None:
    spout = RangeSpout(WORDS, take=5)
    with TopologyTestDriver(_topology(spout, parallelism=2)) as driver:
        driver.run()
    cleanups = JOURNAL.cleanups
    # from the second transaction on, each emitter task hears of the one before it
    assert cleanups == [(task, txid) for txid in range(1, 6) for task in range(2)]
    emits = {(task, txid) for task, txid, _ in JOURNAL.emits}
    assert all((task, txid + 1) in emits for task, txid in cleanups)


def test_no_transaction_starts_while_the_coordinator_is_not_ready() -> None:
    spout = RangeSpout(WORDS, take=10)
    with TopologyTestDriver(_topology(spout)) as driver:
        GATE[0] = False
        driver.run()
        assert driver.output("total") == []
        assert JOURNAL.metas == [] and JOURNAL.ready == [False]
        GATE[0] = True
        driver.run()
        assert driver.output("total") == [[1, 10], [2, 10], [3, 3]]


def test_a_failed_transaction_replays_with_the_same_metadata_and_a_new_attempt() -> None:
    spout = RangeSpout(WORDS, take=5)
    Total.fail_first = {2}
    with TopologyTestDriver(_topology(spout, parallelism=2)) as driver:
        driver.run()
        assert driver.output("total") == [[1, 5], [2, 5], [3, 5], [4, 5], [5, 3]]
    # txid 2 was planned once (one metadata), its batch ran twice with two attempt ids
    assert [txid for txid, _, _ in JOURNAL.metas].count(2) == 1
    attempts = [a for txid, a in JOURNAL.attempts if txid == 2]
    assert len(attempts) == 2 and attempts[0] != attempts[1]


@pytest.mark.parametrize("spout_type", [MemoryTransactionalSpout,
                                        OpaqueMemoryTransactionalSpout])
def test_run_drives_a_partitioned_spout_to_the_end_of_its_input(spout_type: Any) -> None:
    data = {0: [[w] for w in WORDS], 1: [[w] for w in WORDS[:9]]}
    with TopologyTestDriver(_topology(spout_type(data, Fields("word"), 4))) as driver:
        driver.run()
        totals = driver.output("total")
    # 4 + 4 a transaction while partition 1 lasts, then partition 0's rest
    assert [count for _, count in totals] == [8, 8, 5, 4, 4, 3]
    assert [txid for txid, _ in totals] == [1, 2, 3, 4, 5, 6]
    assert sum(count for _, count in totals) == len(WORDS) + 9
