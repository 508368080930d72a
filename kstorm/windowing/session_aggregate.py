"""Session windows of a ``WindowedAggregate``, vectorized (pure logic, Arrow and numpy).

The rules are the session windowed bolt's (:mod:`kstorm.windowing.sessions`), so both paths
give the same sessions for the same on-time tuples:

- Per key, the tuples sorted by timestamp are cut wherever two neighbours are more than
  ``gap`` apart (a tuple within ``gap`` of two sessions merges them). With ``max_duration``
  M each such run is cut greedily from its first tuple ``f``: a session holds the tuples up
  to ``f + M``, the next one starts at the first tuple after that.
- A session's end is ``min(last + gap, first + M)``; it closes once the watermark is above
  its end, and is emitted once with ``session_start`` (its first timestamp) and
  ``session_end`` (that end), as ``get_start_timestamp``/``get_end_timestamp`` of the bolt's
  session window.

Two halves, as for fixed windows:

1. :func:`session_partials` (executors, per batch of on-time rows): rows sorted by
   (key, ts) (``np.lexsort`` order through Arrow's sort), cut into pieces with ``np.diff``
   and a cumulative sum, one partial row per piece: ``[*key, __first, __last, partial
   columns..., counters...]``. Without ``max_duration`` a piece is a gap-connected run of
   the batch (any later merge only joins whole runs). With it, a piece is one timestamp:
   where the greedy cuts fall depends on the run's first tuple, which a later out-of-order
   tuple can move, so the open state keeps one row per (key, timestamp) until it closes.
2. :func:`fold_sessions` (commit phase): the open rows and the batch's partials sorted by
   (key, first); a row starts a new run when its first timestamp is more than ``gap``
   above the running maximum of ``__last`` of its key (a segmented cumulative maximum);
   runs (or their greedy chunks) become sessions; those ending below the watermark close.

Everything is a vector operation but the greedy cuts of runs longer than ``max_duration``
(one step per session there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstorm.windowing.value_counts import (
    count_values,
    counts_column,
    merge_counters,
    sort_groups,
    values_column,
)

END = "__end"      # a window's or a closed session's end (aggregate.py's END)
FIRST = "__first"  # a session's (or partial's) first timestamp
LAST = "__last"    # its last timestamp
_SID = "__sid"     # a piece's number while grouping
#: How partial columns of the same group combine (Arrow hash aggregates).
MERGE_HOW = {"count_all": "sum", "sum": "sum", "min": "min", "max": "max"}


def key_starts(table: pa.Table, key: Sequence[str]) -> np.ndarray:
    """For rows sorted by ``key``: True where a row's key differs from the row before it.

    Nulls equal nulls (Arrow's grouping does the same).

    Example:
        >>> key_starts(pa.table({"k": ["a", "a", None, None, "b"]}), ["k"]).tolist()
        [True, False, True, False, True]
    """
    n = table.num_rows
    out = np.zeros(n, dtype=bool)
    if n:
        out[0] = True
    if n < 2:
        return out
    for name in key:
        col = table.column(name).combine_chunks()
        after, before = col.slice(1), col.slice(0, n - 1)
        differ = pc.fill_null(pc.not_equal(after, before), False)
        one_null = pc.xor(pc.is_null(after), pc.is_null(before))
        out[1:] |= pc.or_(differ, one_null).to_numpy(zero_copy_only=False)
    return out


def running_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Cumulative maximum of ``values`` restarting at each True of ``starts``.

    Each value is replaced by its rank (among all values) plus its segment's number times
    the number of ranks, so one ``np.maximum.accumulate`` never carries a maximum across a
    segment start.

    Example:
        >>> running_max(np.array([3, 1, 5, 2, 0]), np.array([1, 0, 0, 1, 0], bool)).tolist()
        [3, 3, 5, 2, 2]
    """
    if len(values) == 0:
        return values
    segment = np.cumsum(starts) - 1
    uniq, rank = np.unique(values, return_inverse=True)
    base = segment * len(uniq)
    return uniq[np.maximum.accumulate(base + rank) - base]


def session_partials(table: pa.Table, spec: Any) -> pa.Table:
    """Reduce on-time rows to partials ``[*key, __first, __last, ...]`` (module docstring).

    ``spec`` is an :class:`~kstorm.windowing.aggregate.AggregateSpec` with ``gap_ms`` set.
    In processing time every row is at 0, the batch's time the commit phase stamps on.
    """
    ts = (table.column(spec.ts_field).cast(pa.int64()) if not spec.processing_time
          else pa.array(np.zeros(table.num_rows, dtype=np.int64)))
    needed = list(dict.fromkeys([*spec.key, *(f for _, f, _ in spec.partial_columns() if f),
                                 *spec.counted_fields()]))
    rows = table.select(needed).append_column("__ts", ts)
    order = pc.sort_indices(rows, sort_keys=[*((k, "ascending") for k in spec.key),
                                             ("__ts", "ascending")])
    rows = rows.take(order)
    stamps = rows.column("__ts").to_numpy(zero_copy_only=False)
    cut = key_starts(rows, spec.key)
    steps = np.diff(stamps)
    cut[1:] |= (steps != 0) if spec.max_ms is not None else (steps > spec.gap_ms)
    rows = rows.append_column(_SID, pa.array(np.cumsum(cut) - 1, pa.int64()))
    cols = spec.partial_columns()
    aggs = [([], "count_all") if how == "count_all" else (f, how) for _, f, how in cols]
    grouped = rows.group_by([*spec.key, _SID], use_threads=False).aggregate(
        [*aggs, ("__ts", "min"), ("__ts", "max")])
    names = {("count_all" if how == "count_all" else f"{f}_{how}"): c for c, f, how in cols}
    names.update({"__ts_min": FIRST, "__ts_max": LAST})
    grouped = grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
    counters = [count_values(rows, [*spec.key, _SID], f) for f in spec.counted_fields()]
    return _finish(grouped, spec, counters)


def _finish(grouped: pa.Table, spec: Any, counters: list[pa.Table]) -> pa.Table:
    """Groups in (key, piece) order, counters appended, in the partials' column order."""
    out = sort_groups(grouped, [*spec.key, _SID])
    for field, counter in zip(spec.counted_fields(), counters, strict=True):
        for name in (values_column(field), counts_column(field)):
            out = out.append_column(name, counter.column(name))
    scalars = [c for c, _, _ in spec.partial_columns()]
    counted = [n for f in spec.counted_fields() for n in (values_column(f), counts_column(f))]
    return out.select([*spec.key, FIRST, LAST, *scalars, *counted])


def merge_pieces(rows: pa.Table, piece: np.ndarray, spec: Any) -> pa.Table:
    """Combine the partial rows of ``rows`` with the same ``piece`` number into one."""
    rows = rows.append_column(_SID, pa.array(piece, pa.int64()))
    cols = spec.partial_columns()
    grouped = rows.group_by([*spec.key, _SID], use_threads=False).aggregate(
        [*((c, MERGE_HOW[how]) for c, _, how in cols), (FIRST, "min"), (LAST, "max")])
    names = {f"{c}_{MERGE_HOW[how]}": c for c, _, how in cols}
    names.update({f"{FIRST}_min": FIRST, f"{LAST}_max": LAST})
    grouped = grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
    counters = [merge_counters([rows], [*spec.key, _SID], f) for f in spec.counted_fields()]
    return _finish(grouped, spec, counters)


def _greedy_chunks(first: np.ndarray, run_start: np.ndarray, top: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per row its chunk number, and each chunk's limit (its first timestamp + ``top``).

    Runs spanning at most ``top`` are one chunk each (vectorized); longer runs are cut
    greedily, one step per chunk.
    """
    n = len(first)
    bounds = np.r_[np.flatnonzero(run_start), n]
    chunk_of = np.empty(n, dtype=np.int64)
    limits: list[int] = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        lo = a
        while lo < b:
            limit = int(first[lo]) + top
            hi = b if first[b - 1] <= limit else a + int(
                np.searchsorted(first[a:b], limit, side="right"))
            chunk_of[lo:hi] = len(limits)
            limits.append(limit)
            lo = hi
    return chunk_of, np.array(limits, dtype=np.int64)


def fold_sessions(tables: Sequence[pa.Table], spec: Any, watermark: int | None
                  ) -> tuple[pa.Table | None, pa.Table]:
    """Merge open sessions and new partials; close those ending below ``watermark``.

    Returns:
        (the open rows to keep, or None; the closed sessions ``[*key, __first, __last,
        __end, ...]`` sorted by (end, first, key)).
    """
    tables = [t for t in tables if t is not None and t.num_rows]
    if not tables:
        return None, pa.table({})
    rows = pa.concat_tables(tables, promote_options="permissive")
    order = pc.sort_indices(rows, sort_keys=[*((k, "ascending") for k in spec.key),
                                             (FIRST, "ascending")])
    rows = rows.take(order)
    new_key = key_starts(rows, spec.key)
    first = rows.column(FIRST).to_numpy(zero_copy_only=False)
    reach = running_max(rows.column(LAST).to_numpy(zero_copy_only=False), new_key)
    run_start = new_key.copy()
    run_start[1:] |= first[1:] > reach[:-1] + spec.gap_ms
    if spec.max_ms is None:
        sessions = merge_pieces(rows, np.cumsum(run_start) - 1, spec)
        ends = pc.add(sessions.column(LAST), pa.scalar(spec.gap_ms, pa.int64()))
        sessions = sessions.append_column(END, ends)
        closed_mask = (pc.less(ends, pa.scalar(watermark, pa.int64())) if watermark is not None
                       else pa.array(np.zeros(sessions.num_rows, dtype=bool)))
        still_open = sessions.filter(pc.invert(closed_mask)).drop_columns([END])
        closed = sessions.filter(closed_mask)
    else:
        # one row per (key, timestamp) kept open: the greedy cuts depend on a run's first
        same_ts = new_key.copy()
        same_ts[1:] |= first[1:] != first[:-1]
        if not same_ts.all():
            rows = merge_pieces(rows, np.cumsum(same_ts) - 1, spec)
            run_start, first = run_start[same_ts], first[same_ts]
        chunk_of, limits = _greedy_chunks(first, run_start, spec.max_ms)
        last_of = np.maximum.reduceat(rows.column(LAST).to_numpy(zero_copy_only=False),
                                      np.flatnonzero(np.r_[True, np.diff(chunk_of) != 0])
                                      ) if len(chunk_of) else limits
        chunk_end = np.minimum(last_of + spec.gap_ms, limits)
        row_closed = (chunk_end[chunk_of] < watermark if watermark is not None
                      else np.zeros(rows.num_rows, dtype=bool))
        still_open = rows.filter(pa.array(~row_closed))
        if row_closed.any():
            closed = merge_pieces(rows.filter(pa.array(row_closed)), chunk_of[row_closed], spec)
            closed_chunks = np.unique(chunk_of[row_closed])  # (merge_pieces keeps this order
            closed = closed.append_column(  # within a key, and chunks never span keys)
                END, pa.array(chunk_end[closed_chunks], pa.int64()))
        else:
            closed = pa.table({})
    if closed.num_rows:
        closed = closed.sort_by([(END, "ascending"), (FIRST, "ascending"),
                                 *((k, "ascending") for k in spec.key)])
    return (still_open if still_open.num_rows else None), closed
