"""``kstorm.testing.TopologyTestDriver``: topologies run in-process, no Spark, no broker.

The same topologies also run on Spark in ``integration_tests/test_conformance.py`` (same
outputs); these are the driver's own contract: feeding, reading, time, failures, state.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from kstorm import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseStatefulBolt,
    BaseTransactionalBolt,
    BaseWindowedBolt,
    Fields,
    ICommitter,
    KafkaSpout,
    MemoryTransactionalSpout,
    TopologyBuilder,
    TransactionalTopologyBuilder,
)
from kstorm._runtime.sparkhash import hash_bytes, spark_task
from kstorm.errors import FailedException, KstormError, TopologyError
from kstorm.testing import CaptureSink, ListSpout, TopologyTestDriver
from kstorm.windowing import Duration
from serdes import StringSerde


class Split(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        for word in tuple_.values[0].split():
            collector.emit([word])


class Count(BaseStatefulBolt):
    calls: ClassVar[list[str]] = []
    fail_txid: ClassVar[int | None] = None  # fail the first attempt of this txid
    prepares: ClassVar[int] = 0

    def init_state(self, state: Any) -> None:
        self.state = state

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        type(self).prepares += 1
        self.collector, self.context, self.cleaned = collector, context, False

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))

    def execute(self, tuple_: Any) -> None:
        word = tuple_.values[0]
        n = self.state.get(word, 0) + 1
        self.state.put(word, n)
        if self.context.batch_id == type(self).fail_txid:
            type(self).fail_txid = None
            raise FailedException("first attempt fails midway")
        self.collector.emit([word, n], anchors=tuple_)

    def pre_prepare(self, txid: int) -> None:
        self.calls.append(f"pre_prepare {txid}")

    def pre_commit(self, txid: int) -> None:
        self.calls.append(f"pre_commit {txid}")

    def pre_rollback(self) -> None:
        self.calls.append("pre_rollback")

    def cleanup(self) -> None:
        self.cleaned = True


class FailFirst(BaseBasicBolt):
    """Downstream of the count: fails the first attempt of batch ``txid`` (after the count
    task prepared its state)."""

    txid: ClassVar[int | None] = None

    def prepare(self, conf: Any, context: Any) -> None:
        self.context = context

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        if self.context.batch_id == type(self).txid:
            type(self).txid = None
            raise FailedException("first attempt fails after the state was prepared")
        collector.emit(list(tuple_.values))


def word_count(spout: Any = None, count_tasks: int = 2) -> Any:
    b = TopologyBuilder()
    b.set_spout("sentences", spout or ListSpout([[("a b a",)]], Fields("sentence")))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), count_tasks).fields_grouping("split", Fields("word"))
    b.set_bolt("check", FailFirst()).fields_grouping("count", Fields("word"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("check")
    return b.create_topology()


@pytest.fixture(autouse=True)
def _reset() -> None:
    Count.calls, Count.fail_txid, Count.prepares, FailFirst.txid = [], None, 0, None


def test_topology_debug_logs_every_emitted_tuple_as_spark_does(caplog: Any) -> None:
    split = TopologyBuilder()
    split.set_spout("sentences", ListSpout([[("a b",)]], Fields("sentence")))
    split.set_bolt("split", Split()).shuffle_grouping("sentences")
    caplog.set_level("INFO", logger="kstorm.debug")
    with TopologyTestDriver(split.create_topology(), {"topology.debug": True}) as driver:
        driver.pipe("sentences", [["a b"]])
    shown = [r.getMessage() for r in caplog.records if r.name == "kstorm.debug"]
    assert "batch 0: split emitted on default: ['a']" in shown
    assert "batch 0: split emitted on default: ['b']" in shown
    caplog.clear()
    with TopologyTestDriver(split.create_topology()) as driver:  # off by default
        driver.pipe("sentences", [["a b"]])
    assert not [r for r in caplog.records if r.name == "kstorm.debug"]


def test_piped_batches_count_words_and_keep_state_per_task() -> None:
    # a cluster's configuration is fine: topology.workers means nothing in one process
    with TopologyTestDriver(word_count(), {"topology.workers": 4}) as driver:
        driver.pipe("sentences", [["a b a"], ["c"]])
        driver.pipe("sentences", [{"sentence": "a c"}])
        assert sorted(map(tuple, driver.output("out"))) == [
            ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("c", 2)]
        assert driver.output("split") == [["a"], ["b"], ["a"], ["c"], ["a"], ["c"]]
        merged = {**driver.state("count", 0), **driver.state("count", 1)}
        assert merged == {"a": 3, "b": 1, "c": 2}
        assert driver.counters["count.executed"] == 6
        assert Count.prepares <= 2  # once per task, not per batch
        bolt = driver.bolt("count", 0) or driver.bolt("count", 1)
    assert bolt.cleaned  # close() cleans every instance up



def test_a_new_driver_never_sees_the_state_of_one_left_unclosed() -> None:
    """A driver dropped without close() was collected and the next one, given its ``id()``,
    read its committed state: a table join joined against another test's rows (flaky)."""
    import gc

    for i in range(20):  # CPython reuses a collected object's id within a few rounds
        driver = TopologyTestDriver(word_count(count_tasks=1))
        driver.pipe("sentences", [[f"w{i} w{i}"]])
        assert driver.state("count") == {f"w{i}": 2}
        del driver  # not closed
        gc.collect()


def test_run_feeds_every_list_spout_batch_in_order() -> None:
    spout = ListSpout([[("a",)], [("a b",)], [("b",)]], Fields("sentence"))
    with TopologyTestDriver(word_count(spout)) as driver:
        driver.run()
        assert driver.batch_id == 3
        assert sorted(map(tuple, driver.output("out"))) == [("a", 1), ("a", 2), ("b", 1),
                                                            ("b", 2)]


def test_hooks_run_in_seed_000_order_and_a_failed_attempt_rolls_state_back() -> None:
    FailFirst.txid = 1
    Count.fail_txid = 2
    with TopologyTestDriver(word_count(count_tasks=1)) as driver:
        driver.pipe("sentences", [["a"]])
        driver.pipe("sentences", [["a"]])  # attempt 0 fails after prepare: rolled back
        driver.pipe("sentences", [["a"]])  # attempt 0 fails in the bolt, after put(a, 3)
        assert driver.state("count") == {"a": 3}
        assert driver.output("out") == [["a", 1], ["a", 2], ["a", 3]]
        assert driver.counters["__transactions.failed"] == 2
    assert Count.calls == ["pre_prepare 0", "pre_commit 0",
                           "pre_prepare 1", "pre_rollback", "pre_prepare 1", "pre_commit 1",
                           "pre_prepare 2", "pre_commit 2"]


class AlwaysFails(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        if tuple_.values[0] == "bad":
            raise FailedException("never")
        collector.emit([tuple_.values[0]])


def _failing(policy: str) -> tuple[Any, dict[str, Any]]:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("x",)]], Fields("word")))
    b.set_bolt("check", AlwaysFails()).shuffle_grouping("words")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("check")
    return b.create_topology(), {"kstorm.transaction.max.attempts": 3,
                                 "kstorm.transaction.failure.policy": policy}


def test_a_batch_failing_every_attempt_stops_with_the_runtimes_error() -> None:
    topology, conf = _failing("fail")
    with TopologyTestDriver(topology, conf) as driver:
        driver.pipe("words", [["ok"]])
        with pytest.raises(KstormError, match=r"txid 1 failed in component 'check' after 3"):
            driver.pipe("words", [["fine"], ["bad"]])
        assert driver.output("out") == [["ok"]]


def test_the_dead_letter_policy_dead_letters_the_batchs_spout_tuples_and_goes_on() -> None:
    topology, conf = _failing("dead-letter")
    with TopologyTestDriver(topology, conf) as driver:
        driver.pipe("words", [["fine"], ["bad"]])
        driver.pipe("words", [["next"]])
        assert driver.output("out") == [["next"]]
        assert [(d["component"], d["error_type"], d["values"]) for d in driver.dead_letters
                ] == [("words", "TransactionFailed", "{'word': 'fine'}"),  # as on Spark
                      ("words", "TransactionFailed", "{'word': 'bad'}")]
        assert "failed 3 times" in driver.dead_letters[0]["message"]


class Raises(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        raise ValueError(f"cannot take {tuple_.values[0]}")


def test_a_bolt_raising_gives_a_dead_letter_with_the_reason() -> None:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("x",)]], Fields("word")))
    b.set_bolt("raises", Raises()).shuffle_grouping("words")
    with TopologyTestDriver(b.create_topology()) as driver:
        driver.pipe("words", [["w"]])
        [letter] = driver.dead_letters
        assert letter["component"] == "raises" and letter["error_type"] == "ValueError"
        assert letter["message"].startswith("cannot take w")


class Undeclared(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit(["x"], stream="nowhere")


def test_a_topology_error_is_raised_at_once_not_retried() -> None:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("x",)]], Fields("word")))
    b.set_bolt("bad", Undeclared()).shuffle_grouping("words")
    with TopologyTestDriver(b.create_topology()) as driver, \
            pytest.raises(TopologyError, match="undeclared stream 'nowhere'"):
        driver.pipe("words", [["w"]])


def test_bad_input_is_refused_with_what_to_fix() -> None:
    with TopologyTestDriver(word_count()) as driver:
        with pytest.raises(TopologyError, match="no spout 'lines'"):
            driver.pipe("lines", [["a"]])
        with pytest.raises(TopologyError, match="a row of 2 values"):
            driver.pipe("sentences", [["a", "b"]])
        with pytest.raises(TopologyError, match=r"no field\(s\) \['text'\]"):
            driver.pipe("sentences", [{"text": "a"}])
        with pytest.raises(KeyError, match="no component 'nope'"):
            driver.output("nope")
    with pytest.raises(TopologyError, match="closed"):
        driver.pipe("sentences", [["a"]])


class Tag(BaseRichBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.task = collector, context.task_index

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "key"))

    def execute(self, tuple_: Any) -> None:
        self.collector.emit([self.task, tuple_.get_value_by_field("key")])


def test_a_kafka_spouts_rows_get_their_metadata_and_spark_task_placement() -> None:
    spout = KafkaSpout("events", value_serde=StringSerde(field="key"))
    b = TopologyBuilder()
    b.set_spout("events", spout)
    b.set_bolt("shuffled", Tag(), 4).shuffle_grouping("events")
    b.set_bolt("keyed", Tag(), 3).fields_grouping("events", Fields("key"))
    with TopologyTestDriver(b.create_topology(), start_time_ms=5_000) as driver:
        driver.pipe("events", [{"key": k} for k in ("a", "b", "c", "d", "e")])
        shuffled = driver.output("shuffled")
        assert sorted(t for t, _ in shuffled) == [0, 0, 1, 2, 3]  # round robin over 4 tasks
        kinds = dict(zip(spout.arrow_schema().names, spout.arrow_schema().types, strict=True))
        assert sorted(map(tuple, driver.output("keyed"))) == sorted(
            (spark_task([k], [kinds["key"]], 3), k) for k in "abcde")
        piped = driver.output("events")
        assert [r[-4] for r in piped] == [0, 1, 2, 3, 4]          # offsets
        assert {r[-2] for r in piped} == {5_000}                  # kafka_timestamp: the clock
        assert {r[-6] for r in piped} == {"events"}


class Windows(BaseWindowedBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("start", "end", "words"))

    def execute(self, window: Any) -> None:
        self.collector.emit([window.get_start_timestamp(), window.get_end_timestamp(),
                             sorted(t.values[0] for t in window.get())])


def test_processing_time_windows_close_as_the_clock_advances() -> None:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("x",)]], Fields("word")))
    b.set_bolt("windows", Windows().with_tumbling_window(Duration.seconds(10))
               ).global_grouping("words")
    with TopologyTestDriver(b.create_topology(), start_time_ms=1_000) as driver:
        driver.pipe("words", [["a"], ["b"]])
        driver.advance_time(4_000)
        driver.pipe("words", [["c"]])
        assert driver.output("windows") == []
        driver.advance_time(6_000)  # 11 s: the window [0, 10 s) closes without new input
        assert driver.output("windows") == [[0, 10_000, ["a", "b", "c"]]]
        assert driver.batch_id == 3
        with pytest.raises(ValueError, match="only moves forward"):
            driver.advance_time(-1)


class Partial(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("tx", "n"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.values[0], 1])


class Sum(BaseTransactionalBolt, ICommitter):
    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.sum = collector, id, 0

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("txid", "total"))

    def execute(self, tuple_: Any) -> None:
        self.sum += tuple_.values[1]

    def finish_batch(self) -> None:
        self.collector.emit([self.id.transaction_id, self.sum])


def test_a_transactional_topology_gets_its_attempt_and_commits_in_txid_order() -> None:
    """Seed 002: "The transaction id increases by 1 for every batch emitted. So the first
    batch has id "1", the second has id "2", and so on."
    """
    spout = MemoryTransactionalSpout({0: [["a"]]}, Fields("word"), 10)
    builder = TransactionalTopologyBuilder("count", "spout", spout)
    builder.set_bolt("partial", Partial(), 2).shuffle_grouping("spout")
    builder.set_committer_bolt("sum", Sum()).global_grouping("partial")
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("sum")
    with TopologyTestDriver(builder.build_topology()) as driver:
        driver.pipe("spout", [["a"], ["b"], ["c"]])
        driver.pipe("spout", [["d"]])
        assert driver.output("out") == [[1, 3], [2, 1]]  # txids from 1 (Storm)


def test_the_spark_hash_is_xxh64() -> None:
    assert hash_bytes(b"abc", 0) == 0x44BC2CF5AD770999  # the reference XXH64 vector
    assert hash_bytes(b"Nobody inspects the spammish repetition", 0) == 0xFBCEA83C8A378BF1


class FailsOnce(BaseRichBolt):
    """At least once: fails each ``x`` value the first time it sees it (a class-level set)."""

    seen: ClassVar[set[str]] = set()

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any) -> None:
        word = tuple_.values[0]
        if word.startswith("x") and word not in self.seen:
            self.seen.add(word)
            self.collector.fail(tuple_)
            return
        self.collector.emit([word], anchors=tuple_)
        self.collector.ack(tuple_)


def _at_least_once(bolt: Any, tasks: int = 2, **conf: Any) -> tuple[Any, dict[str, Any]]:
    b = TopologyBuilder()
    b.set_spout("words", KafkaSpout("words", value_serde=StringSerde(field="word")))
    b.set_bolt("work", bolt, tasks).shuffle_grouping("words")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    return b.create_topology(), {"topology.guarantee": "at-least-once", **conf}


def test_at_least_once_a_failed_kafka_tuple_is_replayed_as_on_spark() -> None:
    FailsOnce.seen = set()
    topology, conf = _at_least_once(FailsOnce())
    with TopologyTestDriver(topology, conf) as driver:
        driver.pipe("words", [{"word": w} for w in ("a", "x1", "b", "x2")])
        assert sorted(w for [w] in driver.output("out")) == ["a", "b"]
        driver.drain()  # the retries (default policy: at once) run in the next batch
        assert sorted(w for [w] in driver.output("out")) == ["a", "b", "x1", "x2"]
        assert driver.counters["words.failed"] == 2
        assert driver.counters["words.replayed"] == 2
        assert driver.counters["words.acked"] == 4
        assert driver.batch_id == 2


class Holds(BaseRichBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any) -> None:
        if tuple_.values[0] == "lost":
            return  # never acked: its tree times out
        self.collector.emit([tuple_.values[0]], anchors=tuple_)
        self.collector.ack(tuple_)


def test_a_tree_never_acked_times_out_replays_and_dead_letters_after_its_retries() -> None:
    from kstorm.acking import RetryPolicy

    b = TopologyBuilder()
    b.set_spout("words", KafkaSpout("words", value_serde=StringSerde(field="word"),
                                    retry=RetryPolicy(max_retries=1)))
    b.set_bolt("work", Holds()).shuffle_grouping("words")
    conf = {"topology.guarantee": "at-least-once", "topology.message.timeout.secs": 5}
    with TopologyTestDriver(b.create_topology(), conf) as driver:
        driver.pipe("words", [{"word": "ok"}, {"word": "lost"}])
        driver.advance_time(4_000)
        assert driver.counters["words.timed_out"] == 0
        driver.drain()  # 5 s: times out, replayed; 10 s: times out again, out of retries
        assert driver.counters["words.timed_out"] == 2
        assert driver.counters["words.replayed"] == 1
        [letter] = driver.dead_letters
        assert letter["error_type"] == "TupleTimedOut" and letter["offset"] == 1
        assert driver.now_ms == 10_000


class Pairs(BaseRichBolt):
    """Seed 001's join: holds ``aK`` until ``bK`` comes (maybe batches later), then emits the
    pair anchored to both and acks both."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.held = collector, {}

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("pair"))

    def execute(self, tuple_: Any) -> None:
        word = tuple_.values[0]
        partner = self.held.pop(word[1:], None)
        if partner is None:
            self.held[word[1:]] = tuple_
            return
        self.collector.emit(["+".join(sorted([word, partner.values[0]]))],
                            anchors=[partner, tuple_])
        self.collector.ack(partner)
        self.collector.ack(tuple_)


def test_at_least_once_tuples_held_across_batches_are_acked_later() -> None:
    topology, conf = _at_least_once(Pairs(), 1, **{"topology.message.timeout.secs": 60})
    with TopologyTestDriver(topology, conf) as driver:
        driver.pipe("words", [{"word": "a1"}, {"word": "a2"}])
        driver.advance_time(1_000)
        driver.pipe("words", [{"word": "b2"}])
        driver.advance_time(1_000)
        driver.pipe("words", [{"word": "b1"}])
        assert sorted(p for [p] in driver.output("out")) == ["a1+b1", "a2+b2"]
        assert driver.counters["words.acked"] == 4
        assert not driver.counters["words.timed_out"] and not driver.counters["words.failed"]
        driver.drain()  # nothing pending: no batch runs
        assert driver.batch_id == 3


acked_on_emit: list[Any] = []  # what the spouts below acked, in order


class AckingKafkaSpout(KafkaSpout):
    """A KafkaSpout whose ack records its message ids (at most once: right after emit)."""

    def ack(self, msg_id: Any) -> None:
        acked_on_emit.append(msg_id)


class AckingListSpout(ListSpout):
    """A ListSpout whose ack records its message ids (at most once: right after emit)."""

    def ack(self, msg_id: Any) -> None:
        acked_on_emit.append(msg_id)


def _failing_driver(spout: Any, guarantee: str) -> TopologyTestDriver:
    """``spout`` -> a bolt failing every tuple, under ``guarantee``."""
    acked_on_emit.clear()
    b = TopologyBuilder()
    b.set_spout("events", spout)
    b.set_bolt("work", AlwaysFails()).shuffle_grouping("events")
    conf = {"topology.guarantee": guarantee, "kstorm.transaction.failure.policy": "dead-letter"}
    return TopologyTestDriver(b.create_topology(), conf)


@pytest.mark.parametrize("guarantee", ["at-most-once", "exactly-once"])
def test_at_most_once_a_kafka_spouts_ack_runs_right_after_emit(guarantee: str) -> None:
    spout = AckingKafkaSpout("events", value_serde=StringSerde(field="key"))
    with _failing_driver(spout, guarantee) as driver:
        driver.pipe("events", [{"key": k} for k in "abc"])
        expected = [("events", 0, i) for i in range(3)] if guarantee == "at-most-once" else []
        assert acked_on_emit == expected  # whatever the bolt did with them


@pytest.mark.parametrize("guarantee", ["at-most-once", "exactly-once"])
def test_at_most_once_a_list_spouts_ack_runs_right_after_emit(guarantee: str) -> None:
    spout = AckingListSpout([[("a",), ("b",)], [("c",)]], Fields("key"))
    with _failing_driver(spout, guarantee) as driver:
        driver.run()
        expected = ["0:0", "0:1", "1:0"] if guarantee == "at-most-once" else []
        assert acked_on_emit == expected  # whatever the bolt did with them


def test_list_spout_takes_field_names_and_refuses_swapped_arguments() -> None:
    assert ListSpout([[("a", 1)]], ["word", "n"]).fields == Fields("word", "n")
    with pytest.raises(TopologyError, match=r"ListSpout\(batches, fields\)") as err:
        ListSpout(Fields("word"), [])  # type: ignore[arg-type]  # arguments swapped
    assert "Fields('a', 'b')" in err.value.hint
    with pytest.raises(TopologyError, match="a list of field names"):
        ListSpout([[("a",)]], [["a"]])  # type: ignore[list-item]
    with pytest.raises(TopologyError, match="row 0 has 2 values"):
        ListSpout([[("a", 1)]], ["word"])
