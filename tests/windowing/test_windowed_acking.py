"""At least once, a windowed bolt keeps its tuples in their trees until no window needs them
(seed 004; issue 15, item 5): which tuples :meth:`WindowedTask.settle` hands back to be
acked, and when.

A tuple is done once the last window holding it fired (a tumbling window's tuples at once,
a sliding window's oldest ones) or when it never entered a window (late); a stateful or
persistent window acks on arrival instead. The Spark runtime and the test driver ack what
``settle`` returns right after the batch's windows emitted, anchored to those tuples.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from kstorm import BaseStatefulWindowedBolt, BaseWindowedBolt, Fields, KafkaSpout, TopologyBuilder
from kstorm._runtime.plan import AckingPlan, check_window_timeouts
from kstorm._runtime.window_task import Collect, WindowedTask
from kstorm.acking.anchoring import TrackedTuple
from kstorm.acking.messages import MessageId
from kstorm.errors import ConfigError
from kstorm.tuple import Tuple
from kstorm.windowing import Count, Duration, WindowConfig
from kstorm.windowing.bolt import acks_on_arrival

FIELDS = Fields("id", "ts")


def tracked(i: int, ts: int = 0) -> Tuple:
    t = Tuple([i, ts], FIELDS, "events", message_id=("t", 0, i))
    t._ids = TrackedTuple(MessageId({1000 + i: 7}))
    return t


def run(config: WindowConfig, batches: list[list[Tuple]], now: int = 0
        ) -> list[tuple[list[list[int]], list[int]]]:
    """Per batch: (the windows fired, the ids settle() hands back); state via snapshots."""
    out, snap = [], None
    for batch in batches:
        task = WindowedTask("w", config, tracked=True)
        task.restore(snap)
        collect = Collect()
        task.process(batch, now, collect)
        settled = task.settle(batch)
        for t in settled:
            t._ids.settled = True  # what the executor's ack does
        done = sorted(t.values[0] for t in settled)
        out.append(([[t.values[0] for t in w] for w in collect.windows], done))
        snap = pickle.loads(pickle.dumps(task.snapshot()))
    return out


def test_a_tumbling_count_windows_tuples_are_done_once_it_fired() -> None:
    config = WindowConfig(Count(2), tumbling=True)
    got = run(config, [[tracked(0), tracked(1), tracked(2)], [tracked(3)]])
    assert got == [([[0, 1]], [0, 1]), ([[2, 3]], [2, 3])]


def test_a_sliding_count_window_hands_back_only_what_slid_out() -> None:
    config = WindowConfig(Count(4), Count(2))
    got = run(config, [[tracked(i) for i in range(4)], [tracked(4), tracked(5)]])
    assert got[0] == ([[0, 1], [0, 1, 2, 3]], [0, 1])  # 0 and 1 are in no later window
    assert got[1] == ([[2, 3, 4, 5]], [2, 3])


def test_event_time_windows_release_on_their_next_start_and_late_tuples_at_once() -> None:
    config = WindowConfig(Duration.seconds(10), Duration.seconds(5), timestamp_field="ts")
    first = [tracked(0, 1_000), tracked(1, 6_000), tracked(2, 12_000), tracked(3, 16_000)]
    late = tracked(4, 500)
    got = run(config, [first, [late, tracked(5, 30_000)]])
    # the watermark (16 s) closed (-5, 5], (0, 10] and (5, 15]: the next starts at 10 s
    assert got[0][1] == [0, 1]
    windows, done = got[1]
    assert 4 in done                   # late: never held
    assert {2, 3} <= set(done)         # (10, 20], (15, 25], (20, 30] fired
    assert 5 not in done               # waits for its windows


def test_nothing_is_handed_back_when_nothing_is_tracked() -> None:
    task = WindowedTask("w", WindowConfig(Count(1), tumbling=True), tracked=True)
    batch = [Tuple([1, 0], FIELDS, "events")]
    task.process(batch, 0, Collect())
    assert task.settle(batch) == []
    untracked = WindowedTask("w", WindowConfig(Count(1), tumbling=True))  # exactly once
    untracked.process([tracked(1)], 0, Collect())
    assert untracked.manager.take_released() == []  # no bookkeeping at all


class Plain(BaseWindowedBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, window: Any) -> None:
        pass


class Stateful(BaseStatefulWindowedBolt):
    def init_state(self, state: Any) -> None:
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, window: Any) -> None:
        pass


def test_stateful_and_persistent_windows_ack_on_arrival() -> None:
    assert not acks_on_arrival(Plain().with_tumbling_window(Count(3)))
    assert acks_on_arrival(Stateful().with_tumbling_window(Count(3)))
    assert acks_on_arrival(Stateful().with_tumbling_window(Count(3)).with_persistence())


def _topology(bolt: Any) -> Any:
    b = TopologyBuilder()
    b.set_spout("events", KafkaSpout("t"))
    b.set_bolt("w", bolt).global_grouping("events")
    return b.create_topology()


def test_a_time_window_longer_than_the_message_timeout_is_refused() -> None:
    acking = AckingPlan(1, {"events": 0}, timeout_ms=30_000)
    long = Plain().with_window(Duration.seconds(20), Duration.seconds(10))
    with pytest.raises(ConfigError, match=r"'w'.*30000 ms.*timeout.secs is 30 s"):
        check_window_timeouts(_topology(long), acking)
    check_window_timeouts(_topology(Plain().with_tumbling_window(Duration.seconds(10))),
                          acking)
    check_window_timeouts(_topology(Plain().with_tumbling_window(Count(100_000))), acking)
    check_window_timeouts(_topology(Stateful().with_window(Duration.minutes(5))), acking)
