"""Kafka offsets under at-least-once: the committable offset never passes an un-acked one."""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kstorm.acking import (
    KafkaMessageId,
    OffsetTracker,
    RetryPolicy,
    SpoutAction,
    SpoutDecision,
    SpoutTracker,
)
from kstorm.errors import KstormError

PARTITIONS = [("orders", 0), ("orders", 1)]
POLICY = RetryPolicy(initial_delay_ms=5, delay_period_ms=5, max_delay_ms=40, max_retries=2)
TIMEOUT_MS = 100


def test_committable_offset_is_the_lowest_unacked_one():
    offsets = OffsetTracker()
    tp = ("t", 0)
    assert offsets.committable(tp) is None
    for offset in (10, 11, 12, 14):  # 13 was compacted away
        offsets.emitted(tp, offset)
    offsets.done(tp, 11)
    offsets.done(tp, 12)
    assert offsets.committable(tp) == 10
    offsets.done(tp, 10)
    assert offsets.committable(tp) == 14
    offsets.done(tp, 14)
    assert offsets.committable(tp) == 15


def test_re_emitting_an_acked_offset_is_an_error():
    offsets = OffsetTracker()
    offsets.emitted(("t", 0), 3)
    offsets.done(("t", 0), 3)
    with pytest.raises(KstormError, match=r"offset 3 of t\[0\] was emitted again"):
        offsets.emitted(("t", 0), 3)


class OffsetMachine(RuleBasedStateMachine):
    """Random emits, acks, fails, time-outs, retries and restarts of a Kafka spout tracker."""

    @initialize(max_pending=st.integers(1, 6))
    def setup(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.tracker = SpoutTracker(max_pending=max_pending, timeout_ms=TIMEOUT_MS, retry=POLICY)
        self.now = 0
        self.next_root = 1
        self.next_offset = dict.fromkeys(PARTITIONS, 0)
        self.outstanding: set[KafkaMessageId] = set()
        self.in_flight: dict[int, KafkaMessageId] = {}  # root -> message
        self.last_committable: dict = {}

    def _emit(self, msg: KafkaMessageId) -> None:
        self.tracker.emit(msg, self.next_root, self.now)
        self.in_flight[self.next_root] = msg
        self.next_root += 1

    def _apply(self, decision: SpoutDecision | None) -> None:
        assert decision is not None
        if decision.action is not SpoutAction.RETRY:
            self.outstanding.discard(decision.msg_id)

    @precondition(lambda self: self.tracker.available() > 0)
    @rule(partition=st.sampled_from(PARTITIONS), gap=st.integers(0, 2))
    def emit_next_record(self, partition: tuple[str, int], gap: int) -> None:
        msg = KafkaMessageId(*partition, self.next_offset[partition] + gap)
        self.next_offset[partition] = msg.offset + 1
        self.outstanding.add(msg)
        self._emit(msg)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), failed=st.booleans())
    def tree_ends(self, data: st.DataObject, failed: bool) -> None:
        root = data.draw(st.sampled_from(sorted(self.in_flight)))
        del self.in_flight[root]
        self._apply(self.tracker.fail(root, self.now) if failed else self.tracker.ack(root))

    @rule(dt=st.integers(1, 60))
    def time_passes(self, dt: int) -> None:
        self.now += dt
        for decision in self.tracker.expire(self.now):
            self.in_flight = {r: m for r, m in self.in_flight.items() if m != decision.msg_id}
            self._apply(decision)
        for msg in self.tracker.due(self.now, limit=self.tracker.available()):
            assert msg in self.outstanding
            self._emit(msg)

    @rule()
    def restart_from_snapshot(self) -> None:
        self.tracker = SpoutTracker.restore(
            self.tracker.snapshot(),
            max_pending=self.max_pending,
            timeout_ms=TIMEOUT_MS,
            retry=POLICY,
        )

    @invariant()
    def commit_never_passes_an_unacked_offset(self) -> None:
        if not hasattr(self, "tracker"):
            return
        committable = self.tracker.committable_offsets()
        for tp, offset in committable.items():
            unacked = [m.offset for m in self.outstanding if m.topic_partition == tp]
            assert all(offset <= o for o in unacked)
            assert offset == (min(unacked) if unacked else self.next_offset[tp])
            assert offset >= self.last_committable.get(tp, offset)  # never moves back
        self.last_committable = committable
        assert self.tracker.pending_count == len(self.in_flight)


OffsetMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
test_lowest_unacked_offset_never_passes_an_unacked_offset = OffsetMachine.TestCase
