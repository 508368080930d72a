"""A windowed bolt takes its input in arrival order, wherever micro-batches are cut.

Storm's *Windowing* guide: "the tuple is considered late if its timestamp is less than the
watermark" and "the watermark ... is the minimum of the latest tuple timestamps (across
all the input streams) minus the lag" -- a stream's tuples are taken in the order they
arrive, and Storm's bolt executes them in that order. kstorm cuts a stream into
micro-batches; an emit position carried with each tuple (``__seq``) keeps the order an
upstream task emitted them in, so the windows and the late tuples do not depend on where
the cuts fall, and a tuple far behind the one emitted before it is late even when both
share a batch.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm import BaseBasicBolt, BaseRichSpout, BaseWindowedBolt, Fields, TopologyBuilder
from kstorm.testdriver import TopologyTestDriver
from kstorm.windowing import Count, Duration

LAG_MS = 5_000
WINDOW_MS = 10_000


class Events(BaseRichSpout):
    """A free-form spout: the test pipes what it emits, batch by batch."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "ts"))

    def next_tuple(self) -> None:
        pass


class Relay(BaseBasicBolt):
    """Passes each event on, as a bolt between a spout and a windowed bolt does."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "ts"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit(list(tuple_.values))


class Ids(BaseWindowedBolt):
    """Emits each window's ids, in the window's order."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("ids"))

    def execute(self, window: Any) -> None:
        self.collector.emit([[t.get_value_by_field("id") for t in window.get()]])


def _topology(bolt: BaseWindowedBolt, relay_grouping: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("events", Events())
    relay = builder.set_bolt("relay", Relay())
    if relay_grouping == "fields":  # a shuffled (ordered) stage before the window
        relay.fields_grouping("events", Fields("id"))
    else:
        relay.shuffle_grouping("events")
    builder.set_bolt("window", bolt).global_grouping("relay")
    return builder.create_topology()


def _event_time() -> BaseWindowedBolt:
    return (Ids().with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
            .with_lag(Duration.millis(LAG_MS)).with_late_tuple_stream("late"))


def _run(bolt: BaseWindowedBolt, grouping: str, events: list[list[Any]],
         cuts: list[int]) -> tuple[list[list[int]], list[int]]:
    """(windows, late ids) of ``events`` piped in batches cut at ``cuts``."""
    bounds = [0, *cuts, len(events)]
    with TopologyTestDriver(_topology(bolt, grouping)) as driver:
        for a, b in zip(bounds, bounds[1:], strict=False):
            driver.pipe("events", events[a:b])
            driver.advance_time(1)
        windows = [row[0] for row in driver.output("window")]
        late = ([t[0].get_value_by_field("id") for t in driver.output("window", "late")]
                if "late" in driver.topology.components["window"].streams else [])
    return windows, late


def _storm_reference(events: list[list[Any]]) -> tuple[list[list[int]], list[int]]:
    """Storm's rules applied to the emit order: late iff below (latest so far - lag)."""
    latest: int | None = None
    kept: dict[int, list[int]] = {}
    late = []
    for ident, ts in events:
        if latest is not None and ts < latest - LAG_MS:
            late.append(ident)
        else:
            kept.setdefault(-(-ts // WINDOW_MS), []).append(ident)  # e - 10 s < ts <= e
        latest = ts if latest is None else max(latest, ts)
    watermark = (latest or 0) - LAG_MS
    windows = [ids for end, ids in sorted(kept.items()) if end * WINDOW_MS <= watermark]
    return windows, late


def _events(rng: random.Random, n: int) -> list[list[Any]]:
    """Mostly in time order, some a little behind (within the lag), some far behind.

    No timestamp lands on a window's end (all are 37 ms past a multiple of 100 ms): a
    tuple exactly at the end of a window that already fired -- on the watermark, so not
    late by the stream rule -- is the one case where a cut matters (kstorm sends it to
    the late stream; Storm's window manager keeps it in no window).
    """
    clock, out = 0, []
    for ident in range(n):
        clock += rng.choice([0, 100, 500, 1_000, 3_000])
        behind = rng.choice([0, 0, 0, 2_000, 4_000, 9_000, 20_000])
        out.append([ident, max(0, clock - behind) + 37])
    return out


def _cuts(rng: random.Random, n: int) -> list[int]:
    return sorted(rng.sample(range(1, n), min(n - 1, rng.randint(0, 8)))) if n > 1 else []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), grouping=st.sampled_from(["shuffle", "fields"]))
def test_event_time_windows_and_late_tuples_do_not_depend_on_batch_cuts(
        seed: int, grouping: str) -> None:
    """Random batch cuts give the windows and late tuples of the emit order (Storm's)."""
    rng = random.Random(seed)
    events = _events(rng, rng.randint(1, 60))
    whole = _run(_event_time(), grouping, events, [])
    cut = _run(_event_time(), grouping, events, _cuts(rng, len(events)))
    assert cut == whole
    windows, late = whole
    want_windows, want_late = _storm_reference(events)
    assert late == want_late
    assert [sorted(w) for w in windows] == want_windows


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), grouping=st.sampled_from(["shuffle", "fields"]))
def test_count_windows_hold_the_last_tuples_in_emit_order(seed: int, grouping: str) -> None:
    """Storm's *Windowing* guide: "Count based ... sliding window": the last 5 every 2."""
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    events = [[rng.randrange(1000), 0] for _ in range(n)]

    def bolt() -> BaseWindowedBolt:
        return Ids().with_window(Count(5), Count(2))

    cut = _run(bolt(), grouping, events, _cuts(rng, n))
    ids = [e[0] for e in events]
    assert cut[0] == [ids[max(0, end - 5):end] for end in range(2, n + 1, 2)]


def test_a_tuple_far_behind_its_predecessor_in_one_batch_is_late() -> None:
    """Storm's tuple-timestamp example: 9 s behind with a 5 s lag is late, batch or not."""
    events = [[0, 10_000], [1, 20_000], [2, 11_000], [3, 21_000], [4, 40_000]]
    windows, late = _run(_event_time(), "shuffle", events, [])
    assert late == [2]
    assert [sorted(w) for w in windows] == [[0], [1], [3]]  # (e - 10 s, e]


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_an_ordered_stage_takes_its_input_in_one_order_whatever_the_shuffle(seed: int) -> None:
    """A replayed batch must emit as before: whatever order Spark's shuffle delivers the
    rows in, the stage gets them interleaved by origin, each origin in emit order."""
    from kstorm._runtime.envelope import emit_seq
    from kstorm._runtime.window_task import interleaved
    from kstorm.tuple import Tuple

    rng = random.Random(seed)
    pairs = []
    for origin in range(rng.randint(1, 4)):
        for n in range(rng.randint(0, 12)):
            t = Tuple([origin, n], Fields("origin", "n"), "relay")
            t._seq = emit_seq(origin, n)
            pairs.append((rng.randrange(3), t))
    for p in range(rng.randint(0, 2)):  # a Kafka spout's raw rows
        pairs += [(0, Tuple([p, o], Fields("p", "o"), "events", message_id=("t", p, o)))
                  for o in range(rng.randint(0, 8))]
    once = [(task, t.source_component, t.values) for task, t in interleaved(pairs)]
    shuffled = rng.sample(pairs, len(pairs))
    again = [(task, t.source_component, t.values) for task, t in interleaved(shuffled)]
    assert again == once
    for origin in {(src, v[0]) for _, src, v in once}:  # each origin's own order is kept
        mine = [v[1] for _, src, v in once if (src, v[0]) == origin]
        assert mine == sorted(mine)


def test_the_stages_upstream_of_a_windowed_bolt_are_ordered() -> None:
    """The compiled plan marks them (without running it)."""
    from kstorm._runtime.plan import compile_plan

    plan = compile_plan(_topology(_event_time(), "fields"))
    ordered = {s.head: s.ordered for s in plan.stages}
    assert ordered == {"events": True, "relay": True, "window": False}
    builder = TopologyBuilder()
    builder.set_spout("events", Events())
    builder.set_bolt("relay", Relay()).fields_grouping("events", Fields("id"))
    assert not any(s.ordered for s in compile_plan(builder.create_topology()).stages)
