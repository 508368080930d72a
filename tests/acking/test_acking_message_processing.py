"""Seed 003's walk-through: two spouts, two ackers, multi-anchoring, 4-bit ids."""

from kstorm.acking import (
    AckerEvent,
    AckerLedger,
    AckerMessage,
    AnchorTracker,
    MessageId,
    Outcome,
    SpoutAction,
    SpoutTracker,
    acker_for,
    emit_root,
)

SID1, SID2 = 1, 2  # spout task ids
STID1, STID2, TID1 = 0b1010, 0b1011, 0b1100  # the seed's tuple ids


class ScriptedIds:
    """Hands out the seed's ids in order instead of random ones."""

    def __init__(self, *values: int) -> None:
        self._values = list(values)

    def next_id(self) -> int:
        return self._values.pop(0)


def test_mod_hash_sends_stid1_to_acker1_and_stid2_to_acker2():
    assert acker_for(STID1, 2) == 0  # Acker1
    assert acker_for(STID2, 2) == 1  # Acker2


def test_ack_vals_step_by_step_as_the_seed_narrates_them():
    acker1, acker2 = AckerLedger(), AckerLedger()

    # sid1 emits stid1 -> Acker1 [stid1, sid1]; sid2 emits stid2 -> Acker2.
    assert acker1.init(STID1, SID1, STID1, now_ms=0) is None
    assert acker2.init(STID2, SID2, STID2, now_ms=0) is None
    assert acker1.get(STID1).spout_task == SID1
    assert acker1.get(STID1).ack_val == 0b1010
    assert acker2.get(STID2).spout_task == SID2
    assert acker2.get(STID2).ack_val == 0b1011

    # Bolt1 emits tid1 anchored to both: [stid1, tid1] to Acker1, [stid2, tid1] to Acker2.
    assert acker1.ack(STID1, TID1, now_ms=1) is None
    assert acker2.ack(STID2, TID1, now_ms=1) is None
    assert acker1.get(STID1).ack_val == 0b0110
    assert acker2.get(STID2).ack_val == 0b0111

    # Bolt1 acks stid1 and stid2.
    assert acker1.ack(STID1, STID1, now_ms=2) is None
    assert acker2.ack(STID2, STID2, now_ms=2) is None
    assert acker1.get(STID1).ack_val == 0b1100
    assert acker2.get(STID2).ack_val == 0b1100

    # Bolt2 acks tid1: both ack vals become 0000 and the spouts are told.
    assert acker1.ack(STID1, TID1, now_ms=3) == AckerEvent(SID1, STID1, Outcome.ACKED, 3)
    assert acker2.ack(STID2, TID1, now_ms=3) == AckerEvent(SID2, STID2, Outcome.ACKED, 3)
    assert STID1 not in acker1 and STID2 not in acker2


def test_the_same_walk_through_with_the_collectors_messages():
    """Storm 2.x folds "tid1 anchored to stid1" into Bolt1's ack of stid1; same end state."""
    ackers = [AckerLedger(), AckerLedger()]
    spouts = {SID1: SpoutTracker(), SID2: SpoutTracker()}
    events: list[AckerEvent] = []

    def deliver(messages: list[AckerMessage], now_ms: int) -> None:
        for message in messages:
            event = ackers[acker_for(message.root_id, 2)].apply(message, now_ms)
            if event is not None:
                events.append(event)

    # Spouts: the seed uses the spout tuple's id as the root id, so script both.
    emit1 = emit_root(ScriptedIds(STID1, STID1), spout_task=SID1)
    emit2 = emit_root(ScriptedIds(STID2, STID2), spout_task=SID2)
    spouts[SID1].emit("sentence-1", emit1.root_id, now_ms=0)
    spouts[SID2].emit("sentence-2", emit2.root_id, now_ms=0)
    deliver([emit1.init, emit2.init], now_ms=0)
    assert ackers[0].get(STID1).ack_val == 0b1010
    assert ackers[1].get(STID2).ack_val == 0b1011

    # Bolt1: tid1 anchored to both inputs (one edge id per anchor; the seed uses tid1 twice).
    bolt1 = AnchorTracker(ScriptedIds(TID1, TID1))
    in1, in2 = bolt1.receive(emit1.message_ids[0]), bolt1.receive(emit2.message_ids[0])
    tid1 = bolt1.emit([in1, in2])
    assert tid1 == MessageId({STID1: TID1, STID2: TID1})

    ack1, ack2 = bolt1.ack(in1), bolt1.ack(in2)
    assert ack1 == [AckerMessage.ack(STID1, 0b0110)]  # stid1 XOR tid1
    assert ack2 == [AckerMessage.ack(STID2, 0b0111)]
    deliver(ack1 + ack2, now_ms=1)
    assert ackers[0].get(STID1).ack_val == 0b1100
    assert ackers[1].get(STID2).ack_val == 0b1100
    assert events == []

    # Bolt2 acks tid1: one message per acker, both trees complete.
    bolt2 = AnchorTracker(ScriptedIds())
    deliver(bolt2.ack(bolt2.receive(tid1)), now_ms=2)
    assert events == [
        AckerEvent(SID1, STID1, Outcome.ACKED, 2),
        AckerEvent(SID2, STID2, Outcome.ACKED, 2),
    ]
    assert len(ackers[0]) == len(ackers[1]) == 0

    # The acker calls ack on the originating spout task, with its message id.
    decisions = [spouts[e.spout_task].on_event(e, now_ms=2) for e in events]
    assert [(d.msg_id, d.action) for d in decisions] == [
        ("sentence-1", SpoutAction.ACK),
        ("sentence-2", SpoutAction.ACK),
    ]
    assert spouts[SID1].pending_count == spouts[SID2].pending_count == 0
