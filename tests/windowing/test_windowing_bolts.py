"""User windowed bolts: the per-task batch logic the Spark runtime drives (no Spark here)."""

from __future__ import annotations

import dataclasses
import pickle
import random

import pytest

from kstorm import BaseStatefulWindowedBolt, BaseWindowedBolt, Fields, TopologyBuilder
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import compile_plan
from kstorm._runtime.window_task import Collect, WindowedTask
from kstorm.errors import ConfigError, TopologyError
from kstorm.testing import CaptureSink, ListSpout
from kstorm.tuple import Tuple
from kstorm.windowing import Count, Duration, TupleWindow, WindowConfig

FIELDS = Fields("id", "ts")


def tup(i: str, ts: int | None, *, src: str = "events", mid: object = None) -> Tuple:
    return Tuple([i, ts], FIELDS, src, message_id=mid)


def run(config: WindowConfig, batches: list[tuple[int, list[Tuple]]],
        inputs: tuple[str, ...] = ()) -> list[Collect]:
    """Each batch through a fresh task restored from the previous snapshot (as on Spark)."""
    outs, snap = [], None
    for now, tuples in batches:
        task = WindowedTask("w", config, inputs)
        task.restore(snap)
        out = Collect()
        task.process(tuples, now, out)
        outs.append(out)
        snap = pickle.loads(pickle.dumps(task.snapshot()))
    return outs


def ids(window: list[Tuple]) -> list[str]:
    return [t.values[0] for t in window]


EVENT = WindowConfig(Duration.seconds(10), tumbling=True, timestamp_field="ts",
                     lag=Duration.seconds(2))


def test_row_order_within_a_batch_does_not_change_windows_or_lateness():
    batch0 = [tup("a", 1_000), tup("b", 20_000), tup("c", 17_000), tup("d", 19_000),
              tup("x", 19_000, mid="1"), tup("y", 19_000, mid="0")]
    batch1 = [tup("e", 5_000), tup("f", 17_500), tup("g", 18_500), tup("h", 40_000)]
    expected = None
    rng = random.Random(4)
    for _ in range(20):
        shuffled = [(0, rng.sample(batch0, len(batch0))), (1, rng.sample(batch1, len(batch1)))]
        outs = run(EVENT, shuffled)
        got = ([[ids(w) for w in o.windows] for o in outs],
               [ids(o.late_tuples) for o in outs])
        expected = expected or got
        assert got == expected
    windows, late = expected
    # ties on the timestamp are broken by message id, then by values: always the same order
    assert windows == [[["a"]], [["c", "g", "d", "y", "x", "b"]]]
    # late iff below the stream's latest before it minus the lag (20 s - 2 s)
    assert late == [[], ["e", "f"]]


def test_late_tuples_go_to_the_output_and_join_no_window():
    outs = run(EVENT, [(0, [tup("a", 15_000)]), (0, [tup("late", 12_000), tup("b", 16_000)]),
                       (0, [tup("c", 40_000)])])
    assert [ids(o.late_tuples) for o in outs] == [[], ["late"], []]
    assert [[ids(w) for w in o.windows] for o in outs] == [[], [], [["a", "b"]]]


def test_a_tuple_without_a_timestamp_is_an_error_not_a_crash():
    [out] = run(EVENT, [(0, [tup("a", 1_000), tup("bad", None), tup("b", 30_000)])])
    assert [(t.values[0], type(e).__name__) for t, e in out.errors] == [("bad", "FieldError")]
    assert [ids(w) for w in out.windows] == [["a"]]


def test_extractor_errors_are_reported_per_tuple():
    def extract(t: Tuple) -> int:
        return int(t.values[1])

    cfg = WindowConfig(Count(2), tumbling=True, timestamp_extractor=extract)
    [out] = run(cfg, [(0, [tup("a", 1), Tuple(["b", "x"], FIELDS, "s"), tup("c", 2)])])
    assert [t.values[0] for t, _ in out.errors] == ["b"]
    assert [ids(w) for w in out.windows] == [["a", "c"]]


def test_idle_timeout_leaves_a_silent_stream_out_of_the_watermark():
    def batches() -> list[tuple[int, list[Tuple]]]:
        return [(0, [tup("s", 1_000, src="slow"), tup("f1", 2_000, src="fast")]),
                (500, [tup("f2", 12_000, src="fast")]),
                (1_500, [tup("f3", 22_000, src="fast")])]

    inputs = ("slow:default", "fast:default")
    held = run(EVENT, batches(), inputs)
    assert [o.windows for o in held] == [[], [], []]  # slow holds the watermark at 1 s - 2 s
    cfg = WindowConfig(Duration.seconds(10), tumbling=True, timestamp_field="ts",
                       lag=Duration.seconds(2), idle_timeout=Duration.seconds(1))
    moved = run(cfg, batches(), inputs)
    # at 1.5 s slow has been silent for 1.5 s: the watermark is 22 s - 2 s
    assert [[ids(w) for w in o.windows] for o in moved] == [
        [], [], [["s", "f1"], ["f2"]]]


def test_idle_timeout_sets_a_timer_and_a_tick_moves_the_watermark():
    cfg = WindowConfig(Duration.seconds(10), tumbling=True, timestamp_field="ts",
                       idle_timeout=Duration.seconds(1))
    task = WindowedTask("w", cfg)
    task.process([tup("a", 5_000, src="p0"), tup("b", 25_000, src="p1")], 100, Collect())
    task.process([tup("c", 26_000, src="p1")], 700, Collect())
    assert task.next_timer(700) == 1_100  # p0 silent since 100
    out = Collect()
    task.tick(1_100, out)
    assert [ids(w) for w in out.windows] == [["a"]]  # b (25 s) waits for a watermark >= 30 s


def test_processing_time_windows_close_by_time_alone():
    task = WindowedTask("w", WindowConfig(Duration.seconds(2), tumbling=True))
    task.process([tup("a", None), tup("b", None)], 10_500, Collect())
    assert task.next_timer(10_500) == 12_001
    out = Collect()
    task.tick(12_000, out)
    assert out.windows == []  # a window ending at 12 s closes once time is past it
    task.tick(12_001, out)
    assert [ids(w) for w in out.windows] == [["a", "b"]] and out.bounds == [(10_000, 12_000)]
    assert task.next_timer(12_001) is None  # nothing left to close: no timer, no work


def test_count_windows_in_processing_time_fire_at_once():
    [out] = run(WindowConfig(Count(2), tumbling=True), [(5, [tup(c, None) for c in "abcde"])])
    assert [ids(w) for w in out.windows] == [["a", "b"], ["c", "d"]]


def test_message_ids_sort_per_source_so_out_of_order_timestamps_are_kept():
    cfg = WindowConfig(Duration.seconds(10), tumbling=True, timestamp_field="ts",
                       message_id_field="n", lag=Duration.seconds(5))
    fields = Fields("id", "ts", "n")
    rows = [Tuple(["b", 4_000, 2], fields, "k", message_id=("t", 0, 2)),
            Tuple(["a", 6_000, 1], fields, "k", message_id=("t", 0, 1)),
            Tuple(["c", 31_000, 3], fields, "k", message_id=("t", 0, 3))]
    [out] = run(cfg, [(0, rows)])
    assert [ids(w) for w in out.windows] == [["b", "a"]]  # none dropped by the id ledger
    # without the lag, b (4 s, after a at 6 s in its partition) is late: the stream rule
    [out] = run(dataclasses.replace(cfg, lag=Duration(0)), [(0, rows)])
    assert [ids(w) for w in out.windows] == [["a"]] and ids(out.late_tuples) == ["b"]


def test_windowed_bolts_are_declared_and_planned_as_their_own_stage():
    class Bolt(BaseWindowedBolt):
        def declare_output_fields(self, d):
            d.declare(Fields("n"))

        def execute(self, window: TupleWindow) -> None: ...

    b = TopologyBuilder()
    b.set_spout("events", ListSpout([[("a", 1)]], FIELDS))
    b.set_bolt("w", Bolt().with_tumbling_window(Count(2)).with_timestamp_field("ts")
               .with_late_tuple_stream("late"), 2).shuffle_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w", stream="late")
    topology = b.create_topology()
    assert dict(topology.components["w"].streams) == {"default": Fields("n"),
                                                       "late": Fields("late_tuple")}
    stage = compile_plan(topology).stage("w")
    assert stage.windowed and stage.keyed and stage.bolts == ["w"]


def test_window_emits_are_anchored_to_the_window_and_errors_are_dead_letters():
    class Bolt(BaseStatefulWindowedBolt):
        def init_state(self, state):
            self.state = state

        def prepare(self, conf, context, collector):
            self.collector = collector

        def declare_output_fields(self, d):
            d.declare(Fields("n"))

        def execute(self, window: TupleWindow) -> None:
            if len(window) > 2:
                raise ValueError("too big")
            self.state.put("n", self.state.get("n", 0) + 1)
            self.collector.emit([len(window)])

    b = TopologyBuilder()
    b.set_spout("events", ListSpout([[("a", 1)]], FIELDS))
    b.set_bolt("w", Bolt().with_tumbling_window(Count(2))).shuffle_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")
    topology = b.create_topology()
    plan = compile_plan(topology)
    from kstorm.state import InMemoryKeyValueState
    state = InMemoryKeyValueState("t:w:0")
    ex = StageExecutor(topology, plan, plan.stage_of["w"], topology_name="t", conf={},
                       batch_id=0, partition=0, state_for=lambda c, t: state)
    anchors = [tup("a", 1), tup("b", 2)]
    for i, a in enumerate(anchors):
        a._ids = [i]
    ex.execute_window("w", 0, TupleWindow.of(anchors))
    ex.execute_window("w", 0, TupleWindow.of([tup("c", 3)] * 3))
    rows = list(ex.finish())
    out = [r for r in rows if r.dest == "out"]
    assert len(out) == 1 and pickle.loads(out[0].meta) == [[0], [1]]
    assert [r.src for r in rows if r.dest == "__dead_letter"] == ["w"]
    assert state.get("n") == 1 and ex.counters["w.windows"] == 2


def test_idle_timeout_needs_event_time_and_a_positive_duration():
    with pytest.raises(ConfigError, match="event-time"):
        _ = BaseWindowedBolt().with_tumbling_window(Count(2)).with_idle_timeout(
            Duration.seconds(1)).window_config
    with pytest.raises(ConfigError, match="positive"):
        BaseWindowedBolt().with_idle_timeout(Duration(0))


def test_declaring_the_late_stream_yourself_is_refused():
    class Bolt(BaseWindowedBolt):
        def declare_output_fields(self, d):
            d.declare_stream("late", Fields("x"))

    b = TopologyBuilder()
    b.set_spout("events", ListSpout([[("a", 1)]], FIELDS))
    b.set_bolt("w", Bolt().with_tumbling_window(Count(2)).with_timestamp_field("ts")
               .with_late_tuple_stream("late")).shuffle_grouping("events")
    with pytest.raises(TopologyError, match="twice"):
        b.create_topology()


def test_persistent_window_larger_than_memory_evaluates_with_a_bounded_cache():
    from kstorm._runtime.window_store import DictBackend, PersistentTuples

    backend = DictBackend()
    cfg = WindowConfig(Count(50), tumbling=True, persistent=True, max_events_in_memory=10)
    snap, windows, peak = None, [], [0]

    class Out(Collect):
        def __init__(self, store: PersistentTuples) -> None:
            super().__init__()
            self.store = store

        def window(self, window):
            seen = []
            for t in window.get_iter():
                seen.append(t.values[0])
                peak[0] = max(peak[0], self.store.cached)
            windows.append(seen)
            with pytest.raises(Exception, match="not supported"):
                window.get_new()

    for b in range(4):
        store = PersistentTuples(backend, cfg.max_events_in_memory)
        task = WindowedTask("w", cfg, store=store)
        task.restore(snap)
        task.process([tup(f"{b}-{i:02d}", None) for i in range(30)], b, Out(store))
        snap = pickle.loads(pickle.dumps(task.snapshot()))
        # the snapshot holds refs, not tuples
        assert b"-0" not in pickle.dumps(snap)
    expected = [f"{i // 30}-{i % 30:02d}" for i in range(120)]
    assert windows == [expected[:50], expected[50:100]]
    assert 0 < peak[0] <= 10
    # the first window's tuples left the backend once the second window evicted them
    assert min(backend.data) == 50 and len(backend.data) == 7
