"""Anchoring + acker: trees and DAGs complete exactly when their last tuple is acked."""

import itertools
import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kstorm.acking import (
    AckerLedger,
    AckerMessage,
    AnchorTracker,
    MessageId,
    Outcome,
    TrackedTuple,
    TupleIdGenerator,
    acker_for,
    emit_root,
)
from kstorm.errors import KstormError


def test_c_acked_while_d_and_e_are_added_never_completes_early():
    """Seed 001's figure: C's ack removes C and adds D and E in one message."""
    ids = TupleIdGenerator(1)
    spout = emit_root(ids, spout_task=0)
    bolt = AnchorTracker(ids)
    a = bolt.receive(spout.message_ids[0])
    b, c = bolt.receive(bolt.emit([a])), bolt.receive(bolt.emit([a]))
    first = [spout.init, *bolt.ack(a), *bolt.ack(b)]
    d, e = bolt.receive(bolt.emit([c])), bolt.receive(bolt.emit([c]))
    ack_c = bolt.ack(c)
    assert len(ack_c) == 1  # one message: "C is done, D and E are new"
    rest = [*ack_c, *bolt.ack(d), *bolt.ack(e)]

    for order in itertools.permutations(rest):  # the acker may see them in any order
        ledger = AckerLedger()
        assert ledger.apply_all(first, now_ms=0) == []
        assert ledger.apply_all(order[:2], now_ms=1) == []  # one message still missing
        [event] = ledger.apply_all(order[2:], now_ms=2)
        assert event.outcome is Outcome.ACKED and event.root_id == spout.root_id


def test_multi_anchored_tuple_joins_both_trees_and_its_failure_fails_both():
    ids = TupleIdGenerator(2)
    s1, s2 = emit_root(ids, spout_task=1), emit_root(ids, spout_task=2)
    bolt = AnchorTracker(ids)
    t1, t2 = bolt.receive(s1.message_ids[0]), bolt.receive(s2.message_ids[0])
    joined = bolt.receive(bolt.emit([t1, t2]))
    assert set(joined.message_id.roots) == {s1.root_id, s2.root_id}

    ledger = AckerLedger()
    ledger.apply_all([s1.init, s2.init, *bolt.ack(t1), *bolt.ack(t2)], now_ms=0)
    events = ledger.apply_all(bolt.fail(joined), now_ms=5)
    assert {(e.spout_task, e.root_id, e.outcome) for e in events} == {
        (1, s1.root_id, Outcome.FAILED),
        (2, s2.root_id, Outcome.FAILED),
    }
    assert len(ledger) == 0


def test_unanchored_emits_are_not_tracked():
    ids = TupleIdGenerator(3)
    spout = emit_root(ids, spout_task=0)
    bolt = AnchorTracker(ids)
    t = bolt.receive(spout.message_ids[0])
    loose = bolt.emit()  # no anchors
    assert loose == MessageId() and not loose.is_anchored
    ledger = AckerLedger()
    ledger.apply_all([spout.init], now_ms=0)
    [event] = ledger.apply_all(bolt.ack(t), now_ms=1)  # tree done despite the loose tuple
    assert event.outcome is Outcome.ACKED
    assert bolt.fail(bolt.receive(loose)) == []  # failing it fails nothing


def test_emitting_to_several_tasks_makes_one_tracked_tuple_per_task():
    ids = TupleIdGenerator(4)
    spout = emit_root(ids, spout_task=0, n_targets=3)
    bolt = AnchorTracker(ids)
    copies = [bolt.receive(m) for m in spout.message_ids]
    ledger = AckerLedger()
    ledger.apply(spout.init, now_ms=0)
    assert ledger.apply_all(bolt.ack(copies[0]) + bolt.ack(copies[1]), now_ms=1) == []
    assert [e.outcome for e in ledger.apply_all(bolt.ack(copies[2]), now_ms=2)] == [Outcome.ACKED]


def test_acking_twice_sends_nothing_and_anchoring_to_an_acked_tuple_is_an_error():
    ids = TupleIdGenerator(5)
    spout = emit_root(ids, spout_task=0)
    bolt = AnchorTracker(ids)
    t = bolt.receive(spout.message_ids[0])
    assert len(bolt.ack(t)) == 1 and bolt.pending == 0
    assert bolt.ack(t) == [] and bolt.fail(t) == [] and bolt.pending == 0
    with pytest.raises(KstormError, match="already acked or failed"):
        bolt.emit([t])


def test_acking_disabled_means_unanchored_emits_and_no_messages():
    ids = TupleIdGenerator(6)
    spout = emit_root(ids, spout_task=0)
    bolt = AnchorTracker(ids, acking_enabled=False)
    t = bolt.receive(spout.message_ids[0])
    assert not bolt.emit([t]).is_anchored
    assert bolt.ack(t) == []


def test_a_tuple_held_across_batches_survives_a_checkpoint():
    ids = TupleIdGenerator(7)
    spout = emit_root(ids, spout_task=0)
    bolt = AnchorTracker(ids)
    t = bolt.receive(spout.message_ids[0])
    child = bolt.receive(bolt.emit([t]))
    state = t.to_state()  # an aggregating bolt keeps t un-acked until a later batch

    later = AnchorTracker(TupleIdGenerator(8))
    restored = later.adopt(TrackedTuple.from_state(state))
    ledger = AckerLedger()
    ledger.apply_all([spout.init, *later.ack(restored)], now_ms=0)
    assert [e.outcome for e in ledger.apply_all(bolt.ack(child), now_ms=1)] == [Outcome.ACKED]


def test_same_batch_partition_and_task_replays_the_same_messages():
    def run(batch_id: int) -> list:
        ids = TupleIdGenerator.for_task(batch_id, partition=0, task="split:0")
        spout = emit_root(ids, spout_task=0)
        bolt = AnchorTracker(ids)
        t = bolt.receive(spout.message_ids[0])
        children = [bolt.emit([t]) for _ in range(3)]
        return [spout.init, *children, *bolt.ack(t)]

    assert run(9) == run(9)
    assert run(9) != run(10)


class AckingMachine(RuleBasedStateMachine):
    """Random spout emits, multi-anchored bolt emits, acks, fails and delayed deliveries.

    The model knows which live tuples belong to which tree. Invariants:
    a tree is reported acked only once all its tuples are acked and none failed;
    reported failed only if one of its tuples failed; and once all its messages
    are delivered it has been reported exactly once.
    """

    @initialize(seed=st.integers(0, 2**32), n_ackers=st.integers(1, 3))
    def setup(self, seed: int, n_ackers: int) -> None:
        self.ids = TupleIdGenerator(seed)
        self.ackers = [AckerLedger() for _ in range(n_ackers)]
        self.bolt = AnchorTracker(self.ids)
        self.live: list[TrackedTuple] = []
        self.members: dict[int, set[int]] = {}  # root -> ids (python) of live tuples
        self.failed: set[int] = set()
        self.in_transit: list[AckerMessage] = []
        self.events: dict[int, list[Outcome]] = {}
        self.now = 0

    def _track(self, tup: TrackedTuple) -> None:
        self.live.append(tup)
        for root in tup.message_id.roots:
            self.members[root].add(id(tup))

    @precondition(lambda self: sum(1 for live in self.members.values() if live) < 3)
    @rule(task=st.integers(0, 3), n_targets=st.integers(1, 2))
    def spout_emit(self, task: int, n_targets: int) -> None:
        emit = emit_root(self.ids, task, n_targets)
        self.members[emit.root_id] = set()
        self.events[emit.root_id] = []
        self.in_transit.append(emit.init)
        for message_id in emit.message_ids:
            self._track(self.bolt.receive(message_id))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def bolt_emit(self, data: st.DataObject) -> None:
        anchors = data.draw(st.lists(st.sampled_from(self.live), max_size=3, unique_by=id))
        message_id = self.bolt.emit(anchors)
        expected = {root for a in anchors for root in a.message_id.roots}
        assert set(message_id.roots) == expected
        if message_id.is_anchored:
            self._track(self.bolt.receive(message_id))

    def _settle(self, data: st.DataObject, fail: bool) -> None:
        tup = self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        for root in tup.message_id.roots:
            self.members[root].discard(id(tup))
            if fail:
                self.failed.add(root)
        self.in_transit += self.bolt.fail(tup) if fail else self.bolt.ack(tup)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        self._settle(data, fail=False)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        self._settle(data, fail=True)

    @precondition(lambda self: self.in_transit)
    @rule(data=st.data(), how_many=st.integers(1, 5))
    def deliver(self, data: st.DataObject, how_many: int) -> None:
        """Deliver some in-flight messages, in an arbitrary order."""
        for _ in range(min(how_many, len(self.in_transit))):
            message = self.in_transit.pop(data.draw(st.integers(0, len(self.in_transit) - 1)))
            self.now += 1
            acker = self.ackers[acker_for(message.root_id, len(self.ackers))]
            event = acker.apply(message, self.now)
            if event is not None:
                self.events[event.root_id].append(event.outcome)

    @invariant()
    def trees_end_exactly_when_they_should(self) -> None:
        if not hasattr(self, "events"):
            return
        undelivered = {m.root_id for m in self.in_transit}
        for root, outcomes in self.events.items():
            assert len(outcomes) <= 1
            if outcomes == [Outcome.ACKED]:
                assert not self.members[root] and root not in self.failed
            if outcomes == [Outcome.FAILED]:
                assert root in self.failed
            if root not in undelivered:
                if root in self.failed:
                    assert outcomes == [Outcome.FAILED]
                elif not self.members[root]:
                    assert outcomes == [Outcome.ACKED]
                else:
                    assert outcomes == []


AckingMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_random_dags_complete_exactly_when_the_last_tuple_is_acked = AckingMachine.TestCase


def test_big_random_dag_in_shuffled_delivery_completes_only_at_the_last_message():
    rng = random.Random(11)
    ids = TupleIdGenerator(11)
    spout = emit_root(ids, spout_task=0)
    bolt = AnchorTracker(ids)
    live = [bolt.receive(spout.message_ids[0])]
    messages = [spout.init]
    for _ in range(2_000):
        anchors = rng.sample(live, k=min(len(live), rng.randint(1, 3)))
        live.append(bolt.receive(bolt.emit(anchors)))
        if rng.random() < 0.6:
            messages += bolt.ack(live.pop(rng.randrange(len(live))))
    for tup in live:
        messages += bolt.ack(tup)
    rng.shuffle(messages)
    ledger = AckerLedger()
    assert ledger.apply_all(messages[:-1], now_ms=0) == []
    assert [e.outcome for e in ledger.apply_all(messages[-1:], now_ms=1)] == [Outcome.ACKED]
