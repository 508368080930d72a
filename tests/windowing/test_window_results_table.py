"""Closed windows as Arrow columns (``AggregateWindows.results_table``) equal the tuples.

The commit phase hands a sink with ``accepts_table`` the closed windows of a built-in
windowed aggregate as columns; they must be exactly ``results()`` (values, order, types),
and aggregates computed per window (mean, count_distinct, top_k) give None (tuples then).
"""

from __future__ import annotations

import pickle
import random
import tempfile

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._spark.windowed import WindowCommit
from kstorm.windowing.aggregate import Agg, AggregateSpec, merge, partials

SCHEMA = pa.schema([("ts", pa.int64()), ("key", pa.string()), ("region", pa.string()),
                    ("num", pa.int64())])


def payload(rows: list[tuple[int, str, str, int]], spec: AggregateSpec) -> bytes:
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows],
                                 schema=SCHEMA)
    merged = merge([partials(table, spec)], spec)
    latest = {"s": max(r[0] for r in rows)}
    return pickle.dumps({"partials": merged, "latest": latest, "late": 0})


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=1, max_value=6))
def test_columns_equal_the_tuples(seed: int, batches: int) -> None:
    rng = random.Random(seed)
    aggs = (("n", Agg.count()), ("total", Agg.sum("num")), ("low", Agg.min("num")),
            ("high", Agg.max("num")))
    spec = AggregateSpec(("key", "region"), "ts", 1000, 1000, 0, aggs)
    names = ["key", "region", "window_start", "window_end", "n", "total", "low", "high"]
    with tempfile.TemporaryDirectory(prefix="kstorm-wrt-") as checkpoint:
        assert_columns_equal_tuples(spec, CheckpointLayout(checkpoint), rng, batches, names)


def assert_columns_equal_tuples(spec: AggregateSpec, layout: CheckpointLayout,
                                rng: random.Random, batches: int, names: list[str]) -> None:
    driver = WindowCommit("agg", spec, layout)
    ts, seen = 0, 0
    for batch_id in range(batches):
        rows = []
        for _ in range(rng.randint(1, 60)):
            ts += rng.randint(0, 300)
            rows.append((ts, rng.choice("abc"), rng.choice(["eu", "us"]),
                         rng.randint(-50, 50)))
        closed, windows = driver.commit_closed(batch_id, [payload(rows, spec)])
        table = windows.results_table(closed, names)
        assert table is not None
        assert table.column_names == names
        assert [list(r.values()) for r in table.to_pylist()] == windows.results(closed)
        assert table.schema.field("window_start").type == pa.int64()
        seen += closed.num_rows
        driver.persist(batch_id, windows)
    assert seen > 0 or ts < 2000


def test_per_window_aggregates_have_no_columns() -> None:
    for agg in (Agg.mean("num"), Agg.count_distinct("region"), Agg.top_k("region", 2)):
        spec = AggregateSpec(("key",), "ts", 1000, 1000, 0, (("x", agg),))
        with tempfile.TemporaryDirectory(prefix="kstorm-wrt-") as checkpoint:
            driver = WindowCommit("agg", spec, CheckpointLayout(checkpoint))
            closed, windows = driver.commit_closed(0, [payload([(5, "a", "eu", 1),
                                                                (5000, "a", "eu", 2)], spec)])
        assert closed.num_rows == 1
        assert windows.results_table(closed, ["key", "window_start", "window_end", "x"]) is None
