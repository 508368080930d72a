"""The standard benchmark's event generator and ground truth (no broker, no Spark)."""

from __future__ import annotations

import json
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.events import START_MS, generate
from bench.groundtruth import compare, ground_truth
from bench.profile import bucket, parse_line
from bench.standard import steady_cpu_per_batch, steady_rate

# -- generator -------------------------------------------------------------------------------


def test_same_seed_same_events_and_another_seed_differs() -> None:
    a, b, c = generate(5000, seed=7), generate(5000, seed=7), generate(5000, seed=8)
    assert a.payloads() == b.payloads()
    assert a.payloads() != c.payloads()


def test_each_key_always_goes_to_the_same_partition() -> None:
    ev = generate(20_000, keys=1000, partitions=4)
    assert set(ev.key.tolist()) <= set(range(1000))
    assert np.array_equal(ev.partition, ev.key % 4)
    per_key = {}
    for k, p in zip(ev.key_names(), ev.partition.tolist(), strict=True):
        assert per_key.setdefault(k, p) == p


def test_payloads_are_the_documented_json_records() -> None:
    ev = generate(100, seed=3)
    for raw, key, ts, value in zip(ev.payloads(), ev.key_names(), ev.ts.tolist(),
                                   ev.value.tolist(), strict=True):
        record = json.loads(raw)
        assert record == {"key": key, "ts": ts, "value": value}
        assert len(key) == 5 and key[0] == "k" and 0 <= value < 1000


def test_event_time_advances_1000_per_second_with_1pct_out_of_order_and_01pct_very_late() -> None:
    n = 200_000
    ev = generate(n, seed=42)
    behind = (START_MS + np.arange(n)) - ev.ts
    span_s = (ev.ts.max() - START_MS) / 1000
    assert 0.99 * n / 1000 < span_s < n / 1000  # about 1000 events per second of event time
    assert (behind >= 0).all()
    out_of_order = ((behind > 0) & (behind <= 3000)).mean()
    very_late = (behind > 10_000).mean()
    assert 0.008 < out_of_order < 0.012
    assert 0.0007 < very_late < 0.0013
    assert behind.max() <= 20_000


# -- ground truth on hand-made inputs ---------------------------------------------------------


def test_windows_are_end_inclusive() -> None:
    t = ground_truth([(0, 0, "a", 1, 4), (0, 1, "a", 10_000, 1), (0, 2, "a", 10_001, 2),
                      (0, 3, "a", 40_000, 0)])
    assert t.windows == {("a", 0): (2, 5), ("a", 10_000): (1, 2)}


def test_lateness_is_per_partition_in_offset_order() -> None:
    records = [
        (0, 0, "a", 20_000, 1),
        (0, 1, "a", 14_999, 10),  # 20_000 - 5_000 = 15_000 > 14_999: late
        (0, 2, "a", 15_000, 100),  # exactly at the bound: on time
        (1, 0, "a", 14_999, 1000),  # another partition has not seen 20_000: on time
        (0, 3, "z", 60_000, 0),
        (1, 1, "z", 60_000, 0),
    ]
    t = ground_truth(records)
    assert t.late == 1
    assert t.windows[("a", 10_000)] == (3, 1101)
    shuffled = records[:]
    random.Random(1).shuffle(shuffled)
    assert ground_truth(shuffled) == t  # offsets decide the order, not the input order


def test_watermark_is_min_over_partitions_and_a_window_closes_only_strictly_before_it() -> None:
    records = [(0, 0, "a", 5_000, 1), (0, 1, "a", 25_000, 1),
               (1, 0, "b", 9_000, 1), (1, 1, "b", 15_000, 1)]
    t = ground_truth(records)
    assert t.watermark == 10_000  # min(25_000, 15_000) - 5_000
    assert ("a", 0) not in t.windows  # end 10_000 is not < 10_000
    assert t.windows == {}
    later = ground_truth([*records, (1, 2, "b", 15_001, 1)])
    assert later.watermark == 10_001
    assert later.windows == {("a", 0): (1, 1), ("b", 0): (1, 1)}
    assert later.still_open == 2


def test_empty_input_emits_nothing() -> None:
    t = ground_truth([])
    assert (t.windows, t.late, t.watermark, t.still_open) == ({}, 0, None, 0)


def test_compare_names_missing_extra_and_wrong_windows() -> None:
    truth = ground_truth([(0, 0, "a", 1, 3), (0, 1, "b", 2, 4), (0, 2, "c", 50_000, 0)])
    assert compare(truth, {("a", 0): (1, 3), ("b", 0): (1, 4)}) == []
    problems = compare(truth, {("a", 0): (1, 2), ("x", 0): (1, 1)})
    assert "missing window ('b', 0)" in problems[0]
    assert any("extra window ('x', 0)" in p for p in problems)
    assert any("window ('a', 0): expected (1, 3), got (1, 2)" in p for p in problems)
    assert problems[-1] == "1 missing, 1 extra, 1 wrong of 2 expected windows"


# -- ground truth against a naive definition -------------------------------------------------

record_lists = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from("abc"), st.integers(0, 60_000),
              st.integers(-5, 5)),
    max_size=40)


def naive(rows: list[tuple[int, str, int, int]], length: int, lag: int):
    """The rules written out directly: O(n^2), one record at a time."""
    records = [(p, i, k, ts, v) for i, (p, k, ts, v) in enumerate(rows)]
    late, windows = 0, {}
    for p, i, k, ts, v in records:
        earlier = [r[3] for r in records if r[0] == p and r[1] < i]
        if earlier and ts < max(earlier) - lag:
            late += 1
            continue
        end = ts if ts % length == 0 else (ts // length + 1) * length
        c, s = windows.get((k, end - length), (0, 0))
        windows[(k, end - length)] = (c + 1, s + v)
    tops = {}
    for p, _, _, ts, _ in records:
        tops[p] = max(ts, tops.get(p, ts))
    wm = min(tops.values()) - lag if tops else None
    return {w: x for w, x in windows.items() if wm is not None and w[1] + length < wm}, late


@settings(max_examples=200, deadline=None)
@given(record_lists, st.sampled_from([1000, 10_000]), st.sampled_from([0, 5_000]))
def test_ground_truth_matches_the_naive_rules(rows, length, lag) -> None:
    records = [(p, i, k, ts, v) for i, (p, k, ts, v) in enumerate(rows)]
    t = ground_truth(reversed(records), length_ms=length, lag_ms=lag)
    assert (t.windows, t.late) == naive(rows, length, lag)


# -- measurement helpers ---------------------------------------------------------------------


def test_steady_rate_counts_events_after_the_first_commit() -> None:
    assert steady_rate([(10.0, 0, 250), (12.0, 1, 500), (14.0, 2, 1000)]) == 187.5
    assert steady_rate([(10.0, 0, 1000)]) is None


def test_steady_cpu_is_per_batch_after_the_first_commit_by_role() -> None:
    commits = [(1.0, 0, 1), (2.0, 1, 2), (3.0, 4, 5)]  # txids 0 -> 4: four batches
    cpu = [{"jvm": 5.0}, {"jvm": 5.1}, {"jvm": 5.4, "driver": 0.2}]  # a role seen late
    assert steady_cpu_per_batch(commits, cpu) == {"driver": 50.0, "jvm": 100.0, "total": 150.0}
    assert steady_cpu_per_batch(commits[:1], cpu[:1]) == {}  # one batch: nothing steady
    assert steady_cpu_per_batch(commits, cpu[:2]) == {}  # a commit without its sample


def test_profile_lines_are_bucketed_by_process_and_code() -> None:
    line = ('process 9:"python -m bench.topology --x";process 10:"java";process 11:"python -m '
            'pyspark.daemon pyspark.worker";read_range (kstorm/_kafka_fetch.py:63);'
            '_read (serdes/_json_read.py:134) 7')
    kind, frames, count = parse_line(line)
    assert (kind, count) == ("python workers", 7)
    assert bucket(kind, frames).startswith("JSON parse")
    idle = 'process 11:"python -m pyspark.daemon pyspark.worker";<module> (daemon.py:292);' \
           'manager (daemon.py:275) 3'
    assert bucket(*parse_line(idle)[:2]) == "daemon waiting for tasks"
    zygote = ('process 1:"python -m bench.topology";'
              'process 12:"python -m kstorm._spark.speedups.zygote 3 5.0";')
    forked = zygote + ('<module> (kstorm/_spark/speedups/zygote.py:500);'
                       '<module> (kstorm/_spark/speedups/daemon.py:40);'
                       'manager (daemon.py:275) 2')
    assert parse_line(forked)[0] == "python workers"  # a worker forked from the zygote
    planner = zygote + ('<module> (kstorm/_spark/speedups/zygote.py:500);'
                        'main (pyspark/sql/worker/plan_data_source_read.py:90) 4')
    assert parse_line(planner)[0] == "python helpers (Spark)"
