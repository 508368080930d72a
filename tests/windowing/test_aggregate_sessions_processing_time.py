"""Processing-time session windows of the built-in ``WindowedAggregate`` (issue #45 item 1).

Without a timestamp field a tuple's time is its micro-batch's (the test driver's clock here,
Spark's batch timestamp in its offset log there). The test driver runs the aggregate beside a
session windowed bolt reading the same batches at the same clock times: both must give the
same sessions, and so must a brute-force reference (per key, the batch times of its tuples
cut where neighbours are more than ``gap`` apart, and greedily at ``first + max_duration``;
a session closes once a batch runs at a time past its end). ``advance_time`` runs a batch
without input when a session is due, as Spark's sources plan one
(``kstorm/_kafka/clocks.py``, ``due_mark``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm import BaseWindowedBolt, TopologyBuilder
from kstorm._kafka.clocks import DUE_KEY, due_mark
from kstorm._runtime.aggregate_task import read_rows
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._spark.windowed import WindowCommit
from kstorm.errors import ConfigError
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import CaptureSink, ListSpout
from kstorm.tuple import Fields
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, AggregateWindows, WindowedAggregate

FIELDS = Fields("id", "key", "value")
AGGS = {"n": Agg.count(), "total": Agg.sum("value"), "kinds": Agg.count_distinct("value")}
T0 = 1_700_000_000_000


def _aggregate(gap: int, top: int | None = None) -> WindowedAggregate:
    return WindowedAggregate(key="key", **AGGS).with_session_window(
        Duration.millis(gap), None if top is None else Duration.millis(top))


class _SessionBolt(BaseWindowedBolt):
    """The aggregate's sessions written as a user windowed bolt."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("key", "session_start", "session_end", *AGGS))

    def execute(self, window: Any) -> None:
        tuples = window.get()
        values = [t.get_value_by_field("value") for t in tuples]
        self.collector.emit([tuples[0].get_value_by_field("key"), window.get_start_timestamp(),
                             window.get_end_timestamp(), len(values), sum(values),
                             len(set(values))])


def _topology(gap: int, top: int | None) -> Any:
    window = (Duration.millis(gap), None if top is None else Duration.millis(top))
    builder = TopologyBuilder()
    typed = [[["0", "a", 0]]]  # (only the fields' types: the batches come by run_batch)
    builder.set_spout("events", ListSpout(typed, FIELDS))
    builder.set_spout("copy", ListSpout(typed, FIELDS))
    builder.set_bolt("agg", _aggregate(gap, top), 2).fields_grouping("events", Fields("key"))
    builder.set_bolt("bolt", _SessionBolt().with_session_window(*window), 2
                     ).fields_grouping("copy", Fields("key"))
    builder.set_bolt("agg-out", CaptureSink()).shuffle_grouping("agg")
    builder.set_bolt("bolt-out", CaptureSink()).shuffle_grouping("bolt")
    return builder.create_topology()


def _run(gap: int, top: int | None, steps: list[tuple[int, list[list[Any]]]], end_wait: int
         ) -> tuple[list[Any], list[Any]]:
    """Each step: advance the clock by ``ms`` (no batch), then a batch of ``rows`` (maybe
    none); at the end, advance ``end_wait`` in 100 ms steps, letting due batches run.

    Returns (the aggregate's sessions, the bolt's).
    """
    with TopologyTestDriver(_topology(gap, top), start_time_ms=T0) as driver:
        for ms, rows in steps:
            driver.advance_time(ms, run=False)
            driver.run_batch({"events": rows, "copy": rows})
        for _ in range(end_wait // 100):
            driver.advance_time(100)
        return driver.output("agg"), driver.output("bolt")


def _reference(gap: int, top: int | None, steps: list[tuple[int, list[list[Any]]]],
               end_wait: int) -> list[list[Any]]:
    """The sessions closed by the end (module docstring), from the batches' times alone."""
    now, by_key = T0, {}
    for ms, rows in steps:
        now += ms
        for _, key, value in rows:
            by_key.setdefault(key, []).append((now, value))
    final = now + end_wait // 100 * 100
    out = []
    for key, points in by_key.items():
        points.sort(key=lambda p: p[0])
        runs: list[list[tuple[int, int]]] = []
        for p in points:
            if runs and p[0] - runs[-1][-1][0] <= gap:
                runs[-1].append(p)
            else:
                runs.append([p])
        for run in runs:
            while run:
                limit = run[0][0] + top if top is not None else None
                chunk = [p for p in run if limit is None or p[0] <= limit]
                run = run[len(chunk):]
                end = chunk[-1][0] + gap if limit is None else min(chunk[-1][0] + gap, limit)
                # closed iff a batch ran past its end: the last batch or a due one
                if end < final:
                    values = [v for _, v in chunk]
                    out.append([key, chunk[0][0], end, len(values), sum(values),
                                len(set(values))])
    return sorted(out)


def test_processing_time_sessions_are_the_session_bolts() -> None:
    steps = [(0, [["1", "a", 1], ["2", "b", 2], ["3", "a", 1]]),
             (300, [["4", "a", 5]]),             # a: 300 ms after, within the 500 ms gap
             (400, [["5", "b", 7]]),             # b: 700 ms after its first: a new session
             (800, [["6", "a", 2]])]             # a's session ended at 800: a new one
    agg, bolt = _run(500, None, steps, 1_000)
    assert sorted(agg) == [["a", T0, T0 + 800, 3, 7, 2], ["a", T0 + 1_500, T0 + 2_000, 1, 2, 1],
                           ["b", T0, T0 + 500, 1, 2, 1], ["b", T0 + 700, T0 + 1_200, 1, 7, 1]]
    assert sorted(agg) == sorted(bolt) == _reference(500, None, steps, 1_000)


def test_an_idle_session_closes_when_the_clock_passes_its_end() -> None:
    with TopologyTestDriver(_topology(500, None), start_time_ms=T0) as driver:
        driver.run_batch({"events": [["1", "a", 1]], "copy": [["1", "a", 1]]})
        driver.advance_time(500)  # the end (T0 + 500) is inclusive: still open
        assert driver.output("agg") == [] and driver.batch_id == 1
        driver.advance_time(1)  # past it: a batch without input closes it
        assert driver.output("agg") == driver.output("bolt") == [["a", T0, T0 + 500, 1, 1, 1]]
        assert driver.batch_id == 2
        driver.advance_time(10_000)  # nothing open: no batch
        assert driver.batch_id == 2


def test_max_duration_cuts_processing_time_sessions() -> None:
    steps = [(0, [["1", "a", 1]]), (300, [["2", "a", 2]]), (300, [["3", "a", 3]]),
             (300, [["4", "a", 4]])]
    agg, bolt = _run(400, 700, steps, 1_000)
    assert sorted(agg) == [["a", T0, T0 + 700, 3, 6, 3], ["a", T0 + 900, T0 + 1_300, 1, 4, 1]]
    assert sorted(agg) == sorted(bolt) == _reference(400, 700, steps, 1_000)


@st.composite
def _scenario(draw: Any) -> tuple[int, int | None, list[tuple[int, list[list[Any]]]]]:
    gap = draw(st.integers(1, 10)) * 100
    top = draw(st.one_of(st.none(), st.integers(1, 20).map(lambda n: n * 100)))
    steps, i = [], 0
    for _ in range(draw(st.integers(1, 12))):
        keys = draw(st.lists(st.sampled_from("abc"), max_size=4))
        rows = [[str(i + j), k, draw(st.integers(0, 3))] for j, k in enumerate(keys)]
        i += len(rows)
        steps.append((draw(st.integers(0, 15)) * 100, rows))
    return gap, top, steps


@settings(max_examples=40, deadline=None)
@given(_scenario(), st.integers(0, 30))
def test_driver_processing_time_sessions_equal_the_bolt_and_reference(
        scenario: Any, end_wait: int) -> None:
    gap, top, steps = scenario
    agg, bolt = _run(gap, top, steps, end_wait * 100)
    assert sorted(agg) == _reference(gap, top, steps, end_wait * 100)
    assert sorted(agg) == sorted(bolt)


# -- the Spark driver's half and the sources' due batches --------------------------------------


def _payload(spec: Any, rows: list[tuple[str, int]]) -> bytes:
    """A read task's payload, as ``WindowStageRunner`` sends it (no timestamp column)."""
    import numpy as np

    table = pa.table({"id": [str(i) for i in range(len(rows))], "key": [k for k, _ in rows],
                      "value": [v for _, v in rows]})
    streams = np.full(len(rows), "t/0", dtype=object)
    late, _, part = read_rows(table, streams, {}, spec, "agg", [], None)
    assert late == []
    return pickle.dumps({"partials": part, "latest": {}, "late": 0})


def test_window_commit_stamps_the_batch_time_and_replays_alike(tmp_path: Path) -> None:
    spec = _aggregate(500).spec()
    layout = CheckpointLayout(tmp_path)
    commit = WindowCommit("agg", spec, layout)
    fired, state = commit.commit(0, [_payload(spec, [("a", 1), ("a", 2)])], T0)
    commit.persist(0, state)
    assert fired == []
    clocks = json.loads(layout.clocks_path("agg").read_bytes())
    assert clocks["due"] == T0 + 501 and clocks["latest"] == {}
    # batch 1 (a due batch, no input) at T0 + 600, run twice: a replay has the same time
    first = commit.commit(1, [], T0 + 600)[0]
    again, state = commit.commit(1, [], T0 + 600)
    assert first == again == [["a", T0, T0 + 500, 2, 3, 2]]
    commit.persist(1, state)
    assert "due" not in json.loads(layout.clocks_path("agg").read_bytes())
    assert due_mark(str(layout.clocks_path("agg")), T0 + 10**6) == {}


def test_time_never_goes_back() -> None:
    windows = AggregateWindows(_aggregate(500).spec())
    windows.advance([], {}, 0, T0 + 1_000)
    table = pa.table({"id": ["1"], "key": ["a"], "value": [1]})
    from kstorm.windowing.aggregate import partials

    windows.advance([partials(table, windows.spec)], {}, 0, T0)  # a clock set back
    assert windows.open is not None and windows.open.column("__first").to_pylist() == [T0 + 1_000]
    assert windows.next_close() == T0 + 1_501
    with pytest.raises(ConfigError, match="batch's time"):
        windows.advance([], {}, 0, None)


def test_due_mark_is_the_planning_time_once_due(tmp_path: Path) -> None:
    path = tmp_path / "clocks.json"
    path.write_text(json.dumps({"batch_id": 3, "latest": {}, "due": 1_000}))
    assert due_mark(str(path), 999) == {}
    assert due_mark(str(path), 1_000) == {DUE_KEY: 1_000}
    assert due_mark(str(tmp_path / "none.json"), 1_000) == {}


def test_snapshots_of_event_time_sessions_are_refused() -> None:
    event = AggregateWindows(_aggregate(500).with_timestamp_field("ts").spec())
    processing = AggregateWindows(_aggregate(500).spec())
    with pytest.raises(ConfigError, match="processing-time"):
        processing.restore(event.snapshot())
    with pytest.raises(ConfigError, match="processing-time"):
        event.restore(processing.snapshot())


def test_processing_time_fixed_windows_are_still_refused_with_a_hint() -> None:
    agg = WindowedAggregate(key="key", n=Agg.count()).with_tumbling_window(
        Duration.seconds(10))
    with pytest.raises(ConfigError, match="needs event time") as info:
        agg.spec()
    assert "with_session_window" in info.value.hint
    extractor = _aggregate(500).with_timestamp_extractor(lambda t: 0)
    with pytest.raises(ConfigError, match="with_timestamp_field"):
        extractor.spec()
