"""``Agg.count_distinct`` and ``Agg.top_k`` against a plain-Python model of seed 004's windows.

The runtime's two halves run here without Spark: executor tasks (``late_mask`` then
``partials``, then ``merge`` per task, as ``WindowStageRunner`` does) and the driver's
``WindowCommit`` (fold, close, persist per batch id). Random streams are cut into random
batches and tasks. The model keeps, per stream, the latest timestamp (a tuple is late iff
``ts < latest - lag``; a stream's first tuple starts from the watermark windows were
last closed at, plus lag, so a stream that delivers late cannot reopen a fired window),
puts every on-time tuple in each window ``end - length < ts <= end``
and emits a window's pending tuples in the batch whose watermark (min over streams of
``latest - lag``, never going back) passes its end, sorted by (end, key).
"""

from __future__ import annotations

import json
import pickle
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm._kafka.clocks import NEW_STREAM, clock_of
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._spark.windowed import WindowCommit
from kstorm.errors import ConfigError
from kstorm.windowing import Duration, value_counts
from kstorm.windowing.aggregate import (
    Agg,
    AggregateSpec,
    WindowedAggregate,
    late_mask,
    merge,
    partials,
)

Row = tuple[str, int, str, str | None, int]  # stream, ts, key, item, num
SCHEMA = pa.schema([("stream", pa.string()), ("ts", pa.int64()), ("key", pa.string()),
                    ("item", pa.string()), ("num", pa.int64())])


def make_spec(length: int, slide: int, lag: int, k: int) -> AggregateSpec:
    aggs = {"n": Agg.count(), "total": Agg.sum("num"), "items": Agg.count_distinct("item"),
            "top": Agg.top_k("item", k), "nums": Agg.count_distinct("num"),
            "top_num": Agg.top_k("num", 2)}
    return AggregateSpec(("key",), "ts", length, slide, lag, tuple(aggs.items()))


def task_payload(rows: list[Row], spec: AggregateSpec, latest_before: dict[str, int]) -> bytes:
    """What one executor task sends the driver (mirrors ``WindowStageRunner``)."""
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows],
                                 schema=SCHEMA)
    latest = {s: c for s in {r[0] for r in rows} if (c := clock_of(latest_before, s)) is not None}
    streams = table.column("stream").to_numpy(zero_copy_only=False)
    late = late_mask(table.column("ts").to_numpy(), streams, latest, spec.lag_ms)
    on_time = table.filter(pa.array(~late))
    pieces = [partials(on_time, spec)] if on_time.num_rows else []
    merged = merge(pieces, spec) if pieces else partials(table.slice(0, 0), spec)
    return pickle.dumps({"partials": merged, "latest": latest, "late": int(late.sum())})


def run(batches: list[list[list[Row]]], spec: AggregateSpec, state_dir: Path,
        restart_after: int | None = None) -> tuple[list[tuple[int, list[Any]]], int]:
    """Run batches (each a list of tasks' rows) through executors and the driver.

    ``restart_after``: after that batch, drop the driver's directory and continue from the
    snapshot the sink would have stored (the checkpoint-loss path).
    """
    driver = WindowCommit("agg", spec, CheckpointLayout(state_dir / "0"))
    out: list[tuple[int, list[Any]]] = []
    late = 0
    latest: dict[str, int] = {}
    for batch_id, tasks in enumerate(batches):
        payloads = [task_payload(rows, spec, latest) for rows in tasks if rows]
        results, windows = driver.commit(batch_id, payloads)
        driver.persist(batch_id, windows)
        latest, late = dict(windows.latest), windows.late
        if windows.new_stream_clock() is not None:  # as the clocks file records it
            latest[NEW_STREAM] = windows.new_stream_clock()
        out.extend((batch_id, r) for r in results)
        if batch_id == restart_after:
            snapshot = windows.snapshot()
            driver = WindowCommit("agg", spec, CheckpointLayout(state_dir / f"{batch_id + 1}"))
            driver.seed(snapshot)
    return out, late


def model(batches: list[list[list[Row]]], length: int, slide: int, lag: int, k: int
          ) -> tuple[list[tuple[int, list[Any]]], int]:
    latest: dict[str, int] = {}
    pending: dict[tuple[int, str], list[tuple[str | None, int]]] = defaultdict(list)
    out, late = [], 0
    closed = None  # the watermark windows were last closed at: it never goes back
    for batch_id, tasks in enumerate(batches):
        arrivals = [r for rows in tasks for r in rows]  # per stream, in order
        for stream, ts, key, item, num in arrivals:
            if stream not in latest and closed is not None:
                latest[stream] = closed + lag  # a new stream cannot reopen fired windows
            if stream in latest and ts < latest[stream] - lag:
                late += 1
                continue
            latest[stream] = max(ts, latest.get(stream, ts))
            end = -(-ts // slide) * slide
            while end - length < ts:
                pending[(end, key)].append((item, num))
                end += slide
        if not latest:
            continue
        watermark = min(latest.values()) - lag
        watermark = watermark if closed is None else max(watermark, closed)
        closed = watermark
        for end, key in sorted(w for w in pending if w[0] < watermark):
            rows = pending.pop((end, key))
            items = Counter(i for i, _ in rows if i is not None)
            nums = Counter(n for _, n in rows)
            out.append((batch_id, [key, end - length, end, len(rows), sum(n for _, n in rows),
                                   len(items), top(items, k), len(nums), top(nums, 2)]))
    return out, late


def top(counter: Counter, k: int) -> list[list[Any]]:
    return [[v, c] for v, c in sorted(counter.items(), key=lambda vc: (-vc[1], vc[0]))[:k]]


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[list[list[Row]]], int, int, int, int]:
    slide = draw(st.sampled_from([5, 10]))
    length = slide * draw(st.integers(1, 3))
    lag = draw(st.sampled_from([0, 3, 12]))
    k = draw(st.integers(1, 4))
    n_streams = draw(st.integers(1, 3))
    streams: list[list[Row]] = []
    for s in range(n_streams):
        base = draw(st.integers(0, 30))
        steps = draw(st.lists(st.integers(-15, 20), max_size=40))
        ts, rows = base, []
        for step in steps:
            ts = max(0, ts + step)
            rows.append((f"t/{s}", ts, draw(st.sampled_from("ab")),
                         draw(st.sampled_from(["pen", "cup", "ink", None])),
                         draw(st.integers(0, 3))))
        streams.append(rows)
    n_batches = draw(st.integers(1, 4))
    batches: list[list[list[Row]]] = [[] for _ in range(n_batches)]
    for rows in streams:  # each stream: cut in order across batches, one task per batch
        cuts = sorted(draw(st.lists(st.integers(0, len(rows)), min_size=n_batches - 1,
                                    max_size=n_batches - 1)))
        for b, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(rows)], strict=True)):
            batches[b].append(rows[lo:hi])
    for tasks in batches:  # some tasks read several streams
        if len(tasks) > 1 and draw(st.booleans()):
            tasks[:2] = [tasks[0] + tasks[1]]
    return batches, length, slide, lag, k


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workloads(), st.data())
def test_results_match_the_model(tmp_path_factory: Any, work: Any, data: st.DataObject) -> None:
    batches, length, slide, lag, k = work
    spec = make_spec(length, slide, lag, k)
    restart = data.draw(st.none() | st.integers(0, len(batches) - 1))
    got, late = run(batches, spec, tmp_path_factory.mktemp("w"), restart_after=restart)
    assert (got, late) == model(batches, length, slide, lag, k)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workloads())
def test_windows_close_exactly_when_a_count_would(tmp_path_factory: Any, work: Any) -> None:
    # same late tuples, same windows, same batches as the existing aggregates alone
    batches, length, slide, lag, k = work
    counted, late = run(batches, make_spec(length, slide, lag, k), tmp_path_factory.mktemp("a"))
    plain = AggregateSpec(("key",), "ts", length, slide, lag,
                          (("n", Agg.count()), ("total", Agg.sum("num"))))
    alone, late_alone = run(batches, plain, tmp_path_factory.mktemp("b"))
    assert [(b, r[:5]) for b, r in counted] == alone
    assert late == late_alone


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workloads())
def test_without_key_one_counter_per_window(tmp_path_factory: Any, work: Any) -> None:
    batches, length, slide, lag, k = work
    spec = make_spec(length, slide, lag, k)
    spec = AggregateSpec((), "ts", length, slide, lag, spec.aggregates)
    got, late = run(batches, spec, tmp_path_factory.mktemp("g"))
    one_key = [[[(s, ts, "-", item, num) for s, ts, _, item, num in rows] for rows in tasks]
               for tasks in batches]
    expected, expected_late = model(one_key, length, slide, lag, k)
    assert (got, late) == ([(b, r[1:]) for b, r in expected], expected_late)


def test_counters_over_many_high_cardinality_group_columns() -> None:
    # 5 group columns of ~6k distinct values each: rank codes are renumbered to fit int64
    rng = random.Random(5)
    rows = [[rng.randrange(10_000) for _ in range(5)] + [rng.choice("xyz")] for _ in range(10_000)]
    rows += rows[:50]  # some groups twice
    names = ["a", "b", "c", "d", "e", "v"]
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
    counter = value_counts.count_values(table, names[:5], "v")
    expected = Counter(tuple(r) for r in rows)
    groups = sorted({tuple(r[:5]) for r in rows})
    assert [tuple(counter.column(n)[i].as_py() for n in names[:5])
            for i in range(counter.num_rows)] == groups
    assert value_counts.distinct_counts(counter, "v") == [
        len({r[5] for r in rows if tuple(r[:5]) == g}) for g in groups]
    assert sum(value_counts.distinct_counts(counter, "v")) == len(expected)


def test_replayed_batch_gives_the_same_windows(tmp_path: Path) -> None:
    spec = make_spec(10, 10, 0, 2)
    rows = [("t/0", ts, "a", item, 1) for ts, item in
            [(1, "pen"), (2, "cup"), (3, "pen"), (15, "ink"), (25, None)]]
    driver = WindowCommit("agg", spec, CheckpointLayout(tmp_path))
    first, windows = driver.commit(0, [task_payload(rows[:4], spec, {})])
    driver.persist(0, windows)
    again, _ = driver.commit(1, [task_payload(rows[4:], spec, windows.latest)])
    replay, _ = driver.commit(1, [task_payload(rows[4:], spec, windows.latest)])
    assert first == [["a", 0, 10, 3, 3, 2, [["pen", 2], ["cup", 1]], 1, [[1, 3]]]]
    assert again == replay == [["a", 10, 20, 1, 1, 1, [["ink", 1]], 1, [[1, 1]]]]


def test_state_is_canonical_and_json_results(tmp_path: Path) -> None:
    spec = make_spec(10, 10, 100, 3)
    rows = [("t/0", ts, key, item, ts % 3) for ts, key, item in
            [(1, "a", "pen"), (2, "b", "cup"), (3, "a", "ink"), (4, "a", "pen"), (5, "b", None)]]
    one = WindowCommit("agg", spec, CheckpointLayout(tmp_path / "one"))
    two = WindowCommit("agg", spec, CheckpointLayout(tmp_path / "two"))
    other = [("t/1", 7, "a", "mug", 2)]
    _, w1 = one.commit(0, [task_payload(rows, spec, {}), task_payload(other, spec, {})])
    _, w2 = two.commit(0, [task_payload(other, spec, {}), task_payload(rows[3:], spec, {}),
                           task_payload(rows[:3], spec, {})])
    # the same open windows, whatever the split into tasks: the same bytes to store
    assert w1.snapshot() == w2.snapshot()
    restored = WindowCommit("agg", spec, CheckpointLayout(tmp_path / "three"))
    restored.seed(w1.snapshot())
    final = [("t/0", 500, "a", "cup", 0), ("t/1", 500, "a", "cup", 0)]
    results, _ = restored.commit(0, [task_payload(final, spec, w1.latest)])
    # a: ts 1, 3, 4, 7 (num 1, 0, 1, 2); b: ts 2, 5 (num 2, 2; one null item)
    assert results == [["a", 0, 10, 4, 4, 3, [["pen", 2], ["ink", 1], ["mug", 1]], 3,
                        [[1, 2], [0, 1]]],  # (top_k("num", 2): 2 of the 3 values)
                       ["b", 0, 10, 2, 4, 1, [["cup", 1]], 1, [[2, 2]]]]
    assert json.loads(json.dumps(results)) == results


def test_declared_through_windowed_aggregate() -> None:
    agg = (WindowedAggregate(key="shop", visitors=Agg.count_distinct("user"),
                             best=Agg.top_k("item", 3))
           .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts"))
    spec = agg.spec()
    assert spec.counted_fields() == ["user", "item"]
    assert [name for name, _ in spec.aggregates] == ["visitors", "best"]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Agg.top_k("item", 0), "k must be an int >= 1"),
    (lambda: Agg.top_k("item", 2.5), "k must be an int >= 1"),
    (lambda: Agg.top_k("item", True), "k must be an int >= 1"),
    (lambda: Agg.top_k("item", None), "k must be an int >= 1"),
    (lambda: Agg.count_distinct(3), "must be a non-empty field name"),
    (lambda: Agg.count_distinct(""), "must be a non-empty field name"),
    (lambda: Agg.top_k(["item"], 2), "must be a non-empty field name"),
    (lambda: Agg.count_distinct("__end"), "not starting with '__'"),
    (lambda: Agg.count_distinct(None), "takes a field"),
    (lambda: Agg("count_distinct", "item", 3), "takes no k"),
])
def test_invalid_declarations_say_what_is_wrong(make: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()
