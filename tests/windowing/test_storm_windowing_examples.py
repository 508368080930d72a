"""Storm's stateful and persistent windowing examples (``examples/storm_windowing.py``).

Both run on the test driver as ported, and every value they emit is checked against Storm's
window rules computed here from the spout's seeded numbers: Storm's *Windowing* guide,
"Sliding Window: Tuples are grouped in windows and window slides every sliding interval. A
tuple can belong to more than one window", and for time windows a window with end e and
length L holds e - L < ts <= e (Storm's ``TimeEvictionPolicy``).
"""

from __future__ import annotations

import random

import pytest

from examples.storm_windowing import persistent_windowing, stateful_windowing
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
