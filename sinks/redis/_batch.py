"""A batch's rows as the per-key writes the commit applies (pure; no Redis).

Each ``(key, field)`` appears once in a batch's entries: the update rules compare a
key's stored txid with the batch's, so a second write of the same key in the same
batch would look like a replay. Rows that share a key are folded here (``add``
sums them, ``set`` keeps the last row, ...) or, for merges without a Python fold,
passed on in row order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from kstorm.errors import ConfigError, SinkError

from ._codec import ValueCodec, encode, number
from ._keys import RESERVED_PREFIX, KeyTemplate
from .merge import LuaMerge, Merge

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Entry:
    """The new values one batch writes to one key (``field`` is ``""`` for a plain key)."""

    key: str
    field: str
    values: tuple[Any, ...]

    def where(self) -> str:
        """``key K`` or ``key K field F``, for error messages."""
        return f"key {self.key!r}" + (f" field {self.field!r}" if self.field else "")


def as_mapping(row: Any) -> Row:
    """``row`` as a mapping; PySpark ``Row`` objects are converted with ``asDict()``."""
    if type(row) is dict or isinstance(row, Mapping):
        return row
    if hasattr(row, "asDict"):
        return row.asDict()  # type: ignore[no-any-return]
    msg = f"RedisSink: rows must be mappings of field -> value, got {type(row).__name__}"
    raise SinkError(msg)


def build_entries(rows: Iterable[Any], *, key: Callable[[Row], str],
                  field: Callable[[Row], str] | None, value: Callable[[Row], Any],
                  merge: Merge) -> list[Entry]:
    """Group ``rows`` by ``(key, field)`` in first-seen order, folding where the merge can.

    Example:
        >>> from sinks.redis.merge import BUILTIN_MERGES
        >>> rows = [{"w": "a", "n": 1}, {"w": "a", "n": 2}]
        >>> build_entries(rows, key=lambda r: "c:" + r["w"], field=None,
        ...               value=lambda r: r["n"], merge=BUILTIN_MERGES["add"])
        [Entry(key='c:a', field='', values=(3,))]
    """
    numeric = isinstance(merge, LuaMerge) and merge.numeric
    # (key, field) -> values; without a field, keyed by the key alone (one tuple less a row)
    grouped: dict[Any, list[Any]] = {}
    for raw in rows:
        row = raw if type(raw) is dict else as_mapping(raw)
        name = key(row)
        if type(name) is not str or not name or name.startswith(RESERVED_PREFIX):
            _bad_name("key", name, row)
        if field is None:
            where: Any = name
        else:
            where = (name, field(row))
            if type(where[1]) is not str or not where[1]:
                _bad_name("field", where[1], row)
        new = value(row)
        if numeric and type(new) is not int and type(new) is not float:
            sub = "" if field is None else where[1]
            new = number(new, "RedisSink " + Entry(name, sub, ()).where())
        found = grouped.get(where)
        if found is None:
            grouped[where] = [new]
        else:
            found.append(new)
    combine = merge.combine if isinstance(merge, LuaMerge) else None
    return [Entry(*((where, "") if field is None else where),
                  (combine(news),) if combine and len(news) > 1 else tuple(news))
            for where, news in grouped.items()]


def flatten(entries: Iterable[Entry], codec: ValueCodec) -> list[str]:
    """The commit script's entry arguments: ``key, field, n, value_1 .. value_n, ...``."""
    flat: list[str] = []
    for entry in entries:
        flat += [entry.key, entry.field, str(len(entry.values))]
        try:
            flat += [encode(v, codec) for v in entry.values]
        except SinkError as exc:
            msg = f"RedisSink {entry.where()}: {exc}"
            raise SinkError(msg) from exc
    return flat


def key_function(what: str, spec: Any) -> Callable[[Row], str]:
    """``row -> key`` (or hash field) for a template string or a function."""
    if isinstance(spec, str):
        template = KeyTemplate(spec)
        if what == "key" and template.template.startswith(RESERVED_PREFIX):
            msg = f"RedisSink: key {spec!r} is inside kstorm's reserved {RESERVED_PREFIX!r} " \
                  "namespace"
            raise ConfigError(msg)
        return template.render
    if callable(spec):
        return spec  # type: ignore[no-any-return]
    msg = f"RedisSink: {what} must be a template string or a function, got {spec!r}"
    raise ConfigError(msg)


def value_function(spec: Any) -> Callable[[Row], Any]:
    """``row -> value`` for a field name, a function, or ``None`` (one per row: count)."""
    if spec is None:
        return _one
    if isinstance(spec, str) and spec:
        return FieldGetter(spec)
    if isinstance(spec, Mapping) and spec and all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in spec.items()):
        return RecordGetter(tuple((k, FieldGetter(v)) for k, v in spec.items()))
    if callable(spec):
        return spec  # type: ignore[no-any-return]
    msg = ("RedisSink: value must be a field name, a record {name: field name} or a "
           f"function, got {spec!r}")
    raise ConfigError(msg)


@dataclass(frozen=True)
class FieldGetter:
    """Reads one named field of a row (picklable, unlike a lambda)."""

    name: str

    def __call__(self, row: Row) -> Any:
        """The field's value, or a SinkError listing the row's fields."""
        try:
            return row[self.name]
        except KeyError:
            msg = f"RedisSink: value field {self.name!r} is missing; the row has {sorted(row)}"
            raise SinkError(msg) from None


@dataclass(frozen=True)
class RecordGetter:
    """Builds a record ``{name: row[field]}`` from named fields (stored as a JSON object)."""

    fields: tuple[tuple[str, FieldGetter], ...]

    def __call__(self, row: Row) -> dict[str, Any]:
        """The record; a SinkError names a missing field."""
        return {name: get(row) for name, get in self.fields}


def _one(row: Row) -> int:
    return 1


def _bad_name(what: str, name: Any, row: Row) -> NoReturn:
    if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
        msg = f"RedisSink: key {name!r} is inside kstorm's reserved {RESERVED_PREFIX!r} namespace"
    else:
        msg = f"RedisSink: the {what} must be a non-empty string, got {name!r} " \
              f"for row {dict(row)!r}"
    raise SinkError(msg)


__all__ = ["Entry", "FieldGetter", "RecordGetter", "as_mapping", "build_entries", "flatten",
           "key_function", "value_function"]
