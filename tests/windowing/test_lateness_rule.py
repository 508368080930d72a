"""One lateness rule for user windowed bolts and the built-in aggregate (issue 11.7).

A tuple is late iff its timestamp is below the latest timestamp its own input stream (a
Kafka partition, in offset order) delivered before it, minus the lag -- or below the
watermark windows already fired at, which only a stream that had not delivered yet can
reach. Neither path may depend on where micro-batch boundaries fall.

The property test feeds random partitions of out-of-order timestamps, cut into random
micro-batches, through a user windowed bolt's task (``WindowedTask``, restored from its
snapshot between batches as on Spark) and compares its late tuples with the aggregate's
``late_mask`` over the same rows (the executor's rule, its per-stream clocks carried across
batches). Every partition delivers in the first batch (a partition that has not delivered
yet cannot hold the watermark back, by design: see docs/guarantees.md), and timestamps are odd so
that none sits exactly on a window end (boundaries are tested in test_window_boundaries.py).
"""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm._runtime.window_task import Collect, WindowedTask
from kstorm.tuple import Fields, Tuple
from kstorm.windowing import Duration, WindowConfig
from kstorm.windowing.aggregate import late_mask

FIELDS = Fields("id", "ts")


def _rows(draw_partitions: list[list[int]], order: list[int]) -> list[Tuple]:
    """Interleave the partitions' records (each in offset order) by ``order``."""
    cursor = [0] * len(draw_partitions)
    rows = []
    for p in (i % len(draw_partitions) for i in order):
        if cursor[p] < len(draw_partitions[p]):
            ts = draw_partitions[p][cursor[p]]
            rows.append(Tuple([f"{p}:{cursor[p]}", ts], FIELDS, "events",
                              message_id=("t", p, cursor[p])))
            cursor[p] += 1
    for p, stamps in enumerate(draw_partitions):
        for offset in range(cursor[p], len(stamps)):
            rows.append(Tuple([f"{p}:{offset}", stamps[offset]], FIELDS, "events",
                              message_id=("t", p, offset)))
    return rows


def _bolt_late(config: WindowConfig, batches: list[list[Tuple]]) -> set[str]:
    late: set[str] = set()
    snap = None
    for now, batch in enumerate(batches):
        task = WindowedTask("w", config)
        task.restore(snap)
        out = Collect()
        task.process(batch, now, out)
        late.update(t.values[0] for t in out.late_tuples)
        snap = pickle.loads(pickle.dumps(task.snapshot()))
    return late


def _aggregate_late(lag: int, batches: list[list[Tuple]]) -> set[str]:
    late: set[str] = set()
    pmax: dict[object, int] = {}
    for batch in batches:
        ts = np.array([t.values[1] for t in batch], dtype=np.int64)
        streams = np.array([f"t/{t.message_id[1]}" for t in batch], dtype=object)
        mask = late_mask(ts, streams, pmax, lag)
        late.update(t.values[0] for t, m in zip(batch, mask.tolist(), strict=True) if m)
    return late


odd_stamps = st.lists(st.integers(0, 150).map(lambda x: 2 * x + 1), min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(st.lists(odd_stamps, min_size=1, max_size=3),
       st.lists(st.integers(0, 2), max_size=80),
       st.sets(st.integers(1, 79), max_size=8),
       st.sampled_from([0, 4, 10, 30]),
       st.sampled_from([(10, 10), (20, 10)]))
def test_both_paths_agree_on_lateness_wherever_batches_are_cut(
        partitions: list[list[int]], order: list[int], cuts: set[int], lag: int,
        shape: tuple[int, int]) -> None:
    rows = _rows(partitions, order)
    # every partition delivers in the first batch
    first = max(next(i for i, t in enumerate(rows) if t.message_id[1] == p)
                for p in range(len(partitions)))
    points = sorted(c for c in cuts if first < c < len(rows))
    batches = [rows[a:b] for a, b in zip([0, *points], [*points, len(rows)], strict=True)]
    config = WindowConfig(Duration.millis(shape[0]), Duration.millis(shape[1]),
                          tumbling=shape[0] == shape[1], timestamp_field="ts",
                          lag=Duration.millis(lag))
    whole = _bolt_late(config, [rows])
    assert _bolt_late(config, batches) == whole
    assert _aggregate_late(lag, batches) == whole == _aggregate_late(lag, [rows])


def test_a_tuple_behind_its_own_partition_is_late_even_within_one_batch() -> None:
    config = WindowConfig(Duration.seconds(10), tumbling=True, timestamp_field="ts",
                          lag=Duration.seconds(2))
    rows = [Tuple(["a", 15_001], FIELDS, "events", message_id=("t", 0, 0)),
            Tuple(["c", 1_001], FIELDS, "events", message_id=("t", 1, 0)),   # its own stream
            Tuple(["b", 12_001], FIELDS, "events", message_id=("t", 0, 1))]  # 3 s behind a
    assert _bolt_late(config, [rows]) == {"b"}
    assert _bolt_late(config, [rows[:2], rows[2:]]) == {"b"}
    # a partition delivering for the first time after windows fired: below the watermark
    # is late (its windows already fired), as in the aggregate (new_stream_clock)
    assert _bolt_late(config, [rows[:1], rows[1:]]) == {"b", "c"}
