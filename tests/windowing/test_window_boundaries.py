"""Window boundaries (issue 11.9): Storm's end-inclusive default and the start-inclusive option.

Storm puts a tuple exactly at a window's end into the window ending there
(``end - length < ts <= end``); Spark, Flink and Kafka Streams put it into the window starting
there (``start <= ts < end``). Both the user windowed bolts' ``WindowManager`` and the
built-in aggregate's ``window_ends`` follow the configured rule, and agree with each other.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm.errors import ConfigError
from kstorm.windowing import Duration, WindowConfig
from kstorm.windowing.aggregate import Agg, WindowedAggregate, window_ends
from kstorm.windowing.manager import WindowManager


def _windows(boundaries: str, stamps: list[int], length: int, slide: int
             ) -> dict[int, list[int]]:
    """Window end -> the timestamps in it, from a WindowManager (event time, watermarks)."""
    config = WindowConfig(Duration.millis(length), Duration.millis(slide),
                          tumbling=length == slide, timestamp_field="ts",
                          boundaries=boundaries)
    manager = WindowManager(config)
    for ts in sorted(stamps):
        manager.add(ts, ts)
    fired = manager.on_watermark(max(stamps) + 10 * length)
    return {w.get_end_timestamp(): sorted(w.get()) for w in fired}


def _aggregate(boundaries: str, stamps: list[int], length: int, slide: int
               ) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    ts = np.array(sorted(stamps), dtype=np.int64)
    for idx, ends in window_ends(ts, length, slide, boundaries == "start-inclusive"):
        for i, end in zip(idx.tolist(), ends.tolist(), strict=True):
            out.setdefault(end, []).append(int(ts[i]))
    return {end: sorted(v) for end, v in out.items()}


def test_a_tuple_on_a_boundary_goes_to_the_window_ending_there_by_default() -> None:
    stamps = [5_000, 10_000, 15_000]
    assert _windows("end-inclusive", stamps, 10_000, 10_000) == {
        10_000: [5_000, 10_000], 20_000: [15_000]}
    assert _aggregate("end-inclusive", stamps, 10_000, 10_000) == {
        10_000: [5_000, 10_000], 20_000: [15_000]}


def test_start_inclusive_puts_it_into_the_window_starting_there() -> None:
    stamps = [5_000, 10_000, 15_000]
    assert _windows("start-inclusive", stamps, 10_000, 10_000) == {
        10_000: [5_000], 20_000: [10_000, 15_000]}
    assert _aggregate("start-inclusive", stamps, 10_000, 10_000) == {
        10_000: [5_000], 20_000: [10_000, 15_000]}


def test_sliding_windows_follow_the_same_rule() -> None:
    assert _aggregate("end-inclusive", [10], 20, 10) == {10: [10], 20: [10]}
    assert _aggregate("start-inclusive", [10], 20, 10) == {20: [10], 30: [10]}
    assert _windows("start-inclusive", [10], 20, 10) == {20: [10], 30: [10]}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["end-inclusive", "start-inclusive"]),
       st.lists(st.integers(0, 200), min_size=1, max_size=40),
       st.sampled_from([(10, 10), (20, 10), (30, 10), (10, 5)]))
def test_the_bolt_and_the_aggregate_agree_on_every_window(boundaries: str, stamps: list[int],
                                                          shape: tuple[int, int]) -> None:
    length, slide = shape
    assert _windows(boundaries, stamps, length, slide) == \
        _aggregate(boundaries, stamps, length, slide)


def test_declared_on_the_builders() -> None:
    agg = (WindowedAggregate(key="k", n=Agg.count()).with_tumbling_window(Duration.seconds(10))
           .with_timestamp_field("ts").with_window_boundaries("start-inclusive"))
    assert agg.spec().start_inclusive
    assert not (WindowedAggregate(key="k", n=Agg.count())
                .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
                .spec().start_inclusive)


def test_an_unknown_rule_is_an_error() -> None:
    with pytest.raises(ConfigError, match="window boundaries must be one of"):
        WindowConfig(Duration.seconds(1), boundaries="both")
