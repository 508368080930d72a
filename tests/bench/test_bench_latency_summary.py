"""``python -m bench.latency``'s summary: the sustainable rate holds at every lower rate too."""

from __future__ import annotations

from bench.latency import Run, sustainable, sustained_line


def run(rate: int, p99: float, exact: bool = True, kind: str = "stateless") -> Run:
    return Run("kstorm", kind, rate, float(rate), {"p50": 0.1, "p99": p99, "max": p99},
               exact, [])


def test_a_rate_that_missed_caps_the_sustainable_rate_even_if_a_higher_one_passed() -> None:
    runs = [run(20_000, 2.52), run(30_000, 1.93)]
    assert sustainable(runs, "kstorm", "stateless") is None
    line = sustained_line(runs, "kstorm", "stateless")
    assert "every lower rate tried: none" in line
    assert "missed at 20,000 ev/s (p99 2.52 s)" in line


def test_the_highest_rate_below_the_first_miss() -> None:
    runs = [run(10_000, 0.5), run(20_000, 1.2), run(30_000, 2.4), run(40_000, 1.0)]
    assert sustainable(runs, "kstorm", "stateless") == 20_000
    assert sustainable([run(20_000, 0.5, exact=False)], "kstorm", "stateless") is None
    assert "30,000 ev/s (p99 2.40 s)" in sustained_line(runs, "kstorm", "stateless")
    assert sustained_line([run(20_000, 0.5)], "kstorm", "stateless").endswith("20,000 ev/s")
