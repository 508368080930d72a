"""The field types a :class:`~serdes.json.JsonSerde` schema may declare.

Each type knows the Arrow type ``pyarrow.json`` reads it as, the Arrow type of the final
column, and how to check and encode one Python value (used to explain a bad record and to
serialize). ``timestamp-ms`` is epoch milliseconds in JSON (an integer, as Kafka and Avro
write them) and ``timestamp[ms, tz=UTC]`` in Arrow.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kstorm.errors import ConfigError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _int_in(bits: int) -> Callable[[Any], bool]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _is_double(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _timestamp_to_json(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return None  # naive datetimes are ambiguous: rejected by the caller
        return (value - _EPOCH) // dt.timedelta(milliseconds=1)
    return value


@dataclass(frozen=True, slots=True)
class JsonType:
    """One declarable field type."""

    name: str
    read_type: pa.DataType
    arrow_type: pa.DataType
    accepts: Callable[[Any], bool]
    to_json: Callable[[Any], Any] = lambda value: value


_INT64 = _int_in(64)
TYPES: dict[str, JsonType] = {
    t.name: t
    for t in (
        JsonType("int64", pa.int64(), pa.int64(), _INT64),
        JsonType("int32", pa.int32(), pa.int32(), _int_in(32)),
        JsonType("double", pa.float64(), pa.float64(), _is_double),
        JsonType("string", pa.string(), pa.string(), lambda v: isinstance(v, str)),
        JsonType("bool", pa.bool_(), pa.bool_(), lambda v: isinstance(v, bool)),
        JsonType(
            "timestamp-ms",
            pa.int64(),
            pa.timestamp("ms", tz="UTC"),
            _INT64,
            _timestamp_to_json,
        ),
    )
}
_ALIASES: dict[Any, str] = {
    int: "int64",
    float: "double",
    str: "string",
    bool: "bool",
    "int": "int64",
    "long": "int64",
    "float64": "double",
    "float": "double",
    "str": "string",
    "boolean": "bool",
    "timestamp-millis": "timestamp-ms",
}


def resolve(field_name: str, declared: Any) -> JsonType:
    """The :class:`JsonType` for a schema entry (a Python type, a name or an Arrow type)."""
    if isinstance(declared, pa.DataType):
        for json_type in TYPES.values():
            if json_type.arrow_type == declared or (
                declared == pa.timestamp("ms") and json_type.name == "timestamp-ms"
            ):
                return json_type
    elif isinstance(declared, (str, type)):
        name = _ALIASES.get(declared, declared)
        if isinstance(name, str) and name in TYPES:
            return TYPES[name]
    msg = (
        f"JsonSerde: field {field_name!r} has unsupported type {declared!r}; expected one of "
        f"int, float, str, bool or {sorted(TYPES)}"
    )
    raise ConfigError(msg)


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
