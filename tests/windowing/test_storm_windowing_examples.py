"""Storm's windowing examples (``examples/storm_windowing.py``).

Each runs on the test driver as ported, and every value they emit is checked against Storm's
window rules computed here from the spout's seeded numbers: Storm's *Windowing* guide,
"Sliding Window: Tuples are grouped in windows and window slides every sliding interval. A
tuple can belong to more than one window", and for time windows a window with end e and
length L holds e - L < ts <= e (Storm's ``TimeEvictionPolicy``).
"""

from __future__ import annotations

import random

import pytest

from examples.storm_windowing import (
    DAY_MS,
    persistent_windowing,
    sliding_tuple_ts,
    sliding_window,
    stateful_windowing,
)
from kstorm.testdriver import TopologyTestDriver


def _numbers(seed: int, n: int) -> list[int]:
    rand = random.Random(seed)
    return [rand.randrange(1000) for _ in range(n)]


@pytest.mark.parametrize("n", [40, 41, 3, 2])
def test_stateful_windowing_sums_every_sliding_count_window_into_its_state(n: int) -> None:
    """Count(5) sliding every Count(3): a window after each 3rd tuple, of the last 5."""
    driver = TopologyTestDriver(stateful_windowing(limit=n, seed=7, sleep_ms=0))
    driver.run()
    values = _numbers(7, n)
    expected, running = [], 0
    for end in range(3, n + 1, 3):
        running += sum(values[max(0, end - 5):end])
        expected.append([running])
    assert driver.output("printer") == expected
    assert driver.state("sumbolt") == ({"sum": running} if expected else {})


def test_persistent_windowing_averages_every_sliding_time_window_and_all_of_them() -> None:
    """10 s windows every 2 s over a tuple each 100 ms; the global average in the state."""
    n, every = 150, 100
    driver = TopologyTestDriver(persistent_windowing(seed=3, sleep_ms=0))
    values = _numbers(3, n)
    for i, value in enumerate(values):
        if i:
            driver.advance_time(every)
        driver.pipe("spout", [[value, 0, i + 1]])
    driver.advance_time(12_000)  # every window holding a tuple has closed
    times = [i * every for i in range(n)]
    expected, total, count = [], 0, 0
    for end in range(0, times[-1] + 12_001, 2_000):
        inside = [v for v, t in zip(values, times, strict=True) if end - 10_000 < t <= end]
        if inside:  # Storm's AvgBolt divides by the count: only windows with tuples fire
            total, count = total + sum(inside), count + len(inside)
            expected.append({"global": total / count, "window": sum(inside) / len(inside)})
    got = [row[0] for row in driver.output("printer")]
    assert got == expected
    assert driver.state("avgbolt") == {"avg": (total, count)}


@pytest.mark.parametrize("n", [95, 120, 7])
def test_sliding_window_sums_the_last_30_every_10_and_averages_every_3_sums(n: int) -> None:
    """``SlidingWindowTopology``: "withWindow(Count.of(30), Count.of(10))" kept by adding
    ``getNew()`` and subtracting ``getExpired()``, then "withTumblingWindow(Count.of(3))"."""
    driver = TopologyTestDriver(sliding_window(limit=n, seed=11, sleep_ms=0))
    driver.run()
    values = _numbers(11, n)
    sums = [sum(values[max(0, end - 30):end]) for end in range(10, n + 1, 10)]
    assert driver.output("slidingsum") == [[s] for s in sums]
    averages = [sum(sums[i:i + 3]) // 3 for i in range(0, len(sums) - 2, 3)]
    assert driver.output("printer") == [[a] for a in averages]


class _Clock:
    """The spout's wall clock: 100 ms a tuple, every 7th tuple from a producer 9 s behind."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        behind = 9.0 if self.calls % 7 == 0 else 0.0
        return 1_000_000 + self.calls * 0.1 - behind


def test_sliding_tuple_ts_sums_5s_windows_every_3s_and_drops_tuples_9s_behind() -> None:
    """``SlidingTupleTsTopology``: 5 s windows every 3 s of the tuples' ``ts`` with a 5 s
    lag. Storm's *Windowing* guide: "the tuple is considered late if its timestamp is less
    than the watermark" -- a tuple 9 s behind the one emitted before it is late (and, with
    no late tuple stream, dropped) even when both arrive in one micro-batch."""
    n = 200
    driver = TopologyTestDriver(sliding_tuple_ts(limit=n, seed=5, sleep_ms=0, clock=_Clock()))
    driver.run()
    values = _numbers(5, n)
    replay = _Clock()
    stamps = [int(replay() * 1000) - DAY_MS for _ in range(n)]
    kept, latest = [], None
    for value, ts in zip(values, stamps, strict=True):
        if latest is None or ts >= latest - 5_000:
            kept.append((value, ts))
        latest = ts if latest is None else max(latest, ts)
    assert len(kept) == n - n // 7  # every 7th was 9 s behind: late
    watermark = max(stamps) - 5_000
    expected = []
    first = min(ts for _, ts in kept)
    for end in range(first - first % 3_000, watermark + 1, 3_000):
        inside = [v for v, ts in kept if end - 5_000 < ts <= end]
        if inside:
            expected.append([sum(inside)])
    assert driver.output("slidingsum") == expected
