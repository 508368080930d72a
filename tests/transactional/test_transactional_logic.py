"""Transactional topologies (seed 002) without Spark: the builder, the spouts' emitters, the
attempt/retry decisions with a failure injected at each step, and the ordered commit stage."""

from __future__ import annotations

from typing import Any

import pytest

from kstorm import BaseBasicBolt, BaseRichBolt, Fields, KafkaSpout
from kstorm._runtime.committers import run_commit_stage
from kstorm._runtime.envelope import EMPTY, Outgoing, pack, to_arrow
from kstorm._runtime.plan import COMMIT, compile_plan
from kstorm._runtime.reconcile import Resume, numbered_from_one
from kstorm._runtime.transaction import Transactions, classify
from kstorm.config import TopologyConfig
from kstorm.errors import (
    BoltError,
    ConfigError,
    FailedException,
    SinkError,
    SourceError,
    TopologyError,
)
from kstorm.sink import BaseSink
from kstorm.transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    BatchOutputCollector,
    ICommitter,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    TransactionalTopologyBuilder,
    TransactionAttempt,
)

WORDS = {0: [["a"], ["b"], ["c"]], 1: [["d"]]}
SEEN: list[tuple[str, int, str]] = []


class Count(BaseBatchBolt):
    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.n = collector, id, 0

    def execute(self, tuple_: Any) -> None:
        self.n += tuple_.values[-1] if isinstance(tuple_.values[-1], int) else 1

    def finish_batch(self) -> None:
        SEEN.append((type(self).__name__, self.id.transaction_id, "finish"))
        self.collector.emit([self.id, self.n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "n"))


class Sum(Count, ICommitter):
    fail_txids: set[int] = set()

    def finish_batch(self) -> None:
        if self.id.transaction_id in self.fail_txids:
            raise FailedException(f"committer 'sum' fails txid {self.id.transaction_id}")
        super().finish_batch()


class After(Count):
    pass


class Last(Count):
    pass


class Store(BaseSink):
    def commit(self, batch: Any) -> None:
        pass


def global_count(spout: Any = None) -> Any:
    builder = TransactionalTopologyBuilder(
        "gc", "spout", spout or MemoryTransactionalSpout(WORDS, Fields("word"), 2))
    builder.set_bolt("partial", Count(), 3).shuffle_grouping("spout")
    builder.set_committer_bolt("sum", Sum()).global_grouping("partial")
    builder.set_bolt("after", After()).global_grouping("sum")
    builder.set_bolt("last", Last()).global_grouping("after")
    builder.set_bolt("store", Store()).shuffle_grouping("last")
    return builder.build_topology()


# -- the builder and the plan ---------------------------------------------------------------


def test_builder_keys_the_topology_by_its_id_and_knows_its_committers() -> None:
    topology = global_count()
    assert topology.transactional_id == "gc"
    assert topology.is_committer("sum") and not topology.is_committer("partial")
    plan = compile_plan(topology)
    assert plan.commit_stage is not None
    assert plan.commit_stage.bolts == ["sum", "after", "last"]  # upstream first
    assert plan.stage_of["sum"] == COMMIT and plan.stage_of["last"] == COMMIT


def test_an_icommitter_added_with_set_bolt_is_a_committer() -> None:
    builder = TransactionalTopologyBuilder("gc", "spout",
                                           MemoryTransactionalSpout(WORDS, Fields("word"), 1))
    builder.set_bolt("partial", Count()).shuffle_grouping("spout")
    builder.set_bolt("sum", Sum()).global_grouping("partial")
    assert builder.build_topology().is_committer("sum")


@pytest.mark.parametrize("bad", ["", "a/b", 3])
def test_builder_rejects_a_bad_id(bad: Any) -> None:
    with pytest.raises(TopologyError, match="transactional topology id"):
        TransactionalTopologyBuilder(bad, "spout", MemoryTransactionalSpout(WORDS, Fields("w"), 1))


def test_builder_rejects_a_spout_that_cannot_replay_a_batch() -> None:
    from kstorm.spout import BaseRichSpout

    class Free(BaseRichSpout):
        def declare_output_fields(self, declarer: Any) -> None:
            declarer.declare(Fields("x"))

    with pytest.raises(TopologyError, match="same batch for the same txid"):
        TransactionalTopologyBuilder("gc", "spout", Free())


def test_builder_takes_a_kafka_spout_as_a_partitioned_transactional_spout() -> None:
    builder = TransactionalTopologyBuilder("gc", "spout", KafkaSpout("words"))
    builder.set_bolt("partial", Count()).shuffle_grouping("spout")
    assert builder.build_topology().transactional_id == "gc"


def test_builder_rejects_acking_bolts_and_non_batch_committers() -> None:
    class Rich(BaseRichBolt):
        def execute(self, tuple_: Any) -> None:
            pass

    class Basic(BaseBasicBolt):
        def execute(self, tuple_: Any, collector: Any) -> None:
            pass

    builder = TransactionalTopologyBuilder("gc", "spout",
                                           MemoryTransactionalSpout(WORDS, Fields("w"), 1))
    with pytest.raises(TopologyError, match="no acking or anchoring") as err:
        builder.set_bolt("rich", Rich())
    assert "seed" not in str(err.value)  # a user knows Storm's guides, not the project's seeds
    with pytest.raises(TopologyError, match="a committer is a batch bolt"):
        builder.set_committer_bolt("basic", Basic())


# -- the memory spouts ----------------------------------------------------------------------


def _emit(emitter: Any, method: str, partition: int, meta: Any, tx: Any = None
          ) -> tuple[list[list[Any]], Any]:
    out: list[list[Any]] = []
    collector = BatchOutputCollector(lambda stream, values, anchors: out.append(values))
    tx = tx or TransactionAttempt(0, 1)
    returned = getattr(emitter, method)(tx, collector, partition, meta)
    return out, returned


def test_memory_spout_emits_tx_first_and_replays_the_identical_batch() -> None:
    spout = MemoryTransactionalSpout(WORDS, Fields("word"), 2)
    emitter = spout.get_emitter({}, None)  # type: ignore[arg-type]
    tx = TransactionAttempt(0, 7)
    first, meta = _emit(emitter, "emit_partition_batch_new", 0, None, tx)
    assert first == [[tx, "a"], [tx, "b"]] and meta == {"index": 0, "amount": 2}
    second, meta2 = _emit(emitter, "emit_partition_batch_new", 0, meta)
    assert [v[1:] for v in second] == [["c"]] and meta2 == {"index": 2, "amount": 1}
    again, _ = _emit(emitter, "emit_partition_batch", 0, meta, TransactionAttempt(0, 8))
    assert [v[1:] for v in again] == [["a"], ["b"]]
    done, meta3 = _emit(emitter, "emit_partition_batch_new", 0, meta2)
    assert done == [] and meta3["amount"] == 0
    assert spout.get_coordinator({}, None).number_partitions() == 2  # type: ignore[arg-type]


def test_opaque_memory_spout_replays_from_the_previous_metadata() -> None:
    data = {0: [["a"], ["b"], ["c"]]}
    spout = OpaqueMemoryTransactionalSpout(data, Fields("word"), 2)
    emitter = spout.get_emitter({}, None)  # type: ignore[arg-type]
    out, meta = _emit(emitter, "emit_partition_batch", 0, None)
    assert [v[1:] for v in out] == [["a"], ["b"]] and emitter.number_partitions() == 1
    data[0][1] = ["B"]  # the partition changed before the replay: the replay differs
    spout.data[0][1] = ["B"]
    replay, meta_again = _emit(emitter, "emit_partition_batch", 0, None)
    assert [v[1:] for v in replay] == [["a"], ["B"]] and meta_again == meta


@pytest.mark.parametrize(("data", "take", "match"), [
    ({0: [["a", "b"]]}, 1, "has a row of 2 values"),
    ({1: [["a"]]}, 1, "partitions must be 0..n-1"),
    ({0: [["a"]]}, 0, "max_per_partition must be an int >= 1"),
])
def test_memory_spout_rejects_bad_arguments(data: Any, take: int, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        MemoryTransactionalSpout(data, Fields("word"), take)


# -- attempts and the failure policy --------------------------------------------------------


@pytest.mark.parametrize(("exc", "kind"), [
    (FailedException("bolt 'b' failed the batch"), "failed"),
    (BoltError("bolt 'split' raised ValueError"), "error"),
    (SinkError("sink 'store' failed to commit txid 3"), "sink"),
    (SourceError("spout 'words': broker away"), "source"),
    (ConfigError("bad key"), "fatal"),
    (TopologyError("cycle"), "fatal"),
    (RuntimeError("something else"), "error"),
])
def test_each_failure_is_classified(exc: BaseException, kind: str) -> None:
    assert classify(exc)[0] == kind


def test_a_failure_inside_a_spark_job_is_classified_from_its_python_traceback() -> None:
    text = ("org.apache.spark.SparkException: Job aborted\n  File \"x.py\", line 3\n"
            "kstorm.errors.FailedException: bolt 'partial' fails txid 4\n\tat org.apache...")
    assert classify(Exception(text)) == ("failed", "partial",
                                         "FailedException: bolt 'partial' fails txid 4")


def test_retries_back_off_exponentially_then_the_policy_applies() -> None:
    tx = Transactions(max_attempts=4, backoff_ms=200, policy="fail", run_base=10)
    delays = [tx.decide(a, SinkError("sink 's' down")).delay_s for a in range(3)]
    assert delays == [0.2, 0.4, 0.8]
    assert tx.decide(3, SinkError("sink 's' down")).action == "fail"
    dead = Transactions(max_attempts=2, backoff_ms=1, policy="dead-letter", run_base=0)
    assert dead.decide(1, FailedException("x")).action == "dead-letter"
    assert tx.decide(0, ConfigError("bad")).action == "fail"  # no retry cures it
    assert Transactions(30, 5_000, "fail", 0).decide(20, FailedException("x")).delay_s == 10.0
    assert tx.attempt_id(0) != tx.attempt_id(1)


# -- the commit stage: committers, then the bolts after them, in order ------------------------


def _inputs(values: list[list[Any]]) -> dict[str, Any]:
    rows = [Outgoing("sum", 0, "partial", "default", pack([v]), None) for v in values]
    import pyarrow as pa

    return {"sum": pa.Table.from_batches([to_arrow(rows)])}


def _commit(topology: Any, txid: int, values: list[list[Any]]) -> Any:
    plan = compile_plan(topology)
    return run_commit_stage(topology, plan, "gc", {}, TopologyConfig(), txid,
                            TransactionAttempt(txid, 100 + txid), _inputs(values))


def test_commit_stage_finishes_the_committer_then_the_bolts_it_feeds_in_txid_order() -> None:
    SEEN.clear()
    topology = global_count()
    for txid in range(3):
        outcome = _commit(topology, txid, [[TransactionAttempt(txid, 1), 2],
                                           [TransactionAttempt(txid, 1), 3]])
        assert outcome.rows.num_rows == 1  # the last bolt's output, for the sink
        assert outcome.rows.column("__dest").to_pylist() == ["store"]
    assert SEEN == [(who, txid, "finish") for txid in range(3)
                    for who in ("Sum", "After", "Last")]


def test_a_committer_finishes_every_batch_even_an_empty_one() -> None:
    SEEN.clear()
    plan = compile_plan(global_count())
    run_commit_stage(global_count(), plan, "gc", {}, TopologyConfig(), 5,
                     TransactionAttempt(5, 1), {"sum": EMPTY})
    assert [who for who, _, _ in SEEN] == ["Sum", "After", "Last"]


def test_a_failing_committer_fails_the_transaction_before_anything_downstream() -> None:
    SEEN.clear()
    Sum.fail_txids = {1}
    try:
        topology = global_count()
        _commit(topology, 0, [[TransactionAttempt(0, 1), 1]])
        with pytest.raises(FailedException, match="fails txid 1"):
            _commit(topology, 1, [[TransactionAttempt(1, 1), 1]])
        Sum.fail_txids = set()
        _commit(topology, 1, [[TransactionAttempt(1, 2), 1]])  # the retry: a new attempt
    finally:
        Sum.fail_txids = set()
    assert SEEN == [(who, txid, "finish") for txid in (0, 1) for who in ("Sum", "After", "Last")]


# -- checks when a topology starts ----------------------------------------------------------


def test_a_transactional_sink_behind_an_opaque_spout_is_refused() -> None:
    from kstorm._spark.runner import _check_transactional

    class ModeSink(Store):
        mode = "transactional"

    builder = TransactionalTopologyBuilder(
        "gc", "spout", OpaqueMemoryTransactionalSpout(WORDS, Fields("word"), 1))
    builder.set_bolt("count", Count()).shuffle_grouping("spout")
    builder.set_bolt("store", ModeSink()).shuffle_grouping("count")
    with pytest.raises(ConfigError, match="opaque spout 'spout'"):
        _check_transactional(builder.build_topology(), TopologyConfig())


def test_a_transactional_topology_runs_exactly_once_only() -> None:
    from kstorm._spark.runner import _check_transactional

    settings = TopologyConfig.from_conf({"topology.guarantee": "at-least-once"})
    with pytest.raises(ConfigError, match="runs exactly once"):
        _check_transactional(global_count(), settings)


def test_pipelining_more_than_one_transaction_is_refused_not_ignored() -> None:
    from kstorm._spark.runner import _check_transactional

    one = TopologyConfig.from_conf({"topology.max.spout.pending": 1})
    _check_transactional(global_count(), one)
    with pytest.raises(ConfigError, match="one micro-batch"):  # exactly once, at submit
        TopologyConfig.from_conf({"topology.max.spout.pending": 3})


def test_a_transactional_bolt_is_a_batch_bolt() -> None:
    assert BaseTransactionalBolt.is_batch_bolt and getattr(Sum, "is_committer", False)


@pytest.mark.parametrize(("last_batch", "resume", "recorded", "base"), [
    (None, Resume(), False, 1),  # a new topology: "the first batch has id 1"
    (None, Resume(), True, 0),  # its checkpoint recorded base 0 (an older kstorm): kept
    (3, Resume(), False, 0),  # committed batches, no record of a base: an older checkpoint
    (None, Resume(8, "store", {"t": {0: 5}}), False, 8),  # after a sink's txid 7
    (5, Resume(txid_base=1), True, 1),  # its own recorded base
])
def test_a_new_transactional_topology_numbers_its_txids_from_one(
        last_batch: int | None, resume: Resume, recorded: bool, base: int) -> None:
    """Seed 002: "The transaction id increases by 1 for every batch emitted. So the first
    batch has id "1", the second has id "2", and so on." Existing checkpoints and sinks
    keep their numbering.
    """
    got = numbered_from_one(resume, transactional=True, last_batch=last_batch,
                            base_recorded=recorded)
    assert got.txid_base == base
    assert numbered_from_one(resume, transactional=False, last_batch=last_batch,
                             base_recorded=recorded) == resume  # plain: txid = batch id
