r"""A batch given as Arrow columns, turned into the commit script's chunks column by column.

The row path (``build_entries`` then ``_chunk``) costs ~10 us of Python per row: a tuple,
a dict, a key rendered, an ``Entry``, its value encoded, the JSON array. A built-in
windowed aggregate hands its closed windows to the sink as Arrow columns
(``SinkBatch.table``); when the sink's key and value are plain enough, :func:`table_chunks`
builds the very same chunk text with Arrow compute kernels, a few per batch.

"The very same" is the rule: every case where the two paths could differ returns None and
the sink takes the row path (which also raises the row path's errors). Covered here: key
and hash-field templates of plain ``{field}`` names over integer and string columns; a value
that is a count (``merge="count"``), an integer or string field, or a record of integer and
string fields (``value={"count": "n", ...}``, JSON codec); Lua merges; keys unique in the
batch (the row path folds duplicates); no nulls; no character JSON escapes (``"``, ``\``,
control characters) in keys, fields or string values.

Tuples (a bolt's output) come as rows, often many per key (a running count per word):
:func:`fold_rows` folds them per key in Arrow first when the merge's fold ignores order
(``add``/``count``: a sum, ``max``, ``min``) and the values are integers, so the row path
then renders and checks one row per key instead of one per tuple. Its result is the row
path's: rows of different groups that render the same key are folded again there, which an
order-free fold allows.

Example:
    >>> import pyarrow as pa
    >>> t = pa.table({"w": ["a", "b"], "n": [2, 3]})
    >>> table_chunks(t, key="c:{w}", field=None, value="n", codec="json", size=10)
    ['["c:a","","1","2","c:b","","1","3"]']
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ._keys import RESERVED_PREFIX, KeyTemplate
from .merge import LuaMerge, Merge

_ESCAPED = r'[\x00-\x1f"\\]'  # what json.dumps escapes with ensure_ascii=False
_QUOTE = '\\"'  # a quote inside a JSON string of the chunk


def table_chunks(table: pa.Table, *, key: Any, field: Any, value: Any, codec: str,
                 size: int, numeric: bool = False) -> list[str] | None:
    """The commit script's chunks for ``table``'s rows, or None: take the row path.

    ``key``/``field``/``value`` are the sink's specs as given (template strings, a field
    name, a record mapping or None for a count); functions always take the row path.
    ``numeric``: the merge needs numbers (only a count or an integer field then).
    """
    if table.num_rows == 0:
        return []
    if numeric and value is not None and not (isinstance(value, str)
                                              and _is_integer(table, value)):
        return None
    keys = _render(table, key)
    if keys is None or _any(pc.starts_with(keys, RESERVED_PREFIX)):
        return None
    if field is None:
        fields: Any = pa.scalar("")
        unique = keys
    else:
        fields = _render(table, field)
        if fields is None:
            return None
        unique = pc.binary_join_element_wise(keys, fields, "\x00")
    if pc.count_distinct(unique).as_py() != table.num_rows:
        return None  # the row path folds rows that share a key
    values = _value_text(table, value, codec)
    if values is None:
        return None
    entries = pc.binary_join_element_wise('"', keys, '","', fields, '","1","', values, '"', "")
    texts = entries.to_pylist()
    return ["[" + ",".join(texts[at:at + size]) + "]" for at in range(0, len(texts), size)]


def _render(table: pa.Table, template: Any) -> pa.Array | pa.ChunkedArray | None:
    """A key template over plain ``{field}`` names, for every row; None if not that simple."""
    if not isinstance(template, str):
        return None
    parts: list[Any] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    for literal, name, spec, conversion in parsed:
        if literal:
            parts.append(literal)
        if name is None:
            continue
        if spec or conversion:
            return None
        column = _text_column(table, name)
        if column is None:
            return None
        parts.append(column)
    if not any(not isinstance(p, str) for p in parts):
        return None  # a constant key: one row at most, not worth a path of its own
    text = pc.binary_join_element_wise(*parts, "")
    if _any(pc.equal(pc.binary_length(text), 0)):
        return None
    return text


def _text_column(table: pa.Table, name: str) -> pa.ChunkedArray | None:
    """Column ``name`` as ``str()`` would print its values, for integers and strings only."""
    if name not in table.column_names:
        return None
    column = table.column(name)
    if column.null_count:
        return None
    if pa.types.is_integer(column.type):
        return pc.cast(column, pa.string())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        text = pc.cast(column, pa.string())
        return None if _any(pc.match_substring_regex(text, _ESCAPED)) else text
    return None


def _value_text(table: pa.Table, value: Any, codec: str) -> Any:
    """Each row's stored text as it appears inside the chunk's JSON array, or None."""
    if value is None:
        return pa.scalar("1")  # merge="count": one per row
    if isinstance(value, str):
        column = _text_column(table, value)
        if column is None:
            return None
        if _is_integer(table, value):
            return column if codec == "json" else None  # 'string' refuses numbers
        return column if codec == "string" else pc.binary_join_element_wise(
            _QUOTE, column, _QUOTE, "")
    if isinstance(value, Mapping) and codec == "json" and value:
        parts: list[Any] = []
        for name in sorted(value):  # the JSON codec sorts a record's keys
            source = value[name]
            if not isinstance(name, str) or not isinstance(source, str) or \
                    not name or any(c in name for c in '"\\') or \
                    any(ord(c) < 0x20 for c in name):
                return None
            column = _text_column(table, source)
            if column is None:
                return None
            parts.append(("," if parts else "{") + _QUOTE + name + _QUOTE + ":")
            if _is_integer(table, source):
                parts.append(column)
            else:
                parts += [_QUOTE, column, _QUOTE]
        parts.append("}")
        return pc.binary_join_element_wise(*parts, "")
    return None


def _is_integer(table: pa.Table, name: str) -> bool:
    """Whether column ``name`` holds integers: a number in JSON, refused by ``'string'``."""
    return name in table.column_names and pa.types.is_integer(table.column(name).type)


def _any(mask: Any) -> bool:
    return bool(pc.any(mask).as_py())


FOLDED = "\x00folded"
"""The field of a folded row that holds its group's folded value (no row field has a NUL)."""

# A merge's Python fold -> Arrow's hash aggregate doing the same, when order does not matter.
_ORDER_FREE = {sum: "sum", max: "max", min: "min"}


def folded_value(row: Mapping[str, Any]) -> Any:
    """The value a row of :func:`fold_rows` stands for (the sink's value function for it)."""
    return row[FOLDED]


def _template_fields(key: Any, field: Any) -> list[str] | None:
    """The fields the key (and hash-field) templates name, or None: not both templates."""
    groups: list[str] = []
    for template in (key, field):
        if template is None:
            continue
        if not isinstance(template, str):
            return None
        try:
            groups += [n for n in KeyTemplate(template).fields if n not in groups]
        except Exception:  # noqa: BLE001 - the sink's row path reports a bad template
            return None
    return groups


def fold_rows(names: Sequence[str], values: Sequence[Sequence[Any]], *, key: Any, field: Any,
              value: Any, merge: Merge) -> list[dict[str, Any]] | None:
    """Rows standing for ``values`` (rows of fields ``names``), one per key, or None.

    Each returned row holds the fields the key and field templates name, and under
    :data:`FOLDED` the merge's fold of its group's values (``value`` a field name, or None:
    one per row). None, and the caller takes the row path (which also raises its errors),
    unless: the merge is numeric with an order-free fold, ``key`` (and ``field``) are
    templates of plain ``{name}`` or ``{name:spec}`` fields, those columns hold strings or
    integers (no empty strings), the value column integers, nothing is null, and a sum
    cannot overflow 64 bits.

    Example:
        >>> from sinks.redis.merge import BUILTIN_MERGES
        >>> rows = fold_rows(["w", "n"], [("a", 1), ("b", 5), ("a", 2)], key="c:{w}",
        ...                  field=None, value="n", merge=BUILTIN_MERGES["add"])
        >>> [(row["w"], folded_value(row)) for row in rows]
        [('a', 3), ('b', 5)]
    """
    fold = _ORDER_FREE.get(merge.combine) if isinstance(merge, LuaMerge) else None
    if fold is None or not merge.numeric or not values:
        return None
    groups = _template_fields(key, field)
    if not groups or (value is not None and not isinstance(value, str)):
        return None
    wanted = [*groups, *([value] if value is not None and value not in groups else [])]
    if any(name not in names for name in wanted):
        return None  # the row path names the missing field
    try:
        columns = {name: pa.array(list(map(itemgetter(names.index(name)), values)))
                   for name in wanted}
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # mixed or unsupported types
    for name in groups:
        kind = columns[name].type
        if columns[name].null_count or not (pa.types.is_string(kind) or
                                            pa.types.is_integer(kind)):
            return None
        if pa.types.is_string(kind) and _any(pc.equal(pc.binary_length(columns[name]), 0)):
            return None  # maybe an empty key: the row path's error names the row as it came
    if value is None:
        amounts = pa.array([1] * len(values), pa.int64())
    else:
        amounts = columns[value]
        if amounts.null_count or not pa.types.is_integer(amounts.type):
            return None  # (floats: a sum's rounding depends on its order; 1 and 1.0 mixed)
        if fold == "sum":
            low, high = pc.min_max(amounts).values()
            if max(abs(low.as_py()), abs(high.as_py())) * len(values) >= 2**63:
                return None
    table = pa.table({**{name: columns[name] for name in groups}, FOLDED: amounts})
    out = table.group_by(groups, use_threads=False).aggregate([(FOLDED, fold)])
    out = out.rename_columns([FOLDED if c == f"{FOLDED}_{fold}" else c
                              for c in out.column_names])
    return out.select([*groups, FOLDED]).to_pylist()


_INT_LIMIT = 2**62  # a combined sum stays well inside int64 (fold_rows' overflow guard)


def combine_values(names: Sequence[str], values: Sequence[list[Any]], *, key: Any, field: Any,
                   value: Any, merge: Merge) -> list[list[Any]] | None:
    """``values`` (rows of fields ``names``) with the rows of each key folded into one, or None.

    A task's tuples for the sink, before they leave the executor: the first row of each key
    stands for its key, its value field set to the fold of theirs. The commit's result is
    the same as for the rows themselves, as the merge's fold ignores order. None (the rows
    leave as they are) unless: the merge is numeric with an order-free fold (``add``,
    ``max``, ``min``), ``value`` is a field, ``key`` (and ``field``) templates of fields, the
    key fields hold non-empty strings or integers, the values integers, and a sum stays
    under 2**62 in magnitude.

    Example:
        >>> from sinks.redis.merge import BUILTIN_MERGES
        >>> combine_values(["w", "n"], [["a", 1], ["b", 5], ["a", 2]], key="c:{w}",
        ...                field=None, value="n", merge=BUILTIN_MERGES["add"])
        [['a', 3], ['b', 5]]
    """
    fold = _ORDER_FREE.get(merge.combine) if isinstance(merge, LuaMerge) else None
    if (fold is None or not merge.numeric or not isinstance(value, str)
            or value not in names or not values):
        return None
    groups = _template_fields(key, field)
    if not groups or any(name not in names for name in groups) or value in groups:
        return None
    at = [names.index(name) for name in groups]
    slot = names.index(value)
    one = at[0] if len(at) == 1 else -1
    acc: dict[Any, list[Any]] = {}  # key values -> [first row, folded value]
    for row in values:  # (one loop per row, ~0.3 us: no call in it)
        if one >= 0:
            k = row[one]
            if type(k) is str:
                if not k:
                    return None  # the sink's own checks see every row as it came
            elif type(k) is not int:  # (True == 1, but renders "True": exact types only)
                return None
        else:
            k = tuple(row[i] for i in at)
            for part in k:
                if not ((type(part) is str and part) or type(part) is int):
                    return None
        n = row[slot]
        if type(n) is not int:
            return None
        found = acc.get(k)
        if found is None:
            acc[k] = [row, n]
        elif fold == "sum":
            found[1] += n
        elif fold == "max":
            if n > found[1]:
                found[1] = n
        elif n < found[1]:
            found[1] = n
    if len(acc) == len(values):
        return None  # nothing to fold
    if fold == "sum" and any(abs(n) >= _INT_LIMIT for _, n in acc.values()):
        return None
    out = []
    for row, n in acc.values():
        if row[slot] != n:
            row = [*row]  # (a row may be another route's too)
            row[slot] = n
        out.append(row)
    return out


__all__ = ["FOLDED", "combine_values", "fold_rows", "folded_value", "table_chunks"]
