"""Avro types as Arrow types, and values between fastavro's and Arrow's Python shapes.

The mapping (one place, documented in ``serdes.avro``):

==============================  ==========================================================
Avro                            Arrow
==============================  ==========================================================
null / boolean / int / long     null / bool / int32 / int64
float / double                  float32 / float64
bytes / string / fixed(n)       binary / string / fixed_size_binary(n)
enum                            string (the symbol)
record                          struct (nested records nest)
array                           list
map                             map<string, T>
union [null, T] (any order)     T, nullable
other unions                    struct<member0, member1, ...> with one non-null member,
                                as Spark's ``from_avro`` does (null branch dropped)
decimal(p, s)                   decimal128(p, s) (decimal256 when p > 38)
uuid                            string
date / time-millis / -micros    date32 / time32[ms] / time64[us]
timestamp-millis / -micros      timestamp[ms, tz=UTC] / timestamp[us, tz=UTC]
local-timestamp-millis / -mic.  timestamp[ms] / timestamp[us] (no time zone)
==============================  ==========================================================

Arrow cannot nest a type inside itself, so recursive records are rejected.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kstorm.errors import ConfigError

Convert = Callable[[Any], Any] | None  # None: the value needs no conversion

_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL = {
    "uuid": pa.string(),
    "date": pa.date32(),
    "time-millis": pa.time32("ms"),
    "time-micros": pa.time64("us"),
    "timestamp-millis": pa.timestamp("ms", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("ms"),
    "local-timestamp-micros": pa.timestamp("us"),
}


class AvroArrow:
    """Arrow type and value converters for one parsed Avro schema (with its named types)."""

    def __init__(self, named: dict[str, Any]) -> None:
        self._named = named

    def resolve(self, schema: Any) -> Any:
        """Follow a reference to a named type; unwrap ``{"type": "int"}``."""
        if isinstance(schema, str):
            return self._named.get(schema, schema)
        if isinstance(schema, dict) and isinstance(schema.get("type"), (str, list, dict)):
            inner = schema["type"]
            if "logicalType" not in schema and inner in _PRIMITIVES:
                return inner
        return schema

    def arrow_type(self, schema: Any, path: tuple[str, ...] = ()) -> pa.DataType:
        """The Arrow type of values of ``schema``."""
        schema = self.resolve(schema)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema]
            msg = f"AvroSerde: unknown Avro type {schema!r}"
            raise ConfigError(msg)
        if isinstance(schema, list):
            branches = [b for b in schema if self.resolve(b) != "null"]
            if len(branches) == 1:
                return self.arrow_type(branches[0], path)
            if not branches:
                return pa.null()
            members = [(f"member{i}", self.arrow_type(b, path)) for i, b in enumerate(branches)]
            return pa.struct(members)
        kind, logical = schema["type"], schema.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
            return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
        if logical in _LOGICAL:
            return _LOGICAL[logical]
        if kind == "record":
            name = schema["name"]
            if name in path:
                msg = f"AvroSerde: recursive record {name!r} cannot be mapped to an Arrow type"
                raise ConfigError(msg)
            inner = (*path, name)
            return pa.struct(
                [(f["name"], self.arrow_type(f["type"], inner)) for f in schema["fields"]]
            )
        if kind == "enum":
            return pa.string()
        if kind == "array":
            return pa.list_(self.arrow_type(schema["items"], path))
        if kind == "map":
            return pa.map_(pa.string(), self.arrow_type(schema["values"], path))
        if kind == "fixed":
            return pa.binary(int(schema["size"]))
        return self.arrow_type(kind, path)

    def to_arrow(self, schema: Any) -> Convert:
        """A function from a fastavro-decoded value to what ``pa.array`` accepts."""
        schema = self.resolve(schema)
        if isinstance(schema, str):
            return None
        if isinstance(schema, list):
            return self._union_to_arrow(schema)
        kind, logical = schema["type"], schema.get("logicalType")
        if logical == "uuid":
            return lambda v: str(v) if isinstance(v, uuid.UUID) else v
        if kind == "record":
            fields = [(f["name"], self.to_arrow(f["type"])) for f in schema["fields"]]
            if all(convert is None for _, convert in fields):
                return None
            return lambda v: {n: (c(v[n]) if c and v[n] is not None else v[n]) for n, c in fields}
        if kind in ("array", "map"):
            item = self.to_arrow(schema["items" if kind == "array" else "values"])
            if item is None:
                return None
            if kind == "array":
                return lambda v: [None if x is None else item(x) for x in v]
            return lambda v: {k: None if x is None else item(x) for k, x in v.items()}
        return None

    def _union_to_arrow(self, schema: list[Any]) -> Convert:
        branches = [b for b in schema if self.resolve(b) != "null"]
        if len(branches) == 1:
            return self.to_arrow(branches[0])
        matchers = [self.matcher(b) for b in branches]
        converters = [self.to_arrow(b) for b in branches]
        labels = [_union_label(self.resolve(b)) for b in branches]
        names = [f"member{i}" for i in range(len(branches))]

        def members(i: int, value: Any) -> dict[str, Any]:
            member = _apply(converters[i], value)
            return {name: member if j == i else None for j, name in enumerate(names)}

        def convert(value: Any) -> Any:
            if isinstance(value, tuple):  # (record name, record): fastavro names the branch
                label, value = value
                if label in labels:
                    return members(labels.index(label), value)
            for i, matches in enumerate(matchers):
                if matches(value):
                    return members(i, value)
            return None

        return convert

    def matcher(self, schema: Any) -> Callable[[Any], bool]:
        """Whether a decoded value belongs to this union branch (the first match wins)."""
        schema = self.resolve(schema)
        kind = schema if isinstance(schema, str) else schema.get("type")
        logical = None if isinstance(schema, str) else schema.get("logicalType")
        python: tuple[type, ...] = _KIND_PYTHON.get(kind, (object,))
        excluded: tuple[type, ...] = () if kind == "boolean" else (bool,)
        if logical in _LOGICAL_PYTHON:
            python, excluded = _LOGICAL_PYTHON[logical], ()
        return lambda v: isinstance(v, python) and not isinstance(v, excluded)

    def to_avro(self, schema: Any) -> Convert:
        """A function from an Arrow-shaped value (``to_pylist``) to what fastavro writes."""
        schema = self.resolve(schema)
        if isinstance(schema, str):
            return None
        if isinstance(schema, list):
            return self._union_to_avro(schema)
        kind = schema["type"]
        if kind == "record":
            fields = [(f["name"], self.to_avro(f["type"])) for f in schema["fields"]]
            if all(convert is None for _, convert in fields):
                return None
            return lambda v: _convert_record(v, fields)
        if kind == "array":
            item = self.to_avro(schema["items"])
            return None if item is None else lambda v: [_apply(item, x) for x in v]
        if kind == "map":
            value = self.to_avro(schema["values"])
            return lambda v: {
                k: _apply(value, x) for k, x in (v.items() if isinstance(v, dict) else v)
            }
        return None

    def _union_to_avro(self, schema: list[Any]) -> Convert:
        branches = [b for b in schema if self.resolve(b) != "null"]
        if len(branches) == 1:
            return self.to_avro(branches[0])
        names = [f"member{i}" for i in range(len(branches))]
        converters = [self.to_avro(b) for b in branches]
        labels = [_union_label(self.resolve(b)) for b in branches]

        def convert(value: Any) -> Any:
            if not (isinstance(value, dict) and set(value) == set(names)):
                return value  # a plain value: fastavro picks the first branch it fits
            for i, name in enumerate(names):
                if value[name] is not None:
                    member = _apply(converters[i], value[name])
                    return member if labels[i] is None else (labels[i], member)
            return None

        return convert


def _apply(convert: Convert, value: Any) -> Any:
    return value if convert is None or value is None else convert(value)


def _convert_record(value: Any, fields: list[tuple[str, Convert]]) -> Any:
    if not isinstance(value, dict):
        return value  # fastavro reports the mismatch
    return {name: _apply(convert, value.get(name)) for name, convert in fields if name in value}


def _union_label(schema: Any) -> str | None:
    """The name fastavro's tuple notation uses to pick a union branch, if it has one."""
    if isinstance(schema, str):
        return schema
    return schema["name"] if schema.get("type") in ("record", "enum", "fixed") else None


_KIND_PYTHON: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "float": (float, int),
    "double": (float, int),
    "bytes": (bytes,),
    "fixed": (bytes,),
    "string": (str,),
    "enum": (str,),
    "array": (list,),
    "map": (dict,),
    "record": (dict,),
}
_LOGICAL_PYTHON: dict[str, tuple[type, ...]] = {
    "decimal": (decimal.Decimal,),
    "uuid": (uuid.UUID, str),
    "date": (dt.date,),
    "time-millis": (dt.time,),
    "time-micros": (dt.time,),
    "timestamp-millis": (dt.datetime,),
    "timestamp-micros": (dt.datetime,),
    "local-timestamp-millis": (dt.datetime,),
    "local-timestamp-micros": (dt.datetime,),
}
