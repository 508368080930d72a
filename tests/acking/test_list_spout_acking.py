"""At least once, ``ListSpout`` rows are tracked per tuple as ``KafkaSpout`` records are.

A failed or timed-out row is re-emitted, with its message id ``"b:i"``, per the spout's
``RetryPolicy``; an acked row never again; a subclass's ``ack``/``fail`` hear of each id;
``topology.max.spout.pending`` holds the next list batch back. The driver runs here; the
list source's planning (Spark's side, no JVM needed) is checked against a book; the same
topologies run on Spark in ``integration_tests/test_list_spout_replays.py`` and
``test_conformance.py``.
"""

from __future__ import annotations

import base64
import pickle
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from kstorm import BaseRichBolt, Fields, TopologyBuilder
from kstorm.acking import RetryPolicy
from kstorm.acking.offsets import LIST_TOPIC, list_position, spout_message_id
from kstorm.acking.replay import SpoutBook, next_batch
from kstorm.errors import ConfigError
from kstorm.testing import CaptureSink, ListSpout, TopologyTestDriver

AT_LEAST_ONCE = {"topology.guarantee": "at-least-once"}


class Work(BaseRichBolt):
    """Fails each ``x`` word's first attempt, never acks ``lost``'s first, records every
    message id it sees (class-level: the driver's instances, or a test's)."""

    seen: ClassVar[list[str]] = []
    always: ClassVar[bool] = False  # fail ``x`` words on every attempt

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any) -> None:
        word, msg_id = tuple_.values[0], tuple_.message_id
        first = msg_id not in self.seen
        self.seen.append(msg_id)
        if word.startswith("x") and (first or self.always):
            self.collector.fail(tuple_)
            return
        if word == "lost" and first:
            return  # never acked: its tree times out
        self.collector.emit([word], anchors=tuple_)
        self.collector.ack(tuple_)


class Recording(ListSpout):
    """A ListSpout whose ``ack``/``fail`` record the message ids they get."""

    acked: ClassVar[list[Any]] = []
    failed: ClassVar[list[Any]] = []

    def ack(self, msg_id: Any) -> None:
        Recording.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        Recording.failed.append(msg_id)


@pytest.fixture(autouse=True)
def _reset() -> None:
    Work.seen, Work.always, Recording.acked, Recording.failed = [], False, [], []


def _topology(spout: ListSpout, tasks: int = 2) -> Any:
    b = TopologyBuilder()
    b.set_spout("words", spout)
    b.set_bolt("work", Work(), tasks).shuffle_grouping("words")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    return b.create_topology()


BATCHES = [[("a",), ("x1",), ("b",)], [("x2",), ("c",)]]


def test_a_failed_row_is_replayed_with_its_message_id_and_an_acked_row_never_again() -> None:
    with TopologyTestDriver(_topology(ListSpout(BATCHES, Fields("word"))),
                            AT_LEAST_ONCE) as driver:
        driver.run()
        assert sorted(w for [w] in driver.output("out")) == ["a", "b", "c", "x1", "x2"]
        assert Counter(Work.seen) == {"0:0": 1, "0:1": 2, "0:2": 1, "1:0": 2, "1:1": 1}
        assert driver.counters["words.failed"] == 2
        assert driver.counters["words.replayed"] == 2
        assert driver.counters["words.acked"] == 5
        # the retry of 0:1 (delay 0) joins list batch 1, after its rows (as Spark reads
        # them: the new rows' tasks, then the retries'); 1:0's needs a batch of its own
        assert Work.seen == ["0:0", "0:1", "0:2", "1:0", "1:1", "0:1", "1:0"]
        assert driver.batch_id == 3


def test_a_subclass_hears_ack_and_fail_with_the_rows_ids() -> None:
    with TopologyTestDriver(_topology(Recording(BATCHES, Fields("word"))),
                            AT_LEAST_ONCE) as driver:
        driver.run()
    assert sorted(Recording.acked) == ["0:0", "0:1", "0:2", "1:0", "1:1"]
    assert sorted(Recording.failed) == ["0:1", "1:0"]


def test_exactly_once_list_rows_are_not_tracked_the_batch_is() -> None:
    with TopologyTestDriver(_topology(Recording(BATCHES, Fields("word")))) as driver:
        driver.run()
        assert sorted(w for [w] in driver.output("out")) == ["a", "b", "c", "x1", "x2"]
    # a failed tuple fails its batch, which runs again in place (same ids)
    assert Work.seen.count("0:1") == 2 and Work.seen.count("1:0") == 2
    assert Recording.failed == [] and Recording.acked == []


def test_a_row_never_acked_times_out_and_is_replayed() -> None:
    conf = {**AT_LEAST_ONCE, "topology.message.timeout.secs": 5}
    with TopologyTestDriver(_topology(Recording([[("a",), ("lost",)]], Fields("word"))),
                            conf) as driver:
        driver.run()
        assert sorted(w for [w] in driver.output("out")) == ["a", "lost"]
        assert driver.counters["words.timed_out"] == 1
        assert driver.counters["words.replayed"] == 1
        assert driver.now_ms == 5_000  # drain() moved the clock to the time-out
    assert Work.seen == ["0:0", "0:1", "0:1"]
    assert Recording.failed == ["0:1"] and sorted(Recording.acked) == ["0:0", "0:1"]


def test_after_its_last_retry_a_row_is_dead_lettered_with_its_values() -> None:
    Work.always = True
    spout = ListSpout([[("a",), ("x1",)]], Fields("word"),
                      retry=RetryPolicy(max_retries=2))
    with TopologyTestDriver(_topology(spout), AT_LEAST_ONCE) as driver:
        driver.run()
        assert driver.output("out") == [["a"]]
        assert driver.counters["words.failed"] == 3
        assert driver.counters["words.replayed"] == 2
        [letter] = driver.dead_letters
    assert Work.seen.count("0:1") == 3
    assert letter["error_type"] == "TupleFailed" and letter["values"] == "{'word': 'x1'}"
    assert letter["message"] == ("spout tuple '0:1' failed on its last attempt "
                                 "(3 failures, max_retries=2)")
    assert (letter["topic"], letter["partition"], letter["offset"]) == (None, None, None)


def test_max_spout_pending_holds_the_next_list_batch_back_until_its_retries_are_done() -> None:
    spout = ListSpout([[("x1",), ("x2",)], [("a",), ("b",)]], Fields("word"),
                      retry=RetryPolicy(initial_delay_ms=1_000))
    held = []

    class Watch(TopologyTestDriver):
        def run_batch(self, inputs: Any = None, **kw: Any) -> None:
            held.append((self.batch_id, self.now_ms, len(Work.seen)))
            super().run_batch(inputs, **kw)

    with Watch(_topology(spout, 1), {**AT_LEAST_ONCE, "topology.max.spout.pending": 2}) as d:
        d.run()
        assert sorted(w for [w] in d.output("out")) == ["a", "b", "x1", "x2"]
    # batch 0 fails both rows: 2 un-acked, the cap; batch 1 (at 1 s) only re-emits them
    assert Work.seen == ["0:0", "0:1", "0:0", "0:1", "1:0", "1:1"]
    assert held == [(1, 1_000, 2)]  # the one batch of retries that held list batch 1 back


def test_without_max_spout_pending_the_list_batches_do_not_wait() -> None:
    spout = ListSpout([[("x1",), ("x2",)], [("a",), ("b",)]], Fields("word"),
                      retry=RetryPolicy(initial_delay_ms=1_000))
    with TopologyTestDriver(_topology(spout, 1), AT_LEAST_ONCE) as driver:
        driver.run()
    assert Work.seen == ["0:0", "0:1", "1:0", "1:1", "0:0", "0:1"]


def test_rows_piped_by_hand_into_a_list_spout_are_tracked_too() -> None:
    with TopologyTestDriver(_topology(ListSpout([], Fields("word"))), AT_LEAST_ONCE) as d:
        d.pipe("words", [["b"], ["x9"]])
        d.drain()
        assert sorted(w for [w] in d.output("out")) == ["b", "x9"]
    assert Work.seen == ["0:0", "0:1", "0:1"]


def test_a_retry_policy_must_be_a_retry_policy() -> None:
    with pytest.raises(ConfigError, match="ListSpout retry"):
        ListSpout([], Fields("word"), retry=3)  # type: ignore[arg-type]


def test_list_rows_live_in_the_kafka_id_space() -> None:
    where = list_position("3:7")
    assert (where.topic, where.partition, where.offset) == (LIST_TOPIC, 3, 7)
    assert spout_message_id(where) == "3:7"
    record = list_position("0:1")._replace(topic="t")
    assert spout_message_id(record) == record  # a Kafka record keeps its position


# -- the Spark side's planning, without Spark ----------------------------------------------


def test_next_batch_waits_for_a_due_retry_only_when_asked_to() -> None:
    book = SpoutBook(0, retries=[(LIST_TOPIC, 0, 1, 1, 1_000)], outstanding=1)
    slept: list[float] = []
    clock = iter([0, 600, 1_000])
    found = next_batch(book, None, lambda cap: (0, False), waits=True,
                       clock_ms=lambda: next(clock), sleep=slept.append)
    assert found is not None and found[0] == 1_000
    assert found[1].retries == [(LIST_TOPIC, 0, 1, 1)]
    assert slept == [1.001, 0.401]  # at most 1 s between looks, then to the due time
    assert next_batch(book, None, lambda cap: (0, False), waits=False,
                      clock_ms=lambda: 0, sleep=slept.append) is None
    caps: list[int | None] = []
    next_batch(book, 1, lambda cap: (caps.append(cap) or 0, True), waits=False,
               clock_ms=lambda: 0, sleep=slept.append)
    assert caps == [0]  # max.spout.pending 1, one un-acked: no room for new tuples


def _reader(tmp_path: Path, batches: list[list[list[Any]]], max_pending: int | None = None
            ) -> Any:
    from kstorm._spark.list_source import _Reader

    schema = pa.schema([("word", pa.string()), ("__msgid", pa.string()),
                        ("__attempt", pa.int32()), ("__planned", pa.int64())])
    spec = {"batches": batches, "schema": schema, "partitions": 2, "pmax_file": None,
            "acking": {"book": str(tmp_path / "book.json"), "max_pending": max_pending}}
    return _Reader({"spec": base64.b64encode(pickle.dumps(spec)).decode()})


def test_the_list_source_plans_due_retries_and_reads_them_back(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    reader = _reader(tmp_path, [[["a"], ["x1"], ["b"]], [["c"]]])
    end = reader.latestOffset({"batch": 0}, ReadMaxRows(1))
    assert end["batch"] == 1 and end["@acking"]["retry"] == []  # no book yet
    book = SpoutBook(0, retries=[(LIST_TOPIC, 0, 1, 1, 0)], outstanding=1)
    (tmp_path / "book.json").write_text(book.to_json())
    end = reader.latestOffset(end, ReadMaxRows(1))
    assert end["batch"] == 2 and end["@acking"]["retry"] == [[LIST_TOPIC, 0, 1, 1]]
    parts = reader.partitions({"batch": 1}, end)
    rows = [row for p in parts for b in reader.read(p) for row in b.to_pylist()]
    now = end["@acking"]["now"]
    assert rows == [{"word": "c", "__msgid": "1:0", "__attempt": 0, "__planned": now},
                    {"word": "x1", "__msgid": "0:1", "__attempt": 1, "__planned": now}]
    # nothing new and the retry taken: no batch (not an available-now run: no waiting)
    (tmp_path / "book.json").write_text(SpoutBook(1).to_json())
    assert reader.latestOffset(end, ReadMaxRows(1)) == end


def test_the_list_source_holds_a_batch_back_at_max_spout_pending(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadMaxRows

    reader = _reader(tmp_path, [[["x1"]], [["a"]]], max_pending=1)
    book = SpoutBook(0, retries=[(LIST_TOPIC, 0, 0, 1, 10**15)], outstanding=1)
    (tmp_path / "book.json").write_text(book.to_json())
    start = {"batch": 1}
    assert reader.latestOffset(start, ReadMaxRows(1)) == start  # full, the retry not due
    (tmp_path / "book.json").write_text(SpoutBook(0, retries=[
        (LIST_TOPIC, 0, 0, 1, 0)], outstanding=1).to_json())
    end = reader.latestOffset(start, ReadMaxRows(1))
    assert end["batch"] == 1 and end["@acking"]["retry"] == [[LIST_TOPIC, 0, 0, 1]]


def test_the_commit_phase_tracks_list_rows_and_keeps_them_out_of_the_sinks_offsets(
        tmp_path: Path) -> None:
    import json

    from kstorm._runtime.batch import BatchOffsets
    from kstorm._runtime.checkpoint import CheckpointLayout
    from kstorm._runtime.plan import acking_plan, compile_plan
    from kstorm._runtime.reliability import SpoutReliability
    from kstorm.acking.ids import root_id_for
    from kstorm.acking.replay import marks

    topology = _topology(Recording([[("a",), ("x1",)]], Fields("word"),
                                   retry=RetryPolicy(max_retries=0)))
    acking = acking_plan(topology, compile_plan(topology), n_ackers=1, timeout_ms=1_000)
    reliability = SpoutReliability(topology, acking, CheckpointLayout(tmp_path))
    root = {i: root_id_for(0, LIST_TOPIC, 0, i, 0) for i in range(2)}
    payload = {"events": [("acked", root[0], 0, (LIST_TOPIC, 0, 0, 0)),
                          ("failed", root[1], 0, (LIST_TOPIC, 0, 1, 0))],
               "pending": [], "acked": {}, "entries": 0, "expired": 0}
    offsets = BatchOffsets.parse(0, 0, {"words": {"batch": 1, **marks(1_000, [])}},
                                 kafka_spouts=set())
    out = reliability.commit(offsets, [(0, pickle.dumps(payload))])
    assert Recording.acked == ["0:0"] and Recording.failed == ["0:1"]
    [letter] = out.dead_letters  # max_retries=0: out of retries at once
    assert letter["values"] == "{'word': 'x1'}" and letter["topic"] is None
    assert json.loads(reliability.resume_state(0, out)) == {}  # no offsets for the sinks
