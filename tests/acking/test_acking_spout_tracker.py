"""Spout side: max pending, time-outs, retries with backoff, dead letters, callbacks."""

import pickle

import pytest

from kstorm.acking import (
    DEFAULT_MESSAGE_TIMEOUT_SECS,
    AckerEvent,
    KafkaMessageId,
    Outcome,
    RetryPolicy,
    SpoutAction,
    SpoutDecision,
    SpoutTracker,
    dispatch,
)
from kstorm.errors import ConfigError, KstormError

TIMEOUT_MS = DEFAULT_MESSAGE_TIMEOUT_SECS * 1000


class RecordingSpout:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def ack(self, msg_id: object) -> None:
        self.calls.append(("ack", msg_id))

    def fail(self, msg_id: object) -> None:
        self.calls.append(("fail", msg_id))


def test_max_spout_pending_caps_tuples_in_flight():
    tracker = SpoutTracker(max_pending=2)
    assert tracker.available() == 2
    tracker.emit("m1", root_id=1, now_ms=0)
    tracker.emit("m2", root_id=2, now_ms=0)
    assert tracker.available() == 0
    with pytest.raises(KstormError, match=r"topology\.max\.spout\.pending"):
        tracker.emit("m3", root_id=3, now_ms=0)
    assert tracker.ack(1).action is SpoutAction.ACK
    assert tracker.available() == 1
    assert SpoutTracker().available() is None


def test_tuples_time_out_after_30_seconds_by_default():
    tracker = SpoutTracker(retry=RetryPolicy(initial_delay_ms=0))
    tracker.emit("early", root_id=1, now_ms=0)
    tracker.emit("late", root_id=2, now_ms=5_000)
    assert tracker.expire(now_ms=TIMEOUT_MS - 1) == []
    assert tracker.expire(now_ms=TIMEOUT_MS) == [
        SpoutDecision("early", SpoutAction.RETRY, Outcome.TIMED_OUT, 1, TIMEOUT_MS)
    ]
    assert tracker.pending_count == 1
    # The acker's late completion of the timed-out tree is ignored, as in Storm.
    late_ack = AckerEvent(spout_task=0, root_id=1, outcome=Outcome.ACKED, elapsed_ms=31_000)
    assert tracker.on_event(late_ack, now_ms=31_000) is None


def test_explicit_fail_retries_with_backoff_then_acks():
    policy = RetryPolicy(initial_delay_ms=100, delay_period_ms=50, max_delay_ms=1_000)
    tracker = SpoutTracker(retry=policy)
    tracker.emit("m", root_id=10, now_ms=0)
    failed = AckerEvent(spout_task=0, root_id=10, outcome=Outcome.FAILED, elapsed_ms=7)
    decision = tracker.on_event(failed, now_ms=7)
    assert decision == SpoutDecision("m", SpoutAction.RETRY, Outcome.FAILED, 1, 107)
    assert tracker.waiting_count == 1 and tracker.next_retry_at() == 107
    assert tracker.due(now_ms=106) == []
    assert tracker.due(now_ms=107) == ["m"]

    tracker.emit("m", root_id=11, now_ms=107)  # replayed under a new root id
    assert tracker.fail(11, now_ms=200) == SpoutDecision(
        "m", SpoutAction.RETRY, Outcome.FAILED, 2, 300
    )  # second retry waits delay_period * 2
    assert tracker.due(now_ms=300) == ["m"]
    tracker.emit("m", root_id=12, now_ms=300)
    assert tracker.ack(12) == SpoutDecision("m", SpoutAction.ACK, Outcome.ACKED, 2)
    assert tracker.num_fails("m") == 0


def test_backoff_schedule_is_exponential_and_capped():
    policy = RetryPolicy(initial_delay_ms=100, delay_period_ms=50, max_delay_ms=1_000)
    assert [policy.delay_ms(n) for n in range(1, 8)] == [100, 100, 200, 400, 800, 1_000, 1_000]
    assert policy.delay_ms(10_000) == 1_000
    assert RetryPolicy().delay_ms(1) == 0 and RetryPolicy().allows_retry(10**9)


def test_retries_run_out_into_a_dead_letter_and_free_the_offset():
    tracker = SpoutTracker(retry=RetryPolicy(initial_delay_ms=0, max_retries=2))
    msg = KafkaMessageId("orders", 3, 41)
    actions = []
    for attempt, root in enumerate((1, 2, 3)):
        if attempt:
            assert tracker.due(now_ms=attempt * 10) == [msg]
        tracker.emit(msg, root_id=root, now_ms=attempt * 10)
        assert tracker.committable_offsets() == {("orders", 3): 41}
        actions.append(tracker.fail(root, now_ms=attempt * 10 + 5).action)
    assert actions == [SpoutAction.RETRY, SpoutAction.RETRY, SpoutAction.DEAD_LETTER]
    assert tracker.waiting_count == 0 and tracker.due(now_ms=10**6) == []
    assert tracker.committable_offsets() == {("orders", 3): 42}


def test_zero_retries_dead_letters_the_first_failure():
    tracker = SpoutTracker(retry=RetryPolicy(max_retries=0))
    tracker.emit("m", root_id=1, now_ms=0)
    assert tracker.expire(now_ms=TIMEOUT_MS) == [
        SpoutDecision("m", SpoutAction.DEAD_LETTER, Outcome.TIMED_OUT, 1)
    ]


def test_due_respects_a_limit_and_an_early_replay_cancels_the_retry():
    tracker = SpoutTracker(retry=RetryPolicy(initial_delay_ms=10, delay_period_ms=5))
    for root, msg in enumerate("abc", start=1):
        tracker.emit(msg, root_id=root, now_ms=0)
        tracker.fail(root, now_ms=root)
    assert tracker.due(now_ms=100, limit=2) == ["a", "b"]
    tracker.emit("c", root_id=9, now_ms=5)  # the spout replayed c on its own
    assert tracker.waiting_count == 0 and tracker.due(now_ms=100) == []
    tracker.fail(9, now_ms=50)  # its second failure: due at 50 + 5 * 2
    assert tracker.due(now_ms=59) == [] and tracker.due(now_ms=60) == ["c"]


def test_dispatch_calls_the_spouts_ack_and_fail():
    tracker = SpoutTracker(retry=RetryPolicy(max_retries=0))
    for root, msg in ((1, "ok"), (2, "bad")):
        tracker.emit(msg, root_id=root, now_ms=0)
    spout = RecordingSpout()
    dispatch([tracker.ack(1), tracker.fail(2, now_ms=1)], spout)
    assert spout.calls == [("ack", "ok"), ("fail", "bad")]


def test_emitting_a_message_already_in_flight_is_an_error():
    tracker = SpoutTracker()
    tracker.emit("m", root_id=1, now_ms=0)
    with pytest.raises(KstormError, match="already pending"):
        tracker.emit("m", root_id=2, now_ms=0)


def test_snapshot_restore_round_trips_through_pickle():
    policy = RetryPolicy(initial_delay_ms=10)
    tracker = SpoutTracker(max_pending=10, retry=policy)
    for offset in range(5):
        tracker.emit(KafkaMessageId("t", 0, offset), root_id=100 + offset, now_ms=offset)
    tracker.ack(100)
    tracker.fail(101, now_ms=6)
    data = pickle.loads(pickle.dumps(tracker.snapshot()))

    restored = SpoutTracker.restore(data, max_pending=10, retry=policy)
    assert restored.snapshot() == tracker.snapshot()
    assert restored.committable_offsets() == {("t", 0): 1}
    assert restored.pending_count == 3 and restored.available() == 7
    assert restored.due(now_ms=16) == [KafkaMessageId("t", 0, 1)]
    assert [d.msg_id.offset for d in restored.expire(now_ms=4 + TIMEOUT_MS)] == [2, 3, 4]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_pending": 0}, r"topology\.max\.spout\.pending"),
        ({"timeout_ms": 0}, r"topology\.message\.timeout\.secs"),
    ],
)
def test_bad_settings_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SpoutTracker(**kwargs)


def test_bad_retry_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ConfigError, match="initial_delay_ms"):
        RetryPolicy(initial_delay_ms=-5)
