"""The runtime's reliability path without Spark: executor -> outbox -> acker -> driver."""

import pickle
import struct

from kstorm import BaseBasicBolt, BaseRichBolt, FailedException, Fields, KafkaSpout, TopologyBuilder
from kstorm._ids import ACKER_COMPONENT
from kstorm._runtime.batch import BatchOffsets
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import AckingPlan, acking_plan, compile_plan
from kstorm._runtime.reliability import SpoutReliability, book_of
from kstorm.acking import AckerMessage, AnchorTracker, Outcome, RetryPolicy
from kstorm.acking.acker import DictStore, run_acker_batch, stale_roots
from kstorm.acking.ids import TupleIdGenerator, root_id_for
from kstorm.acking.ledger import AckerEntry
from kstorm.acking.outbox import AckerOutbox
from kstorm.acking.replay import SpoutBook, committable_offsets, marks, read_marks
from kstorm.testing import CaptureSink
from kstorm.tuple import Tuple
from serdes.string import StringSerde


class ScriptedIds:
    def __init__(self, *values):
        self._values = list(values)

    def next_id(self):
        return self._values.pop(0)


# -- outbox and acker batch ---------------------------------------------------------------


def test_outbox_sends_one_combined_entry_per_root_to_its_acker():
    box = AckerOutbox(n_ackers=2)
    box.init(10, spout_task=1, init_val=0b0110, msg=("t", 0, 3, 0), now_ms=7)
    box.add(AckerMessage.ack(10, 0b0110 ^ 0b1000))  # acked, one child added
    box.add(AckerMessage.fail(11))
    payloads = box.payloads()
    assert payloads[0] == {"roots": [10], "xors": [0b1000], "tasks": [1], "failed": [False],
                           "msgs": {10: ("t", 0, 3, 0)}, "now": 7}
    assert payloads[1]["roots"] == [11] and payloads[1]["failed"] == [True]
    assert len(box) == 0  # sent


def test_seed_003_walk_through_as_two_executors_and_two_acker_tasks():
    stid1, stid2, tid1 = 0b1010, 0b1011, 0b1100
    # Executor 1 (spouts + Bolt1): roots inited with the spout tuple ids, tid1 anchored to
    # both, both acked. Executor 2 (Bolt2): tid1 acked in both trees.
    bolt1 = AnchorTracker(ScriptedIds(tid1, tid1))  # the seed uses tid1 in both trees
    first = AckerOutbox(n_ackers=2)
    first.init(stid1, 1, stid1, ("s1", 0, 0, 0), now_ms=0)
    first.init(stid2, 2, stid2, ("s2", 0, 0, 0), now_ms=0)
    a = bolt1.receive(_message_id(stid1, stid1))
    b = bolt1.receive(_message_id(stid2, stid2))
    child = bolt1.emit([a, b])
    first.extend(bolt1.ack(a) + bolt1.ack(b))
    bolt2 = AnchorTracker(ScriptedIds())
    second = AckerOutbox(n_ackers=2)
    second.extend(bolt2.ack(bolt2.receive(child)))
    acker1, acker2 = DictStore(), DictStore()
    p1, p2 = first.payloads(), second.payloads()
    assert p1[0]["xors"] == [0b1100] and p1[1]["xors"] == [0b1100]  # 1010^1100^1010 ...
    r1 = run_acker_batch([p1[0], p2[0]], acker1, report_acks={1})
    r2 = run_acker_batch([p1[1], p2[1]], acker2)
    assert [(e.outcome, e.root_id, e.spout_task) for e in r1.events] == [
        (Outcome.ACKED, stid1, 1)]
    assert r2.acked == {2: 1} and not r2.events  # counted: spout 2 asks for no callbacks
    assert not acker1 and not acker2


def test_seed_001_c_acked_while_d_and_e_are_added_across_batches():
    c_id, d_edge, e_edge = 0b0011, 0b0101, 0b1001
    store = DictStore()
    spout = AckerOutbox(1)
    spout.init(77, 0, c_id, ("t", 0, 1, 0), now_ms=10)  # the spout emits C
    first = run_acker_batch([spout.payloads()[0]], store)
    assert [p.root_id for p in first.pending] == [77] and store.get(77).ack_val == c_id
    bolt = AnchorTracker(ScriptedIds(d_edge, e_edge))
    c = bolt.receive(pickle.loads(pickle.dumps(_message_id(77, c_id))))
    d, e = bolt.emit([c]), bolt.emit([c])
    box = AckerOutbox(1)
    box.extend(bolt.ack(c))  # C leaves the tree in the message that adds D and E
    second = run_acker_batch([box.payloads()[0]], store)
    assert not second.events and store.get(77).ack_val == d_edge ^ e_edge
    leaf = AnchorTracker(ScriptedIds())
    box.extend(leaf.ack(leaf.receive(d)))
    assert not run_acker_batch([box.payloads()[0]], store).events
    box.extend(leaf.ack(leaf.receive(e)))
    third = run_acker_batch([box.payloads()[0]], store)
    assert [(ev.outcome, ev.msg) for ev in third.events] == [(Outcome.ACKED, None)]
    assert 77 not in store


def _message_id(root, tuple_id):
    from kstorm.acking import MessageId

    return MessageId({root: tuple_id})


class NoReads(DictStore):
    def get(self, root_id, default=None):
        raise AssertionError(f"root {root_id} is new: the store must not be read")


def test_a_tree_started_in_the_batch_never_reads_the_store():
    box = AckerOutbox(1)
    for root in range(1, 101):
        box.init(root, 0, root, ("t", 0, root, 0), now_ms=5)
        if root % 10:
            box.add(AckerMessage.ack(root, root))
    store = NoReads()
    result = run_acker_batch([box.payloads()[0]], store)
    assert result.acked == {0: 90} and result.added == 10 and len(store) == 10
    assert [p.msg for p in result.pending][:2] == [("t", 0, 10, 0), ("t", 0, 20, 0)]


def test_failed_trees_are_reported_with_their_message_id():
    box = AckerOutbox(1)
    box.init(5, 0, 9, ("t", 1, 4, 2), now_ms=1)
    box.add(AckerMessage.fail(5))
    result = run_acker_batch([box.payloads()[0]], DictStore())
    assert [(e.outcome, e.msg) for e in result.events] == [(Outcome.FAILED, ("t", 1, 4, 2))]


def test_stale_roots_are_those_older_than_the_timeout():
    entries = [(1, AckerEntry(0, 5, 1_000, False)), (2, AckerEntry(0, 5, 4_000, False))]
    assert list(stale_roots(entries, now_ms=31_000, timeout_ms=30_000)) == [1]


def test_entry_memory_does_not_depend_on_the_tree_size():
    """A pending tree of 10 or 10,000 tuples leaves the same one entry in the acker."""
    sizes = {}
    for n in (10, 10_000):
        box = AckerOutbox(1)
        bolt = AnchorTracker(TupleIdGenerator(n))
        box.init(-3, 0, 1, ("t", 0, 0, 0), now_ms=0)
        root = bolt.receive(_message_id(-3, 1))
        children = [bolt.receive(bolt.emit([root])) for _ in range(n)]
        box.extend(bolt.ack(root))
        for child in children[:-1]:  # the last child is never acked: the tree stays pending
            box.extend(bolt.ack(child))
        store = DictStore()
        run_acker_batch([box.payloads()[0]], store)
        assert list(store) == [-3]
        entry = store[-3]
        # what the acker's MapState stores: (int, long, long, boolean), a fixed-width row
        sizes[n] = len(struct.pack("<iqq?", entry.spout_task, entry.ack_val,
                                   entry.created_at_ms, entry.failed))
    assert sizes[10] == sizes[10_000] == 21


# -- the spout's book ---------------------------------------------------------------------


def test_book_plans_due_retries_ticks_and_caps_new_offsets():
    book = SpoutBook(4, {("t", 0): 3}, [("t", 0, 3, 1, 100), ("t", 0, 8, 2, 900)],
                     next_timeout_ms=500, outstanding=4)
    early = book.plan(now_ms=50, max_pending=None)
    assert early.retries == [] and not early.tick and early.new_cap is None
    assert not early.has_work and book.wait_ms(50) == 50
    later = book.plan(now_ms=600, max_pending=5)
    assert later.retries == [("t", 0, 3, 1)] and later.tick and later.new_cap == 1
    assert SpoutBook.from_json(book.to_json()) == book


def test_marks_round_trip_and_committable_offsets():
    end = {"t": {"0": 4}, **marks(123, [("t", 0, 1, 1)])}
    assert read_marks(end) == (123, [("t", 0, 1, 1)])
    assert read_marks({"t": {"0": 4}}) == (None, [])
    assert committable_offsets({("t", 0): 9, ("t", 1): 9}, {("t", 1): 2}) == {
        ("t", 0): 9, ("t", 1): 2}


# -- executor -----------------------------------------------------------------------------


class Split(BaseBasicBolt):
    def declare_output_fields(self, d):
        d.declare(Fields("word"))

    def execute(self, t, c):
        for w in t.get_string(0).split():
            if w == "nope":
                raise FailedException("nope")
            c.emit([w])


class Hold(BaseRichBolt):
    """Acks nothing."""

    def declare_output_fields(self, d):
        d.declare(Fields("word"))

    def execute(self, t):
        pass


def _kafka_topology(bolt):
    b = TopologyBuilder()
    b.set_spout("lines", KafkaSpout("t", value_serde=StringSerde(field="line")))
    b.set_bolt("split", bolt).shuffle_grouping("lines")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("split")
    return b.create_topology()


def _run_stage(topology, lines, acking):
    plan = compile_plan(topology)
    ex = StageExecutor(topology, plan, plan.stage_of["split"], topology_name="t", conf={},
                       batch_id=3, partition=0, acking=acking)
    fields = topology.components["lines"].streams["default"]
    tuples = []
    for offset, line in enumerate(lines):
        values = [line] + [None] * (len(fields) - 1)
        tup = Tuple(values, fields, "lines", "default", ("t", 0, offset))
        tup._ids = (0, 1_000)
        tuples.append((0, tup))
    return list(ex.process(tuples)) + list(ex.finish())


def test_executor_sends_the_batch_acker_messages_and_sinks_get_unanchored_tuples():
    topology = _kafka_topology(Split())
    acking = acking_plan(topology, compile_plan(topology), n_ackers=1, timeout_ms=30_000)
    assert acking == AckingPlan(1, {"lines": 0}, frozenset(), 30_000)
    rows = _run_stage(topology, ["a b", "nope", "c"], acking)
    assert [r.meta for r in rows if r.dest == "out"] == [None, None, None]
    (ack_row,) = [r for r in rows if r.dest == ACKER_COMPONENT]
    result = run_acker_batch([pickle.loads(ack_row.values)], DictStore())
    assert result.acked == {0: 2}  # "a b" and "c": trees complete inside the stage
    assert [(e.outcome, e.msg) for e in result.events] == [(Outcome.FAILED, ("t", 0, 1, 0))]
    assert result.events[0].root_id == root_id_for(0, "t", 0, 1, 0)


def test_an_unacked_tuple_leaves_its_tree_pending():
    topology = _kafka_topology(Hold())
    acking = acking_plan(topology, compile_plan(topology), n_ackers=1, timeout_ms=30_000)
    rows = _run_stage(topology, ["x"], acking)
    (ack_row,) = [r for r in rows if r.dest == ACKER_COMPONENT]
    result = run_acker_batch([pickle.loads(ack_row.values)], DictStore())
    assert [(p.msg, p.spout_task) for p in result.pending] == [(("t", 0, 0, 0), 0)]


def test_without_acking_the_executor_sends_nothing_to_ackers():
    topology = _kafka_topology(Split())
    assert not [r for r in _run_stage(topology, ["a b"], None) if r.dest == ACKER_COMPONENT]


# -- driver -------------------------------------------------------------------------------


class Recording(KafkaSpout):
    """A Kafka spout whose ack/fail callbacks are observable."""

    calls: list = []

    def ack(self, msg_id):
        Recording.calls.append(("ack", msg_id))

    def fail(self, msg_id):
        Recording.calls.append(("fail", msg_id))


def _events(*events, pending=(), acked=None):
    payload = {"events": list(events), "pending": list(pending), "acked": acked or {},
               "added": 0, "removed": 0, "entries": len(pending), "expired": 0}
    return [(0, pickle.dumps(payload))]


def _offsets(batch_id, sources):
    return BatchOffsets.parse(batch_id, 0, sources, kafka_spouts=set(sources))


def test_driver_acks_retries_times_out_and_dead_letters(tmp_path, monkeypatch):
    import kstorm._runtime.reliability as reliability

    monkeypatch.setattr(reliability, "_fetch_values", lambda spout, ids: {
        i: b"raw" for i in ids})
    Recording.calls = []
    b = TopologyBuilder()
    b.set_spout("lines", Recording("t", retry=RetryPolicy(initial_delay_ms=100,
                                                          max_retries=1)))
    b.set_bolt("split", Split()).shuffle_grouping("lines")
    topology = b.create_topology()
    acking = acking_plan(topology, compile_plan(topology), n_ackers=1, timeout_ms=1_000)
    assert acking.report_acks == frozenset({0})
    driver = SpoutReliability(topology, acking, CheckpointLayout(tmp_path))
    root = {o: root_id_for(0, "t", 0, o, 0) for o in range(4)}
    ends = _offsets(0, {"lines": {"t": {"0": 4}, **marks(1_000, [])}})
    out = driver.commit(ends, _events(
        ("acked", root[0], 0, ("t", 0, 0, 0)), ("failed", root[1], 0, ("t", 0, 1, 0)),
        pending=[(root[2], 0, ("t", 0, 2, 0))], acked={0: 1}))
    driver.persist(0, out)
    assert Recording.calls == [("ack", ("t", 0, 0)), ("fail", ("t", 0, 1))]
    assert out.counters["lines.acked"] == 2 and out.counters["lines.failed"] == 1
    book = SpoutBook.from_json((tmp_path / "kstorm" / "acking" / "lines.book.json").read_text())
    assert book.committable == {("t", 0): 1}  # offsets 1 (waiting) and 2 (pending) un-acked
    assert book.retries == [("t", 0, 1, 1, 1_100)] and book.next_timeout_ms == 2_000
    # batch 1 at 2,000 ms re-emits offset 1 (attempt 1), which fails again: dead letter;
    # offset 2 times out and waits for its retry.
    retry_root = root_id_for(0, "t", 0, 1, 1)
    ends = _offsets(1, {"lines": {"t": {"0": 4}, **marks(2_000, [("t", 0, 1, 1)])}})
    out = driver.commit(ends, _events(("failed", retry_root, 0, ("t", 0, 1, 1))))
    driver.persist(1, out)
    assert out.counters["lines.replayed"] == 1 and out.counters["lines.dead_lettered"] == 1
    assert out.counters["lines.timed_out"] == 1
    (dead,) = out.dead_letters
    assert (dead["topic"], dead["partition"], dead["offset"], dead["raw"]) == ("t", 0, 1, b"raw")
    assert dead["error_type"] == "TupleFailed"
    book = SpoutBook.from_json((tmp_path / "kstorm" / "acking" / "lines.book.json").read_text())
    assert book.committable == {("t", 0): 2} and book.outstanding == 1
    # a replay of batch 1 starts from the state after batch 0: the same decisions
    again = driver.commit(ends, _events(("failed", retry_root, 0, ("t", 0, 1, 1))))
    assert again.counters == out.counters
    assert book_of(1, again.trackers["lines"], again.ends["lines"]) == book


def test_list_spouts_are_tracked_and_spouts_read_only_by_aggregates_are_not():
    from kstorm.testing import ListSpout
    from kstorm.windowing import Duration
    from kstorm.windowing.aggregate import Agg, WindowedAggregate

    class Acks(ListSpout):
        def ack(self, msg_id):
            pass

    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("a",)]], Fields("line")))
    b.set_spout("acks", Acks([[("a",)]], Fields("line")))
    b.set_bolt("split", Split()).shuffle_grouping("lines").shuffle_grouping("acks")
    topology = b.create_topology()
    tracked = acking_plan(topology, compile_plan(topology), n_ackers=1, timeout_ms=1)
    assert set(tracked.spout_tasks) == {"lines", "acks"}
    # only the spout with its own ack hears of each ack
    assert tracked.report_acks == {tracked.spout_tasks["acks"]}

    b = TopologyBuilder()
    b.set_spout("lines", KafkaSpout("t", value_serde=StringSerde(field="line")))
    agg = (WindowedAggregate(key="line", n=Agg.count())
           .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("offset"))
    b.set_bolt("agg", agg).fields_grouping("lines", Fields("line"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("agg")
    topology = b.create_topology()
    assert acking_plan(topology, compile_plan(topology), n_ackers=1, timeout_ms=1) is None
