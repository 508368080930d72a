"""At least once, a free-form spout's tracked tuples get ``ack`` and ``fail`` (seed 001).

No Spark: the pure pieces (the emit tracker, the notice book, the spout executor's delivery)
and the whole path through ``TopologyTestDriver``, which runs the runtime's own executors.
"""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kstorm import BaseRichBolt, BaseRichSpout, Fields, TopologyBuilder
from kstorm._runtime.plan import acking_plan, compile_plan
from kstorm._runtime.spout_executor import BatchBounds, SpoutExecutor
from kstorm._runtime.spout_log import SpoutLog
from kstorm._runtime.spout_notices import NoticeBook
from kstorm.acking.acker import DictStore, run_acker_batch
from kstorm.acking.emits import (
    ACK,
    FAIL,
    ORPHAN,
    EmitMsg,
    EmitTracker,
    Notice,
    emits_batch,
)
from kstorm.acking.ids import emit_root_id
from kstorm.acking.messages import Outcome
from kstorm.acking.outbox import AckerOutbox
from kstorm.component import TopologyContext
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import CaptureSink

STREAMS = {"default": Fields("n")}


class PendingSpout(BaseRichSpout):
    """Storm's reliable spout: keeps msg id -> values until acked, re-emits on fail."""

    def __init__(self, count: int, per_call: int = 3, msg_id: Any = None) -> None:
        self.count, self.per_call, self.make_id = count, per_call, msg_id or (lambda n: n)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.next = 0
        self.pending: dict[Any, list[Any]] = {}
        self.replay: list[Any] = []
        self.acks: list[Any] = []
        self.fails: list[Any] = []

    def next_tuple(self) -> None:
        if self.replay:
            msg_id = self.replay.pop(0)
            self.collector.emit(self.pending[msg_id], message_id=msg_id)
            return
        for _ in range(self.per_call):
            if self.next >= self.count:
                return
            msg_id = self.make_id(self.next)
            self.pending[msg_id] = [self.next]
            self.collector.emit([self.next], message_id=msg_id)
            self.next += 1

    def ack(self, msg_id: Any) -> None:
        self.acks.append(msg_id)
        del self.pending[msg_id]

    def fail(self, msg_id: Any) -> None:
        self.fails.append(msg_id)
        self.replay.append(msg_id)


_SEEN: dict[str, set[Any]] = {}  # what the tasks of one bolt saw (shared by its instances)


class FailFirst(BaseRichBolt):
    """Fails each multiple of ``every`` the first time any task sees it; passes the rest on."""

    def __init__(self, every: int = 3) -> None:
        self.every = every
        self.token = f"{id(self)}"
        _SEEN[self.token] = set()

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.seen = collector, _SEEN[self.token]

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, tuple_: Any) -> None:
        n = tuple_.values[0]
        if n % self.every == 0 and n not in self.seen:
            self.seen.add(n)
            self.collector.fail(tuple_)
            return
        self.collector.emit([n], anchors=tuple_)
        self.collector.ack(tuple_)


class Swallow(BaseRichBolt):
    """Never acks nor fails the multiples of 4 the first time (their trees time out)."""

    def __init__(self) -> None:
        self.token = f"{id(self)}"
        _SEEN[self.token] = set()

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.seen = collector, _SEEN[self.token]

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, tuple_: Any) -> None:
        n = tuple_.values[0]
        if n % 4 == 0 and n not in self.seen:
            self.seen.add(n)
            return
        self.collector.emit([n], anchors=tuple_)
        self.collector.ack(tuple_)


def topology(spout: BaseRichSpout, bolt: BaseRichBolt) -> Any:
    b = TopologyBuilder()
    b.set_spout("numbers", spout)
    b.set_bolt("work", bolt, 2).shuffle_grouping("numbers")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    return b.create_topology()


AT_LEAST_ONCE = {"topology.guarantee": "at-least-once", "kstorm.spout.max.batch.tuples": 6}

# -- the pure pieces ----------------------------------------------------------------------------


def msg(n: Any, owner: str = "me") -> EmitMsg:
    return EmitMsg(pickle.dumps(n), "default", pickle.dumps([n]), owner)


def test_emit_tracker_acks_fails_and_times_out_each_tree_once() -> None:
    tracker = EmitTracker(timeout_ms=100)
    tracker.register(1, msg("a"), 0)
    tracker.register(2, msg("b"), 50)
    assert tracker.next_timeout_at() == 100
    assert tracker.ack(1) == Notice(ACK, Outcome.ACKED, msg("a"))
    assert tracker.ack(1) is None  # over already
    assert tracker.fail(9) is None  # a tree no longer pending (timed out before): ignored
    assert tracker.fail(9, msg("c")) == Notice(FAIL, Outcome.FAILED, msg("c"))  # this batch's
    assert tracker.expire(149) == []
    assert tracker.expire(150) == [Notice(FAIL, Outcome.TIMED_OUT, msg("b"))]
    again = EmitTracker.restore(tracker.snapshot(), timeout_ms=100)
    assert again.pending_count == 0 and again.next_timeout_at() is None


def test_emits_batch_settles_events_registers_pending_and_counts() -> None:
    tracker = EmitTracker(timeout_ms=1_000)
    counters: Counter[str] = Counter()
    notices = emits_batch("s", tracker, 10, [(7, 0, tuple(msg("p")))],
                          [("failed", 5, 0, tuple(msg("f"))), ("acked", 6, 0, tuple(msg("a")))],
                          counters)
    assert [(n.action, n.msg.message_id()) for n in notices] == [(FAIL, "f"), (ACK, "a")]
    assert tracker.pending_count == 1 and counters == {"s.failed": 1, "s.acked": 1}
    later = emits_batch("s", tracker, 20, [], [("acked", 7, 0, None)], counters)
    assert [(n.action, n.msg.message_id()) for n in later] == [(ACK, "p")]


def test_free_form_completions_are_counted_unless_the_spout_wants_acks() -> None:
    box = AckerOutbox(1)
    box.init(11, spout_task=0, init_val=5, msg=tuple(msg(1)), now_ms=0)
    from kstorm.acking.messages import AckerMessage

    box.add(AckerMessage.ack(11, 5))
    payload = box.payloads()[0]
    counted = run_acker_batch([payload], DictStore())
    assert counted.events == [] and counted.acked == {0: 1}
    reported = run_acker_batch([payload], DictStore(), report_acks={0})
    assert [e.outcome for e in reported.events] == [Outcome.ACKED]


def test_emit_root_ids_are_per_emit_and_stable() -> None:
    roots = {emit_root_id(0, seq, i) for seq in range(20) for i in range(50)}
    assert len(roots) == 1_000 and 0 not in roots
    assert emit_root_id(1, 0, 0) != emit_root_id(0, 0, 0)


def test_notice_book_round_trips_keyed_by_batch(tmp_path: Path) -> None:
    book = NoticeBook(tmp_path / "n")
    assert book.unread(0) == [] and book.delivered() == 0 and book.latest_timeout() is None
    book.write(3, [Notice(FAIL, Outcome.TIMED_OUT, msg({"k": (1, 2)}))], 500)
    book.write(3, [Notice(FAIL, Outcome.TIMED_OUT, msg({"k": (1, 2)}))], 500)  # a replay
    book.write(4, [], None)
    got = book.unread(0)
    assert [(b, t) for b, _, t in got] == [(3, 500), (4, None)]
    assert got[0][1][0].msg.message_id() == {"k": (1, 2)}
    book.mark_delivered(4)
    assert book.delivered() == 4 and [b for b, _, _ in book.unread(4)] == [4]
    book.mark_delivered(5)
    assert book.unread(5) == [] and book.latest_timeout() is None  # the newest file stays


# -- the spout executor ------------------------------------------------------------------------


class Ids(BaseRichSpout):
    """Emits what a test queues; records ack/fail; re-emits failed ids when ``replay``."""

    def __init__(self) -> None:
        self.queue: list[Any] = []
        self.acks: list[Any] = []
        self.fails: list[Any] = []
        self.replay = True
        self.one_per_call = False

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        while self.queue:
            n = self.queue.pop(0)
            self.collector.emit([n], message_id=None if n is None else ("id", n))
            if self.one_per_call:
                return

    def ack(self, msg_id: Any) -> None:
        self.acks.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.fails.append(msg_id)
        if self.replay:
            self.queue.append(msg_id[1])


def tracked(spout: Ids, tmp_path: Path, now: list[int] | None = None,
            instance: str = "one") -> SpoutExecutor:
    clock = now if now is not None else [0]
    return SpoutExecutor(spout, "ids", {}, TopologyContext("t", "ids", output_streams=STREAMS),
                         SpoutLog(tmp_path / "log"), BatchBounds(idle_calls=1),
                         notices=NoticeBook(tmp_path / "notices"), sleep=lambda s: None,
                         wall_ms=lambda: clock[0], instance=instance)


def notice(action: str, n: int, owner: str = "one", outcome: Outcome = Outcome.FAILED
           ) -> Notice:
    return Notice(action, Outcome.ACKED if action == ACK else outcome,
                  EmitMsg(pickle.dumps(("id", n)), "default", pickle.dumps([n]), owner))


def test_tracked_spout_is_not_acked_per_batch_and_fail_comes_before_next_tuple(
        tmp_path: Path) -> None:
    spout = Ids()
    ex = tracked(spout, tmp_path)
    spout.queue = [1, 2, None]
    assert ex.next_batch(0) == 1
    logged = list(ex.spout_log.tuples(0))
    assert [(t.message_id, t.owner) for t in logged] == [(("id", 1), "one"), (("id", 2), "one"),
                                                        (None, "")]
    assert ex.next_batch(1) == 1 and spout.acks == []  # batch 0 committed: no batch ack
    NoticeBook(tmp_path / "notices").write(0, [notice(ACK, 1), notice(FAIL, 2)], None)
    assert ex.next_batch(1) == 2
    assert spout.acks == [("id", 1)] and spout.fails == [("id", 2)]
    assert [t.values for t in ex.spout_log.tuples(1)] == [[2]]  # re-emitted in this batch
    assert NoticeBook(tmp_path / "notices").delivered() == 1
    assert ex.next_batch(2) == 2 and spout.fails == [("id", 2)]  # delivered once


def test_delivered_only_once_its_batch_is_logged_a_new_instance_gets_them_again(
        tmp_path: Path) -> None:
    spout = Ids()
    spout.replay = False  # the spout decides not to re-emit: nothing is logged
    ex = tracked(spout, tmp_path)
    spout.queue = [1]
    ex.next_batch(0)
    NoticeBook(tmp_path / "notices").write(0, [notice(FAIL, 1)], None)
    assert ex.next_batch(1) == 1 and spout.fails == [("id", 1)]
    assert NoticeBook(tmp_path / "notices").delivered() == 0
    # the process dies; a new instance cannot re-emit what the old one emitted: kstorm does
    fresh = Ids()
    again = tracked(fresh, tmp_path, instance="two")
    assert again.next_batch(1) == 2
    assert fresh.fails == []
    assert [(t.values, t.message_id, t.owner) for t in again.spout_log.tuples(1)] == [
        ([1], ("id", 1), ORPHAN)]
    assert again.reemitted == 1


def test_orphan_acks_go_to_the_new_instance_orphan_fails_are_replayed(tmp_path: Path) -> None:
    spout = Ids()
    ex = tracked(spout, tmp_path, instance="two")
    NoticeBook(tmp_path / "notices").write(0, [notice(ACK, 1, owner="one"),
                                               notice(FAIL, 2, owner=ORPHAN),
                                               notice(FAIL, 3, owner="two")], None)
    spout.queue = [9]
    assert ex.next_batch(0) == 1
    assert spout.acks == [("id", 1)] and spout.fails == [("id", 3)]
    assert [(t.values, t.owner) for t in ex.spout_log.tuples(0)] == [
        ([2], ORPHAN), ([9], "two"), ([3], "two")]


def test_an_idle_spout_ticks_once_a_pending_tree_times_out(tmp_path: Path) -> None:
    spout = Ids()
    now = [0]
    ex = tracked(spout, tmp_path, now)
    spout.queue = [1]
    ex.next_batch(0)
    NoticeBook(tmp_path / "notices").write(0, [], 30_000)
    now[0] = 29_999
    assert ex.next_batch(1) == 1
    assert ex.wait_ms() == 1  # what an available-now source sleeps before it ticks
    now[0] = 30_000
    assert ex.next_batch(1) == 2 and list(ex.spout_log.tuples(1)) == []  # an empty batch
    NoticeBook(tmp_path / "notices").write(1, [notice(FAIL, 1, outcome=Outcome.TIMED_OUT)],
                                           None)
    assert ex.next_batch(2) == 3 and spout.fails == [("id", 1)]
    now[0] = 90_000
    assert ex.next_batch(3) == 3  # nothing pending: no more ticks
    assert ex.wait_ms() is None


def test_untracked_executor_still_acks_per_committed_batch(tmp_path: Path) -> None:
    spout = Ids()
    ex = SpoutExecutor(spout, "ids", {}, TopologyContext("t", "ids", output_streams=STREAMS),
                       SpoutLog(tmp_path / "log"), BatchBounds(idle_calls=1),
                       sleep=lambda s: None)
    spout.queue = [1, None]
    ex.next_batch(0)
    ex.ack_through(1)
    assert spout.acks == [("id", 1)]
    assert [t.owner for t in ex.spout_log.tuples(0)] == ["", ""]


# -- the plan ---------------------------------------------------------------------------------


def test_free_form_spouts_are_tracked_at_least_once_unless_only_sinks_read_them() -> None:
    read = topology(PendingSpout(3), FailFirst())
    plan = acking_plan(read, compile_plan(read), n_ackers=1, timeout_ms=1_000)
    assert plan is not None and plan.spout_tasks == {"numbers": 0}
    assert plan.report_acks == {0}  # it overrides ack: every completion is reported
    b = TopologyBuilder()
    b.set_spout("numbers", PendingSpout(3))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("numbers")
    sinks_only = b.create_topology()
    assert acking_plan(sinks_only, compile_plan(sinks_only), n_ackers=1,
                       timeout_ms=1_000) is None


# -- the whole path, in the test driver ----------------------------------------------------------


def test_driver_fails_exactly_the_failed_ids_and_the_spout_replays_them() -> None:
    spout = PendingSpout(20)
    with TopologyTestDriver(topology(spout, FailFirst(3)), AT_LEAST_ONCE) as driver:
        driver.run()
        out = sorted(v[0] for v in driver.output("out"))
        instance = driver._runners["numbers"].spout
        assert out == list(range(20))
        assert sorted(instance.fails) == [0, 3, 6, 9, 12, 15, 18]
        assert sorted(instance.acks) == list(range(20)) and instance.pending == {}
        assert driver.counters["numbers.failed"] == 7
        assert driver.counters["numbers.acked"] == 20


def test_driver_message_ids_of_any_picklable_kind() -> None:
    spout = PendingSpout(8, msg_id=lambda n: ("key", n, frozenset({n})))
    with TopologyTestDriver(topology(spout, FailFirst(2)), AT_LEAST_ONCE) as driver:
        driver.run()
        instance = driver._runners["numbers"].spout
        assert sorted(v[0] for v in driver.output("out")) == list(range(8))
        assert sorted(f[1] for f in instance.fails) == [0, 2, 4, 6]
        assert instance.pending == {}


def test_driver_times_trees_out_and_the_spout_replays_them() -> None:
    spout = PendingSpout(10)
    conf = {**AT_LEAST_ONCE, "topology.message.timeout.secs": 5}
    with TopologyTestDriver(topology(spout, Swallow()), conf) as driver:
        driver.run()
        instance = driver._runners["numbers"].spout
        assert sorted(v[0] for v in driver.output("out")) == list(range(10))
        assert sorted(instance.fails) == [0, 4, 8]
        assert driver.counters["numbers.timed_out"] == 3
        assert driver.now_ms >= 5_000


@pytest.mark.parametrize(("guarantee", "fails"), [("exactly-once", []), ("at-most-once", [])])
def test_driver_without_ackers_acks_per_batch_and_never_fails(guarantee: str,
                                                              fails: list[int]) -> None:
    spout = PendingSpout(9)
    conf = {"topology.guarantee": guarantee, "kstorm.spout.max.batch.tuples": 6}
    with TopologyTestDriver(topology(spout, FailFirst(3)), conf) as driver:
        driver.run()
        instance = driver._runners["numbers"].spout
        assert instance.fails == fails and sorted(instance.acks) == list(range(9))
        # a failed tuple is not replayed without ackers (exactly once: the batch re-runs)
        got = sorted(v[0] for v in driver.output("out"))
        assert got == (list(range(9)) if guarantee == "exactly-once"
                       else [1, 2, 4, 5, 7, 8])


# -- the driver's commit phase and the Spark source's rows ---------------------------------------


def test_commit_phase_writes_each_batchs_notices_and_a_replay_writes_the_same(
        tmp_path: Path) -> None:
    from kstorm._runtime.batch import BatchOffsets
    from kstorm._runtime.checkpoint import CheckpointLayout
    from kstorm._runtime.reliability import SpoutReliability
    from kstorm.acking.replay import marks

    topo = topology(PendingSpout(3), FailFirst())
    plan = acking_plan(topo, compile_plan(topo), n_ackers=1, timeout_ms=1_000)
    assert plan is not None
    layout = CheckpointLayout(tmp_path)
    driver = SpoutReliability(topo, plan, layout)
    roots = [emit_root_id(0, 0, i) for i in range(3)]

    def events(*items: Any, pending: Any = ()) -> list[tuple[int, bytes]]:
        return [(0, pickle.dumps({"events": list(items), "pending": list(pending),
                                  "acked": {}, "entries": 0, "expired": 0}))]

    offsets = BatchOffsets.parse(0, 0, {"numbers": {"seq": 1, **marks(500, [])}},
                                 kafka_spouts=set())
    first = events(("acked", roots[0], 0, tuple(msg(0))), ("failed", roots[1], 0, tuple(msg(1))),
                   pending=[(roots[2], 0, tuple(msg(2)))])
    out = driver.commit(offsets, first)
    driver.persist(0, out)
    book = NoticeBook(layout.notices_dir("numbers"))
    ((batch, notices, timeout),) = book.unread(0)
    assert batch == 0 and timeout == 1_500  # the pending tree, emitted at the batch's 500 ms
    assert [(n.action, n.msg.message_id()) for n in notices] == [(ACK, 0), (FAIL, 1)]
    assert out.counters["numbers.failed"] == 1 and out.gauges["numbers.pending"] == 1
    again = driver.commit(offsets, first)  # a replay of batch 0: from the state before it
    driver.persist(0, again)
    assert book.unread(0) == [(0, notices, 1_500)]
    later = BatchOffsets.parse(1, 0, {"numbers": {"seq": 2, **marks(1_600, [])}},
                               kafka_spouts=set())
    driver.persist(1, driver.commit(later, events()))
    assert [(n.outcome, n.msg.message_id()) for n in book.unread(1)[0][1]] == [
        (Outcome.TIMED_OUT, 2)]
    assert not (tmp_path / "kstorm" / "acking" / "numbers.book.json").exists()  # Kafka's only


def test_source_rows_carry_root_owner_and_planned_time_only_when_tracked(
        tmp_path: Path) -> None:
    from kstorm._runtime.envelope import raw_tuples
    from kstorm._runtime.spout_log import LoggedTuple
    from kstorm._spark.spout_source import _rows
    from kstorm.acking.emits import SpoutEmit

    log = SpoutLog(tmp_path / "log")
    log.write(4, [LoggedTuple("default", [1], ("id", 1), "me"), LoggedTuple("default", [2])])
    untracked = _rows(log.table(4), 4, None, None)
    assert untracked.schema.names == ["__stream", "__vals"]
    table = _rows(log.table(4), 4, 0, 700)
    topo = topology(PendingSpout(3), FailFirst())
    got = [t for _, t in raw_tuples(table.to_batches()[0], "numbers", topo, [0, 0])]
    assert [t.values for t in got] == [[1], [2]]
    emit = got[0]._ids
    assert isinstance(emit, SpoutEmit) and got[1]._ids is None
    assert emit.root == emit_root_id(0, 4, 0) and emit.now_ms == 700
    assert emit.msg.message_id() == ("id", 1) and emit.msg.owner == "me"
    assert pickle.loads(emit.msg.values) == [1]


def test_acked_events_of_free_form_trees_leave_their_values_behind() -> None:
    box = AckerOutbox(1)
    box.init(11, spout_task=0, init_val=5, msg=tuple(msg(1)), now_ms=0)
    box.init(12, spout_task=0, init_val=6, msg=tuple(msg(2)), now_ms=0)
    from kstorm.acking.messages import AckerMessage

    box.add(AckerMessage.ack(11, 5))
    box.add(AckerMessage.fail(12))
    result = run_acker_batch([box.payloads()[0]], DictStore(), report_acks={0})
    by_root = {e.root_id: e.msg for e in result.events}
    assert by_root[11][2] == b"" and pickle.loads(by_root[12][2]) == [2]


def test_max_spout_pending_bounds_new_tuples_by_the_trees_still_pending(tmp_path: Path) -> None:
    spout = Ids()
    ex = SpoutExecutor(spout, "ids", {}, TopologyContext("t", "ids", output_streams=STREAMS),
                       SpoutLog(tmp_path / "log"), BatchBounds(idle_calls=1),
                       notices=NoticeBook(tmp_path / "notices"), sleep=lambda s: None,
                       wall_ms=lambda: 0, instance="one", max_pending=3)
    spout.one_per_call = True  # (a call that emits several may pass the bound, as in Storm)
    spout.queue = [1, 2]
    assert ex.next_batch(0) == 1
    NoticeBook(tmp_path / "notices").write(0, [], 30_000, pending=2)  # both still pending
    spout.queue = [3, 4, 5]
    assert ex.next_batch(1) == 2
    assert [t.values for t in ex.spout_log.tuples(1)] == [[3]]  # room for one more
    NoticeBook(tmp_path / "notices").write(1, [], 30_000, pending=3)
    calls_before = list(spout.queue)
    assert ex.next_batch(2) == 2 and spout.queue == calls_before  # full: next_tuple not called
    NoticeBook(tmp_path / "notices").write(2, [notice(ACK, 1), notice(ACK, 2)], 30_000,
                                           pending=1)
    assert ex.next_batch(2) == 3
    assert [t.values for t in ex.spout_log.tuples(2)] == [[4], [5]]


def test_driver_applies_max_spout_pending_to_free_form_spouts() -> None:
    spout = PendingSpout(12, per_call=6)
    conf = {**AT_LEAST_ONCE, "topology.max.spout.pending": 4}
    with TopologyTestDriver(topology(spout, FailFirst(5)), conf) as driver:
        driver.run()
        assert sorted(v[0] for v in driver.output("out")) == list(range(12))
        assert sorted(driver._runners["numbers"].spout.fails) == [0, 5, 10]


class ReplayInFail(PendingSpout):
    """Storm's reliable spout written the other common way: ``fail`` re-emits at once, and
    ``open`` emits a first tuple."""

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.pending["hello"] = [-1]
        collector.emit([-1], message_id="hello")

    def ack(self, msg_id: Any) -> None:
        self.acks.append(msg_id)
        del self.pending[msg_id]

    def fail(self, msg_id: Any) -> None:
        self.fails.append(msg_id)
        self.collector.emit(self.pending[msg_id], message_id=msg_id)


def test_tuples_a_spout_emits_in_open_or_fail_are_emitted_not_dropped() -> None:
    """Storm's *Guaranteeing message processing*: "nextTuple, ack, and fail are all called
    in a tight loop on a single thread in the spout task" -- so a spout may emit from
    ``fail`` (a replay) or ``open``; kstorm puts those tuples in the next batch."""
    spout = ReplayInFail(20)
    with TopologyTestDriver(topology(spout, FailFirst(3)), AT_LEAST_ONCE) as driver:
        driver.run()
        out = sorted(v[0] for v in driver.output("out"))
        instance = driver._runners["numbers"].spout
        assert out == list(range(-1, 20))  # every replay from fail() arrived
        assert sorted(instance.fails) == [0, 3, 6, 9, 12, 15, 18]
        assert instance.pending == {}
        assert driver.counters["numbers.acked"] == 21
