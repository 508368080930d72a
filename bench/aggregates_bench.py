"""Windowed-aggregate partials: what count_distinct and top_k cost next to count + sum.

Run: ``python -m bench.aggregates_bench [--rows 1000000]``  (~1 min idle; no Spark, no broker)

The rows look like the standard benchmark's events plus two counted fields:
``{key: k0..k999, ts: ~100 s of epoch ms, value: int, user: u0..u9999, item: 50 items}``,
tumbling 10 s windows. For each aggregate set it times, one thread, best of ``REPEATS``:

- ``partials``: what an executor task does with its rows (``aggregate.partials``), on all rows;
- ``merge x4``: the driver folding four tasks' partials (``aggregate.merge``);
- ``results``: turning every window into output tuples (``AggregateWindows.results``);

and, for scale, a plain Python loop building the same count-distinct sets per (key, window).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from kstorm.windowing.aggregate import (  # noqa: E402
    Agg,
    AggregateSpec,
    AggregateWindows,
    merge,
    partials,
)

REPEATS = 3
WINDOW_MS = 10_000
SETS: dict[str, dict[str, Agg]] = {
    "count+sum (standard)": {"count": Agg.count(), "total": Agg.sum("value")},
    "+ count_distinct(user)": {"count": Agg.count(), "total": Agg.sum("value"),
                               "users": Agg.count_distinct("user")},
    "+ top_k(item, 3)": {"count": Agg.count(), "total": Agg.sum("value"),
                         "top": Agg.top_k("item", 3)},
    "+ both": {"count": Agg.count(), "total": Agg.sum("value"),
               "users": Agg.count_distinct("user"), "top": Agg.top_k("item", 3)},
}


def rows(n: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ts = 1_700_000_000_000 + np.sort(rng.integers(0, 100_000, n))
    return pa.table({
        "key": pa.array(np.char.add("k", rng.integers(0, 1000, n).astype(str))),
        "ts": pa.array(ts, pa.int64()),
        "value": pa.array(rng.integers(0, 1000, n), pa.int64()),
        "user": pa.array(np.char.add("u", rng.integers(0, 10_000, n).astype(str))),
        "item": pa.array(np.char.add("i", rng.zipf(1.5, n).clip(0, 49).astype(str))),
    })


def best(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def python_sets(table: pa.Table) -> int:
    sets: dict[tuple[str, int], set[str]] = defaultdict(set)
    for key, ts, user in zip(table.column("key").to_pylist(), table.column("ts").to_pylist(),
                             table.column("user").to_pylist(), strict=True):
        sets[(key, -(-ts // WINDOW_MS) * WINDOW_MS)].add(user)
    return len(sets)


def main() -> None:
    """Print one line per aggregate set."""
    parser = argparse.ArgumentParser(prog="python -m bench.aggregates_bench")
    parser.add_argument("--rows", type=int, default=1_000_000)
    n = parser.parse_args().rows
    table = rows(n)
    quarters = [table.slice(i * n // 4, n // 4) for i in range(4)]
    print(f"{n:,} rows, {REPEATS} repeats (best), one thread")
    print(f"{'aggregates':26} {'partials':>10} {'M rows/s':>9} {'merge x4':>9} {'results':>9}"
          f" {'windows':>8}")
    for label, aggs in SETS.items():
        spec = AggregateSpec(("key",), "ts", WINDOW_MS, WINDOW_MS, 5_000, tuple(aggs.items()))
        t_part = best(lambda spec=spec: partials(table, spec))
        parts = [partials(q, spec) for q in quarters]
        t_merge = best(lambda spec=spec, parts=parts: merge(parts, spec))
        merged = merge(parts, spec)
        windows = AggregateWindows(spec)
        t_res = best(lambda windows=windows, merged=merged: windows.results(merged))
        print(f"{label:26} {t_part:9.3f}s {n / t_part / 1e6:9.2f} {t_merge:8.3f}s "
              f"{t_res:8.3f}s {merged.num_rows:8,}")
    t_py = best(lambda: python_sets(table))
    print(f"{'python loop: dict of sets':26} {t_py:9.3f}s {n / t_py / 1e6:9.2f}")


if __name__ == "__main__":
    main()
