"""Session windows (issue 45 item 1): the manager, the task runtime and the test driver.

The property tests compare against a brute-force model written from the definitions alone
(docs/windowing.md "Session windows"): sort a key's accepted tuples, cut where neighbours
are more than ``gap`` apart (and greedily at ``first + max_duration``); a tuple below the
watermark is late iff adding it would change a session already emitted or put it in a
session whose end is below the watermark.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm import BaseWindowedBolt, Fields, TopologyBuilder
from kstorm._runtime.window_task import Collect, WindowedTask
from kstorm.errors import ConfigError
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import ListSpout
from kstorm.tuple import Tuple
from kstorm.windowing import Duration, WindowConfig
from kstorm.windowing.aggregate import Agg, WindowedAggregate
from kstorm.windowing.sessions import SessionWindowManager, bind_session_keys

# -- the brute-force model -----------------------------------------------------------------


def sessions_of(points: list[tuple[int, int]], gap: int, top: int | None
                ) -> list[tuple[int, int, tuple[tuple[int, int], ...]]]:
    """(start, end, members) of one key's (ts, id) points, by the definition."""
    points = sorted(points)
    runs: list[list[tuple[int, int]]] = []
    for p in points:
        if runs and p[0] - runs[-1][-1][0] <= gap:
            runs[-1].append(p)
        else:
            runs.append([p])
    out = []
    for run in runs:
        while run:
            first = run[0][0]
            limit = first + top if top is not None else None
            chunk = [p for p in run if limit is None or p[0] <= limit]
            run = run[len(chunk):]
            end = chunk[-1][0] + gap if limit is None else min(chunk[-1][0] + gap, limit)
            out.append((first, end, tuple(chunk)))
    return out


class Model:
    """Accepted tuples per key and the sessions already emitted, recomputed every time."""

    def __init__(self, gap: int, top: int | None) -> None:
        self.gap, self.top = gap, top
        self.accepted: dict[Any, list[tuple[int, int]]] = {}
        self.emitted: set[tuple[Any, tuple]] = set()
        self.watermark: int | None = None

    def add(self, key: Any, ts: int, ident: int) -> bool:
        points = [*self.accepted.get(key, []), (ts, ident)]
        if self.watermark is not None and ts < self.watermark:
            after = sessions_of(points, self.gap, self.top)
            members = {m for _, _, m in after}
            if any(m not in members for k, m in self.emitted if k == key):
                return False  # it would change a session already emitted
            mine = next(s for s in after if (ts, ident) in s[2])
            if mine[1] < self.watermark:
                return False  # its session is already closed
        self.accepted[key] = points
        return True

    def advance(self, watermark: int) -> list[tuple[Any, int, int, list[int]]]:
        if self.watermark is not None and watermark <= self.watermark:
            return []
        self.watermark = watermark
        fired = []
        for key, points in self.accepted.items():
            for start, end, members in sessions_of(points, self.gap, self.top):
                if end < watermark and (key, members) not in self.emitted:
                    self.emitted.add((key, members))
                    fired.append((key, start, end, [i for _, i in members]))
        return fired


# -- the manager equals the model ------------------------------------------------------------

Item = tuple[str, int]  # (key, id)


def key_config(gap: int, top: int | None) -> WindowConfig:
    return WindowConfig.session(Duration.millis(gap),
                                None if top is None else Duration.millis(top),
                                key_fields=["k"], timestamp_field="ts")


def described(windows: list[Any]) -> list[tuple[Any, int, int, list[int]]]:
    return sorted((w.get()[0]["k"], w.get_start_timestamp(), w.get_end_timestamp(),
                   [t["id"] for t in w.get()]) for w in windows)


# the watermark creeps forward; tuples land around it, many below it (a stream that joined
# late, or was idle), so they join, bridge, extend backwards or hit fired sessions
ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.sampled_from("ab"), st.integers(-40, 15)),
    st.tuples(st.just("wm"), st.just(""), st.integers(0, 12)),
    st.tuples(st.just("restart"), st.just(""), st.just(0)),
), max_size=80)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, gap=st.integers(1, 15), top=st.one_of(st.none(), st.integers(1, 40)))
def test_manager_matches_the_brute_force_model(ops, gap, top):
    config = key_config(gap, top)
    manager, model, clock = SessionWindowManager(config), Model(gap, top), 40
    for n, (kind, key, value) in enumerate(ops):
        if kind == "add":
            ts = max(0, clock + value)
            item = {"k": key, "id": n, "ts": ts}
            assert manager.add(item, ts) == model.add(key, ts, n), (n, key, ts)
        elif kind == "wm":
            clock += value
            assert described(manager.on_watermark(clock)) == sorted(model.advance(clock))
        else:  # a restart: the snapshot goes through pickle into a new manager
            snap = pickle.loads(pickle.dumps(manager.snapshot()))
            manager = SessionWindowManager(config)
            manager.restore(snap)
    assert described(manager.on_watermark(10_000)) == sorted(model.advance(10_000))
    assert manager.size == 0


# -- the test driver equals the model, for random batch cuts ------------------------------


class Sessions(BaseWindowedBolt):
    """Emits (user, start, end, ids, task) per session."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.task = collector, context.get_this_task_index()

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("user", "start", "end", "ids", "task"))

    def execute(self, window: Any) -> None:
        tuples = window.get()
        self.collector.emit([tuples[0].get_value_by_field("user"), window.get_start_timestamp(),
                             window.get_end_timestamp(),
                             [t.get_value_by_field("id") for t in tuples], self.task])


def driver_reference(batches: list[list[list[Any]]], gap: int, top: int | None, lag: int,
                     task_of: dict[str, int]) -> tuple[list[tuple[Any, ...]], list[int]]:
    """Sessions and late ids of one ListSpout stream, task by task, batch by batch.

    A user's tuples all go to the task ``task_of[user]`` (where Spark's hash partitioning
    puts them; the driver reports it); each task sees its part of the stream. Within a
    batch the runtime takes the stream's tuples in arrival order (a list spout's: the order
    of its rows, as Storm would); a tuple is late iff below the task's latest
    timestamp of the stream before it minus the lag, or by the model's rule; the watermark
    after a batch is the task's latest minus the lag.
    """
    sessions: list[tuple[Any, ...]] = []
    late: list[int] = []
    for task in set(task_of.values()):
        model, latest = Model(gap, top), None
        for batch in batches:
            mine = [r for r in batch if task_of[r[0]] == task]
            for user, ts, ident in mine:
                if latest is not None and ts < latest - lag:
                    late.append(ident)
                elif not model.add(user, ts, ident):
                    late.append(ident)
                latest = ts if latest is None else max(latest, ts)
            if mine:
                sessions += model.advance(latest - lag)
        sessions += model.advance(10**12)
    return sorted((k, s, e, sorted(ids)) for k, s, e, ids in sessions), sorted(late)


USERS = ("ann", "bob", "cy", "dee")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), gap=st.integers(1, 30),
       top=st.one_of(st.none(), st.integers(5, 60)), lag=st.integers(0, 20),
       beyond=st.booleans(), parallelism=st.integers(1, 3))
def test_driver_sessions_equal_the_reference(seed, gap, top, lag, beyond, parallelism):
    rng = random.Random(seed)
    rows, clock = [], 0
    for ident in range(rng.randint(1, 60)):
        clock += rng.choice([0, 1, 2, 5, gap, gap + 1, 3 * gap])
        spread = lag + (25 if beyond else 0)  # out of order within the lag, or beyond it
        rows.append([rng.choice(USERS), max(0, clock - rng.randint(0, spread)),
                     ident])
    cuts = sorted(rng.sample(range(1, len(rows)), min(len(rows) - 1, rng.randint(0, 6))))
    batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]

    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout([], Fields("user", "ts", "id")))
    window = Duration.millis(gap), None if top is None else Duration.millis(top)
    bolt = (Sessions().with_session_window(*window).with_timestamp_field("ts")
            .with_lag(Duration.millis(lag)).with_late_tuple_stream("late"))
    builder.set_bolt("sessions", bolt, parallelism).fields_grouping("clicks", Fields("user"))
    with TopologyTestDriver(builder.create_topology()) as driver:
        for batch in batches:
            driver.pipe("clicks", batch)
        # far in the future, for every user (so every task): every session closes, the
        # first flush's too (so every user, even one whose tuples were all late, has a
        # session that says its task)
        driver.pipe("clicks", [[u, 10**9, -1] for u in USERS])
        driver.pipe("clicks", [[u, 2 * 10**9, -2] for u in USERS])
        output = driver.output("sessions")
        task_of = {u: task for u, _, _, i, task in output if i == [-1]}
        assert sorted(task_of) == sorted(USERS)
        got = sorted((u, s, e, sorted(i)) for u, s, e, i, _ in output if i != [-1])
        late = sorted(t[0].get_value_by_field("id") for t in driver.output("sessions", "late"))
    want, want_late = driver_reference(batches, gap, top, lag, task_of)
    assert got == want
    assert late == want_late
    assert sorted([i for *_, ids in got for i in ids] + late) == sorted(r[2] for r in rows)


# -- examples a user would notice -----------------------------------------------------------


def tup(user: str, ts: int, ident: int = 0) -> Tuple:
    return Tuple([user, ts, ident], Fields("user", "ts", "id"), "clicks")


def test_a_tuple_bridging_two_sessions_merges_them():
    m = SessionWindowManager(WindowConfig.session(Duration.millis(10), timestamp_field="ts"))
    for ts in (0, 5, 20, 26):
        m.add(ts, ts)
    assert m.on_watermark(14) == []  # [0, 5] ends at 15: not passed yet
    assert m.add("bridge", 12)  # below the watermark, but in an open session: joins it
    [w] = m.on_watermark(37)
    assert (w.get_start_timestamp(), w.get_end_timestamp(), w.get()) == \
        (0, 36, [0, 5, "bridge", 20, 26])
    assert w.get_new() == w.get() and w.get_expired() == []


def test_max_duration_cuts_a_long_session():
    m = SessionWindowManager(WindowConfig.session(Duration.millis(10), Duration.millis(20),
                                                  timestamp_field="ts"))
    for ts in range(0, 50, 5):
        m.add(ts, ts)
    fired = [(w.get_start_timestamp(), w.get_end_timestamp(), w.get())
             for w in m.on_watermark(1_000)]
    assert fired == [(0, 20, [0, 5, 10, 15, 20]), (25, 45, [25, 30, 35, 40, 45])]


def test_late_tuples_of_a_fired_session_go_to_the_late_stream():
    config = WindowConfig.session(Duration.millis(10), key_fields=["user"],
                                  timestamp_field="ts", late_tuple_stream="late")
    task, out = WindowedTask("s", config, ["clicks:default"]), Collect()
    task.process([tup("ann", 0), tup("bob", 3), tup("ann", 50)], 0, out)
    assert out.bounds == [(0, 10), (3, 13)]  # watermark 50: both early sessions fired
    # a new stream's tuples below the watermark: ann@8 would change the fired session,
    # bob@30 would form a session already closed, ann@45 joins ann's open session
    task.process([Tuple(["ann", 8, 0], Fields("user", "ts", "id"), "other"),
                  Tuple(["bob", 30, 0], Fields("user", "ts", "id"), "other"),
                  Tuple(["ann", 45, 0], Fields("user", "ts", "id"), "other")], 1, out)
    assert [(t.values[0], t.values[1]) for t in out.late_tuples] == [("ann", 8), ("bob", 30)]
    assert task.late_count == 2


def test_processing_time_sessions_close_as_the_clock_passes_the_gap():
    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout([], Fields("user", "ts", "id")))
    builder.set_bolt("sessions", Sessions().with_session_window(Duration.seconds(10))
                     ).fields_grouping("clicks", Fields("user"))
    with TopologyTestDriver(builder.create_topology(), start_time_ms=1_000) as driver:
        driver.pipe("clicks", [["ann", 0, 1], ["bob", 0, 2]])
        driver.advance_time(8_000)
        driver.pipe("clicks", [["ann", 0, 3]])  # 9 s: within 10 s of 1 s, same session
        driver.advance_time(2_500)  # 11.5 s: bob's session (1 s .. 11 s) closes
        assert [s[:4] for s in driver.output("sessions")] == [["bob", 1_000, 11_000, [2]]]
        driver.advance_time(10_000)
        assert [s[:4] for s in driver.output("sessions")[1:]] == [["ann", 1_000, 19_000, [1, 3]]]


def test_session_state_survives_a_restart_between_any_two_batches():
    config = WindowConfig.session(Duration.millis(10), key_fields=["user"],
                                  timestamp_field="ts", lag=Duration.millis(3))
    batches = [[tup("ann", 0, 1), tup("bob", 2, 2)], [tup("ann", 9, 3), tup("ann", 30, 4)],
               [tup("bob", 12, 5)], [tup("ann", 100, 6)]]

    def run(restart: bool) -> list[Any]:
        task, out, snap = WindowedTask("s", config, ["clicks:default"]), Collect(), None
        for now, batch in enumerate(batches):
            if restart:
                task = WindowedTask("s", config, ["clicks:default"])
                task.restore(snap)
            task.process(batch, now, out)
            snap = pickle.loads(pickle.dumps(task.snapshot()))
        return [[t.values[2] for t in w] for w in out.windows]

    # bob@12 is late (below ann@30 minus the lag on the same stream); bob's session ends first
    assert run(restart=True) == run(restart=False) == [[2], [1, 3], [4]]


def test_key_fields_come_from_the_fields_grouping_or_are_explicit():
    class Tagged:
        def __init__(self, fields: Any) -> None:
            self.fields = fields

    cfg = WindowConfig.session(Duration.seconds(1))
    assert bind_session_keys(cfg, [Tagged(Fields("user"))], "s").session_key_fields == ("user",)
    assert bind_session_keys(cfg, [Tagged(None)], "s").session_key_fields == ()
    with pytest.raises(ConfigError, match="key_fields"):
        bind_session_keys(cfg, [Tagged(Fields("user")), Tagged(None)], "s")
    explicit = WindowConfig.session(Duration.seconds(1), key_fields=["page"])
    assert bind_session_keys(explicit, [Tagged(Fields("user"))], "s") is explicit


def test_session_options_are_validated():
    bolt = BaseWindowedBolt()
    with pytest.raises(ConfigError, match="session gap"):
        bolt.with_session_window(5)
    with pytest.raises(ConfigError, match="list of field names"):
        bolt.with_session_window(Duration.seconds(1), key_fields="user")
    with pytest.raises(ConfigError, match="not supported"):
        _ = bolt.with_session_window(Duration.seconds(1)).with_persistence().window_config
    # a later with_tumbling_window replaces the session window
    cfg = bolt.with_tumbling_window(Duration.seconds(5)).window_config
    assert not cfg.is_session and cfg.window_length == Duration.seconds(5)


def test_windowed_aggregate_sessions_without_a_timestamp_field_are_in_processing_time():
    agg = WindowedAggregate(key=["user"], n=Agg.count()).with_session_window(Duration.seconds(5))
    spec = agg.spec()
    assert spec.processing_time and spec.ts_field == "" and spec.lag_ms == 0
    extracted = (WindowedAggregate(key=["user"], n=Agg.count())
                 .with_session_window(Duration.seconds(5)).with_timestamp_extractor(lambda t: 0))
    with pytest.raises(ConfigError, match="needs event time"):
        extracted.spec()


def test_a_fired_session_is_kept_while_a_tuple_could_still_bridge_to_it():
    # gap 10, max 20: [6] fired (end 16); [25] is open; at watermark 35 a tuple at 15 would
    # join [25] (its session [15, 25] ends at 35) but also touch the fired [6]: late
    m = SessionWindowManager(WindowConfig.session(Duration.millis(10), Duration.millis(20),
                                                  timestamp_field="ts"))
    assert m.add("a", 6)
    assert [w.get() for w in m.on_watermark(17)] == [["a"]]
    assert m.add("b", 25)
    assert m.on_watermark(35) == []
    assert not m.add("bridge", 15)
    assert m.add("joins", 16 + 1)  # past the fired session's end: joins [25]
    assert [w.get() for w in m.on_watermark(100)] == [["joins", "b"]]
