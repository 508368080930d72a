"""Per-group value counters in Arrow, behind ``Agg.count_distinct`` and ``Agg.top_k``.

A counter of ``field`` holds, for each group (key fields and window end), every distinct value
of ``field`` with its number of occurrences, as two aligned list columns::

    key  __end  __values__item    __counts__item
    "a"  10000  ["pen", "cup"]    [3, 1]

Building one from rows, merging several and reading results are Arrow and numpy vector
operations (dictionary encoding, one sort of int64 codes, list flattening): no Python runs
per tuple. Counters are exact (they keep every distinct
value of an open window) and canonical: groups sorted by the group columns, values sorted
within a group, so equal windows give equal tables (and equal snapshot bytes) however the
input was split into batches and tasks. Null values are kept in the counter (a group whose
values are all null still has a row) and ignored by the results, like SQL's
``COUNT(DISTINCT ...)``.

Example:
    >>> import pyarrow as pa
    >>> rows = pa.table({"k": ["a", "a", "b"], "item": ["pen", "pen", "cup"]})
    >>> c = count_values(rows, ["k"], "item")
    >>> distinct_counts(c, "item"), top_values(c, "item", 1)
    ([1, 1], [[['pen', 2]], [['cup', 1]]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_VALUE = "__v"
_COUNT = "__c"


def values_column(field: str) -> str:
    """Name of the list column holding the distinct values of ``field``."""
    return f"__values__{field}"


def counts_column(field: str) -> str:
    """Name of the list column holding how often each value of ``field`` occurred."""
    return f"__counts__{field}"


def counter_fields(field: str, value_type: pa.DataType) -> list[pa.Field]:
    """The two columns of a counter of ``field`` (for empty tables)."""
    return [pa.field(values_column(field), pa.list_(value_type)),
            pa.field(counts_column(field), pa.list_(pa.int64()))]


def count_values(rows: pa.Table, group: Sequence[str], field: str) -> pa.Table:
    """One row per group of ``rows``: the group columns and the counter of ``field``."""
    return _count(rows.select(list(group)), rows.column(field), None, field)


def merge_counters(tables: Sequence[pa.Table], group: Sequence[str], field: str) -> pa.Table:
    """Add up the counters of ``field`` of the same group across ``tables``."""
    pieces = [_explode(t, group, field) for t in tables]
    long = pa.concat_tables(pieces, promote_options="permissive")
    return _count(long.select(list(group)), long.column(_VALUE), long.column(_COUNT), field)


def _explode(table: pa.Table, group: Sequence[str], field: str) -> pa.Table:
    values = table.column(values_column(field))
    parents = pc.list_parent_indices(values)
    out = table.select(list(group)).take(parents)
    out = out.append_column(_VALUE, pc.list_flatten(values))
    return out.append_column(_COUNT, pc.list_flatten(table.column(counts_column(field))))


def _count(groups: pa.Table, values: pa.ChunkedArray, weights: pa.ChunkedArray | None,
           field: str) -> pa.Table:
    """Count ``values`` per group (adding ``weights`` if given), in canonical order.

    Each row gets one int64 code ordering it by (group columns, value) -- the rank of each
    column's value among its distinct values, combined in mixed radix -- so one numpy sort
    both groups the rows and puts groups and values in sorted order (nulls last).
    """
    code, radix = _codes([*groups.columns, values])
    order = np.argsort(code)
    ordered = code[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(code) else order
    first = order[starts]  # a row of each (group, value): any one, they hold equal values
    if weights is None:
        counts = np.diff(np.r_[starts, len(code)])
    else:
        w = pc.fill_null(weights, 0).to_numpy().astype(np.int64)
        counts = np.add.reduceat(w[order], starts) if len(code) else w
    group_of = ordered[starts] // radix
    bounds = np.flatnonzero(np.r_[True, group_of[1:] != group_of[:-1]]) if len(starts) else starts
    offsets = pa.array(np.r_[bounds, len(starts)], pa.int32())
    out = groups.take(pa.array(first[bounds]))
    value_list = pa.ListArray.from_arrays(offsets, values.take(pa.array(first)).combine_chunks())
    count_list = pa.ListArray.from_arrays(offsets, pa.array(counts, pa.int64()))
    out = out.append_column(values_column(field), value_list)
    return out.append_column(counts_column(field), count_list)


def _codes(columns: Sequence[pa.ChunkedArray]) -> tuple[np.ndarray, int]:
    """Row codes ordered like the rows' (column ranks...); and the last column's radix."""
    code = np.zeros(len(columns[0]), dtype=np.int64)
    span = 1  # codes are in [0, span)
    radix = 1
    for column in columns:
        rank, radix = _ranks(column)
        if span * radix >= 2**62:  # renumber the codes densely first (order kept)
            uniq, code = np.unique(code, return_inverse=True)
            span = len(uniq)
        code = code * radix + rank
        span *= radix
    return code, radix


def _ranks(column: pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Each row's rank among the column's distinct values in sort order (null: last)."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    dictionary = encoded.dictionary
    n = len(dictionary)
    rank = np.empty(n + 1, dtype=np.int64)
    rank[pc.array_sort_indices(dictionary).to_numpy()] = np.arange(n)
    rank[n] = n
    return rank[pc.fill_null(encoded.indices, n).to_numpy()], n + 1


def sort_groups(table: pa.Table, group: Sequence[str]) -> pa.Table:
    """``table`` in the row order of counters over the same groups (to append them)."""
    return table.sort_by([(c, "ascending") for c in group])


def _valid(table: pa.Table, field: str) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(parent row, value, count) of each non-null value in the counters of ``field``."""
    values = table.column(values_column(field)).combine_chunks()
    counts = table.column(counts_column(field)).combine_chunks()
    flat, flat_counts = pc.list_flatten(values), pc.list_flatten(counts)
    parents = pc.list_parent_indices(values)
    keep = pc.is_valid(flat)
    return (parents.filter(keep).to_numpy(zero_copy_only=False), flat.filter(keep),
            flat_counts.filter(keep))


def distinct_counts(table: pa.Table, field: str) -> list[int]:
    """Number of distinct non-null values of ``field`` in each row's counter."""
    parents, _, _ = _valid(table, field)
    return np.bincount(parents, minlength=table.num_rows).tolist()


def top_values(table: pa.Table, field: str, k: int) -> list[list[list[Any]]]:
    """The ``k`` most frequent non-null values of each row: ``[[value, count], ...]``.

    Sorted by count descending, then value ascending, so ties are broken the same way on
    every run.
    """
    parents, values, counts = _valid(table, field)
    long = pa.table({"p": parents, "c": counts, "v": values}).sort_by(
        [("p", "ascending"), ("c", "descending"), ("v", "ascending")])
    p = long.column("p").to_numpy()
    rank = np.arange(len(p)) - np.searchsorted(p, p, side="left")
    top = long.filter(pa.array(rank < k))
    bounds = np.searchsorted(top.column("p").to_numpy(), np.arange(table.num_rows + 1))
    pairs = [list(pair) for pair in zip(top.column("v").to_pylist(),
                                        top.column("c").to_pylist(), strict=True)]
    return [pairs[bounds[i]:bounds[i + 1]] for i in range(table.num_rows)]
