"""Session windows of the built-in ``WindowedAggregate`` (issue #45 item 1).

The property test feeds random keys, random gaps between events, random out-of-order
timestamps within the lag, over random partitions cut into random micro-batches, through

- the aggregate's two halves as both runtimes drive them (``late_mask`` and ``partials`` per
  batch, ``merge``, ``AggregateWindows.advance`` restored from its snapshot between
  batches),
- a session windowed bolt's task (``WindowedTask``, restored between batches as on Spark),
- a brute-force reference: the non-late events of each key sorted, cut where neighbours are
  more than ``gap`` apart (and greedily at ``first + max_duration``), the sessions whose end
  the final watermark passed,

and checks all three give the same sessions and aggregates. Every partition delivers in the
first batch (as in test_lateness_rule.py: a stream that starts later is treated differently
by design, see docs/windowing.md).
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm import BaseWindowedBolt, TopologyBuilder
from kstorm._kafka.clocks import clock_of, read_clocks
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.window_task import Collect, WindowedTask
from kstorm._spark.windowed import WindowCommit
from kstorm.errors import ConfigError
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import CaptureSink, ListSpout
from kstorm.tuple import Fields, Tuple
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import (
    Agg,
    AggregateWindows,
    WindowedAggregate,
    late_mask,
    merge,
    partials,
)
from kstorm.windowing.session_aggregate import key_starts, running_max

FIELDS = Fields("id", "key", "ts", "value")
AGGS = {"n": Agg.count(), "total": Agg.sum("value"), "low": Agg.min("value"),
        "high": Agg.max("value"), "kinds": Agg.count_distinct("value")}


def _aggregate(gap: int, top: int | None, lag: int) -> WindowedAggregate:
    return (WindowedAggregate(key="key", **AGGS)
            .with_session_window(Duration.millis(gap),
                                 None if top is None else Duration.millis(top))
            .with_timestamp_field("ts").with_lag(Duration.millis(lag)))


def _values(key: str, start: int, end: int, values: list[int]) -> tuple[Any, ...]:
    return (key, start, end, len(values), sum(values), min(values), max(values),
            len(set(values)))


def _run_aggregate(agg: WindowedAggregate, batches: list[list[Tuple]]) -> list[tuple[Any, ...]]:
    spec = agg.spec()
    out: list[tuple[Any, ...]] = []
    snap = None
    for batch in batches:
        windows = AggregateWindows(spec)
        if snap is not None:
            windows.restore(snap)
        clocks = dict(windows.latest)
        streams = np.array([f"t/{t.message_id[1]}" for t in batch], dtype=object)
        latest = {s: clocks.get(s, windows.new_stream_clock()) for s in set(streams.tolist())}
        latest = {s: c for s, c in latest.items() if c is not None}
        table = pa.table({f: [t.values[i] for t in batch] for i, f in enumerate(FIELDS)})
        ts = table.column("ts").to_numpy()
        late = late_mask(ts, streams, latest, spec.lag_ms)
        kept = table.filter(pa.array(~late))
        # two executor pieces per batch, merged as a read task merges its record batches
        half = kept.num_rows // 2
        parts = [partials(p, spec) for p in (kept.slice(0, half), kept.slice(half))
                 if p.num_rows]
        merged = [merge(parts, spec)] if parts else []
        out += [tuple(r) for r in windows.results(windows.advance(merged, latest,
                                                                   int(late.sum())))]
        snap = windows.snapshot()
    return out


def _run_bolt(agg: WindowedAggregate, batches: list[list[Tuple]]) -> list[tuple[Any, ...]]:
    config = dataclasses.replace(agg.window_config, session_key_fields=("key",))
    out: list[tuple[Any, ...]] = []
    snap = None
    for now, batch in enumerate(batches):
        task = WindowedTask("w", config)
        task.restore(snap)
        got = Collect()
        task.process(batch, now, got)
        for tuples, (start, end) in zip(got.windows, got.bounds, strict=True):
            out.append(_values(tuples[0].values[1], start, end,  # type: ignore[arg-type]
                               [t.values[3] for t in tuples]))
        snap = pickle.loads(pickle.dumps(task.snapshot()))
    return out


def _reference(events: list[Tuple], gap: int, top: int | None, lag: int
               ) -> list[tuple[Any, ...]]:
    """Sessions from the sorted non-late events per key, closed by the final watermark."""
    latest: dict[int, int] = {}
    on_time: dict[str, list[tuple[int, int]]] = {}
    for t in events:  # arrival order within each partition decides lateness
        p, ts = t.message_id[1], t.values[2]
        if p in latest and ts < latest[p] - lag:
            continue
        latest[p] = max(ts, latest.get(p, ts))
        on_time.setdefault(t.values[1], []).append((ts, t.values[3]))
    watermark = min(latest.values()) - lag
    sessions = []
    for key, rows in on_time.items():
        rows.sort()
        chunk: list[tuple[int, int]] = []
        for ts, v in [*rows, (None, None)]:
            if chunk and (ts is None or ts - chunk[-1][0] > gap
                          or (top is not None and ts > chunk[0][0] + top)):
                first, last = chunk[0][0], chunk[-1][0]
                end = last + gap if top is None else min(last + gap, first + top)
                if end < watermark:
                    sessions.append(_values(key, first, end, [c[1] for c in chunk]))
                chunk = []
            if ts is not None:
                chunk.append((ts, v))
    return sessions


def _events(partitions: list[list[tuple[str, int, int]]], order: list[int]) -> list[Tuple]:
    cursor = [0] * len(partitions)
    rows = []
    for p in [i % len(partitions) for i in order] + [
            p for p, evs in enumerate(partitions) for _ in evs]:
        if cursor[p] < len(partitions[p]):
            key, ts, value = partitions[p][cursor[p]]
            rows.append(Tuple([f"{p}:{cursor[p]}", key, ts, value], FIELDS, "events",
                              message_id=("t", p, cursor[p])))
            cursor[p] += 1
    return rows


def _cut(rows: list[Tuple], cuts: set[int], n_parts: int) -> list[list[Tuple]]:
    # the first batch holds every partition's first event (see the module docstring)
    firsts = {p: next(i for i, t in enumerate(rows) if t.message_id[1] == p)
              for p in range(n_parts)}
    start = max(firsts.values()) + 1
    bounds = [0, *sorted(c for c in cuts if start <= c < len(rows)), len(rows)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


@st.composite
def _partition(draw: Any, lag: int) -> list[tuple[str, int, int]]:
    """A partition's events: a clock moving by random gaps, each event up to lag behind."""
    n = draw(st.integers(1, 20))
    steps = draw(st.lists(st.sampled_from([0, 1, 3, 5, 10, 20, 40]), min_size=n, max_size=n))
    behind = draw(st.lists(st.integers(0, lag + 6), min_size=n, max_size=n))
    keys = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    clock = np.cumsum(steps)
    return [(k, 2 * int(c - b) + 1, v) for k, c, b, v in  # odd: no tie with a session end
            zip(keys, clock, behind, values, strict=True)]


@st.composite
def _scenario(draw: Any) -> tuple[Any, ...]:
    lag = draw(st.sampled_from([0, 4, 12]))
    gap = draw(st.sampled_from([2, 6, 15, 30]))
    top = draw(st.sampled_from([None, None, 10, 25, 60]))
    partitions = draw(st.lists(_partition(lag), min_size=1, max_size=3))
    order = draw(st.lists(st.integers(0, 2), max_size=60))
    cuts = draw(st.sets(st.integers(1, 59), max_size=8))
    return lag, gap, top, partitions, order, cuts


@settings(max_examples=300, deadline=None)
@given(_scenario())
def test_aggregate_sessions_equal_the_reference_and_the_session_bolt(scenario: Any) -> None:
    lag, gap, top, partitions, order, cuts = scenario
    events = _events(partitions, order)
    batches = _cut(events, cuts, len(partitions))
    agg = _aggregate(gap, top, lag)
    expected = sorted(_reference(events, gap, top, lag))
    assert sorted(_run_aggregate(agg, batches)) == expected
    assert sorted(_run_bolt(agg, batches)) == expected


def test_a_tuple_bridging_two_sessions_merges_them() -> None:
    agg = _aggregate(10, None, 20)
    rows = [["1", "a", 0, 1], ["2", "a", 20, 2], ["3", "z", 29, 0], ["4", "a", 10, 3],
            ["5", "z", 100, 0]]
    batches = [[Tuple(r, FIELDS, "events", message_id=("t", 0, i))
                for i, r in enumerate(rows[:3])],
               [Tuple(r, FIELDS, "events", message_id=("t", 0, 3 + i))
                for i, r in enumerate(rows[3:])]]
    got = _run_aggregate(agg, batches)
    assert ("a", 0, 30, 3, 6, 1, 3, 3) in got  # not (0, 10) and (20, 30): one session


def test_max_duration_cuts_a_session_and_the_end_is_the_earlier_bound() -> None:
    agg = _aggregate(10, 15, 0)
    rows = [["1", "a", 0, 1], ["2", "a", 8, 1], ["3", "a", 16, 1], ["4", "a", 100, 0]]
    batch = [Tuple(r, FIELDS, "events", message_id=("t", 0, i)) for i, r in enumerate(rows)]
    got = _run_aggregate(agg, [batch])
    # 16 > 0 + 15: the next session; the first ends at min(8 + 10, 0 + 15)
    assert got[:2] == [("a", 0, 15, 2, 2, 1, 1, 1), ("a", 16, 26, 1, 1, 1, 1, 1)]


def test_sessions_declare_session_start_and_end() -> None:
    from kstorm.component import OutputFieldsDeclarer

    declarer = OutputFieldsDeclarer("agg")
    _aggregate(10, None, 0).declare_output_fields(declarer)
    assert list(declarer.streams["default"]) == ["key", "session_start", "session_end",
                                                  *AGGS]


def test_results_table_has_the_session_bounds() -> None:
    agg = (WindowedAggregate(key="key", n=Agg.count(), total=Agg.sum("value"))
           .with_session_window(Duration.millis(10)).with_timestamp_field("ts"))
    spec = agg.spec()
    windows = AggregateWindows(spec)
    table = pa.table({"key": ["a", "a", "b"], "ts": [0, 5, 50], "value": [1, 2, 3]})
    closed = windows.advance([partials(table, spec)], {"0": 50})
    out = windows.results_table(closed, ["key", "session_start", "session_end", "n", "total"])
    assert out is not None and out.to_pylist() == [
        {"key": "a", "session_start": 0, "session_end": 15, "n": 2, "total": 3}]
    assert [list(r.values()) for r in out.to_pylist()] == windows.results(closed)
    # a batch closing nothing: no table (the row path then has no rows), never a KeyError
    nothing = windows.advance([partials(table.slice(2), spec)], {"0": 51})
    assert nothing.num_rows == 0
    assert windows.results_table(nothing, ["key", "session_start", "session_end", "n",
                                           "total"]) is None


def test_snapshot_keeps_open_sessions_and_refuses_other_windows() -> None:
    spec = _aggregate(10, None, 0).spec()
    windows = AggregateWindows(spec)
    table = pa.table({"id": ["1"], "key": ["a"], "ts": [5], "value": [7]})
    windows.advance([partials(table, spec)], {"0": 5})
    again = AggregateWindows(spec)
    again.restore(windows.snapshot())
    more = pa.table({"id": ["2"], "key": ["a"], "ts": [12], "value": [1]})
    closed = again.advance([partials(more, spec)], {"0": 40})
    assert again.results(closed) == [["a", 5, 22, 2, 8, 1, 7, 2]]
    tumbling = (WindowedAggregate(key="key", n=Agg.count()).with_tumbling_window(
        Duration.millis(10)).with_timestamp_field("ts")).spec()
    with pytest.raises(ConfigError, match="saved with windows"):
        AggregateWindows(tumbling).restore(windows.snapshot())


def test_key_fields_other_than_the_key_are_refused() -> None:
    agg = (WindowedAggregate(key="key", n=Agg.count())
           .with_session_window(Duration.millis(10), key_fields=["user"])
           .with_timestamp_field("ts"))
    with pytest.raises(ConfigError, match="per key of"):
        agg.spec()


def test_helpers() -> None:
    table = pa.table({"k": ["a", "a", "b"], "j": [1, 2, 2]})
    assert key_starts(table, ["k", "j"]).tolist() == [True, True, True]
    assert key_starts(table, ["k"]).tolist() == [True, False, True]
    assert running_max(np.array([5, 1, 7, 0]), np.array([1, 0, 1, 0], bool)).tolist() == [
        5, 5, 7, 7]


def test_a_piece_inside_an_open_session_does_not_hide_its_reach() -> None:
    # open: a at 0..50 (gap 10); then 12 (inside it) and 55 (within gap of 50, not of 12)
    agg = _aggregate(10, None, 60)
    stamps = [[0, 10, 20, 30, 40, 50], [12, 55, 200]]
    batches, i = [], 0
    for part in stamps:
        batches.append([Tuple([str(i + j), "a", ts, 1], FIELDS, "events",
                              message_id=("t", 0, i + j)) for j, ts in enumerate(part)])
        i += len(part)
    assert _run_aggregate(agg, batches) == [("a", 0, 65, 8, 8, 1, 1, 1)]
    assert _run_bolt(agg, batches) == [("a", 0, 65, 8, 8, 1, 1, 1)]


# -- through the test driver and the Spark driver's commit half ----------------------------


class _SessionBolt(BaseWindowedBolt):
    """The aggregate's sessions written as a user windowed bolt."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("key", "session_start", "session_end", *AGGS))

    def execute(self, window: Any) -> None:
        tuples = window.get()
        self.collector.emit(list(_values(tuples[0].get_value_by_field("key"),
                                         window.get_start_timestamp(),
                                         window.get_end_timestamp(),
                                         [t.get_value_by_field("value") for t in tuples])))


def _driver_outputs(gap: int, top: int | None, lag: int, batches: list[list[list[Any]]]
                    ) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    window = (Duration.millis(gap), None if top is None else Duration.millis(top))
    builder = TopologyBuilder()
    builder.set_spout("events", ListSpout(batches, FIELDS))  # one micro-batch per list
    builder.set_spout("copy", ListSpout(batches, FIELDS))
    builder.set_bolt("agg", _aggregate(gap, top, lag).with_late_tuple_stream("late"), 2
                     ).fields_grouping("events", Fields("key"))
    builder.set_bolt("bolt", _SessionBolt().with_session_window(*window)
                     .with_timestamp_field("ts").with_lag(Duration.millis(lag))
                     .with_late_tuple_stream("late")).fields_grouping("copy", Fields("key"))
    # (one bolt task: a task's watermark and stream clocks are over the tuples it receives,
    # the aggregate's over the whole spout; with one task they are the same)
    builder.set_bolt("agg-out", CaptureSink()).shuffle_grouping("agg")
    builder.set_bolt("agg-late", CaptureSink()).shuffle_grouping("agg", "late")
    builder.set_bolt("bolt-out", CaptureSink()).shuffle_grouping("bolt")
    with TopologyTestDriver(builder.create_topology()) as driver:
        driver.run()
        got = (driver.output("agg"), driver.output("bolt"),
               [t[0]["id"] for t in driver.output("agg", "late")],
               [t[0].get_value_by_field("id") for t in driver.output("bolt", "late")])
    return got


def test_the_test_driver_runs_aggregate_sessions_as_a_session_bolt() -> None:
    rows = [["1", "a", 0, 1], ["2", "b", 3, 2], ["3", "a", 8, 3], ["4", "a", 25, 4],
            ["5", "a", 17, 5], ["6", "b", 9, 2], ["7", "a", 1, 9], ["8", "b", 60, 1],
            ["9", "a", 44, 1], ["10", "a", 95, 0]]
    batches = [rows[:4], rows[4:7], rows[7:]]
    agg, bolt, agg_late, bolt_late = _driver_outputs(10, None, 22, batches)
    # a's 17 (batch 2) bridges [0, 8] and [25]: one session; 1 < 25 - 22: late
    assert agg == [["b", 3, 19, 2, 4, 2, 2, 1], ["a", 0, 35, 4, 13, 1, 5, 4],
                   ["a", 44, 54, 1, 1, 1, 1, 1], ["b", 60, 70, 1, 1, 1, 1, 1]]
    assert agg_late == ["7"]
    assert sorted(agg) == sorted(bolt)
    assert agg_late == bolt_late


@settings(max_examples=40, deadline=None)
@given(_scenario())
def test_driver_aggregate_sessions_equal_the_session_bolt(scenario: Any) -> None:
    lag, gap, top, partitions, order, cuts = scenario
    events = _events(partitions[:1], order)  # one list spout: one stream
    rows = [t.values for t in events]
    bounds = [0, *sorted(c for c in cuts if c < len(rows)), len(rows)]
    batches = [rows[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    agg, bolt, agg_late, bolt_late = _driver_outputs(gap, top, lag, batches)
    assert sorted(agg) == sorted(list(s) for s in _reference(events, gap, top, lag))
    assert sorted(agg) == sorted(bolt)
    assert agg_late == bolt_late


def test_a_late_partition_cannot_close_a_session_again(tmp_path: Path) -> None:
    """The Spark driver's half (WindowCommit): clocks persisted, a new stream starts there."""
    spec = _aggregate(10, None, 5).spec()
    commit = WindowCommit("agg", spec, CheckpointLayout(tmp_path))

    def payload(rows: list[tuple[str, int]], clocks: dict[str, Any]) -> bytes:
        table = pa.table({"key": ["a"] * len(rows), "ts": [ts for _, ts in rows],
                          "value": [1] * len(rows)})
        streams = np.array([s for s, _ in rows], dtype=object)
        latest = {s: c for s in set(streams.tolist()) if (c := clock_of(clocks, s)) is not None}
        late = late_mask(table.column("ts").to_numpy(), streams, latest, spec.lag_ms)
        kept = table.filter(pa.array(~late))
        return pickle.dumps({"partials": partials(kept, spec), "latest": latest,
                             "late": int(late.sum())})

    fired, state = commit.commit(0, [payload([("t/0", t) for t in (0, 4, 8, 40, 100)], {})])
    commit.persist(0, state)
    assert [w[:4] for w in fired] == [["a", 0, 18, 3], ["a", 40, 50, 1]]
    clocks = read_clocks(str(commit.layout.clocks_path("agg")))
    fired, state = commit.commit(1, [payload([("t/1", 6), ("t/1", 120)], clocks)])
    assert fired == [] and state.late == 1  # 6 would have joined the closed [0, 18]
    assert state.watermark == 95


def test_pieces_below_the_closed_watermark_are_late_without_clocks() -> None:
    # an executor that knew no stream clock sends a row that would join a closed session
    spec = _aggregate(10, None, 5).spec()
    windows = AggregateWindows(spec)
    first = pa.table({"id": ["1", "2"], "key": ["a", "a"], "ts": [0, 100], "value": [1, 1]})
    assert windows.results(windows.advance([partials(first, spec)], {"t/0": 100})) == [
        ["a", 0, 10, 1, 1, 1, 1, 1]]
    again = pa.table({"id": ["3", "4"], "key": ["a", "a"], "ts": [5, 120], "value": [1, 1]})
    closed = windows.advance([partials(again, spec)], {"t/1": 120})
    assert windows.results(closed) == [] and windows.late == 1
    assert windows.open is not None and windows.open.column("__first").to_pylist() == [100, 120]
