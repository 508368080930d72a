"""Small helpers shared by the serdes: argument checks and assembling a DecodeResult."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from kstorm.errors import ConfigError, SerdeError
from serdes.base import DecodeFailure, DecodeResult

_PLAIN = {bytes, type(None)}


def all_bytes_or_none(values: Sequence[Any]) -> bool:
    """Whether every value is exactly ``bytes`` or ``None`` (checked in C, ~25 ns each)."""
    return set(map(type, values)) <= _PLAIN


def check_field_name(serde: str, name: object, what: str = "field") -> str:
    """Return ``name`` if it is a usable field name, else raise :class:`ConfigError`."""
    if not isinstance(name, str) or not name:
        msg = f"{serde}: {what} must be a non-empty string, got {name!r}"
        raise ConfigError(msg)
    return name


def check_arity(serde: str, fields: Sequence[str], values: Sequence[Any]) -> None:
    """Raise :class:`SerdeError` unless ``values`` has one entry per field."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        msg = (
            f"{serde}.serialize: expected a sequence of {len(fields)} values {fields}, "
            f"got {values!r:.80}"
        )
        raise SerdeError(msg)
    if len(values) != len(fields):
        msg = (
            f"{serde}.serialize: expected {len(fields)} values for fields {fields}, "
            f"got {len(values)}"
        )
        raise SerdeError(msg)


def single(serde: str, result: DecodeResult) -> tuple[Any, ...]:
    """The one row of a one-record :class:`DecodeResult`, or its failure as a SerdeError."""
    if result.failures:
        failure = result.failures[0]
        msg = f"{serde}: {failure.error_type}: {failure.message}"
        raise SerdeError(msg)
    row = result.batch.to_pylist()[0]
    return tuple(row[name] for name in result.batch.schema.names)


def table_to_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    """One record batch with exactly ``schema`` holding all rows of ``table``."""
    table = table.cast(schema).combine_chunks()
    arrays = [
        column.chunk(0) if column.num_chunks else pa.array([], type=field.type)
        for column, field in zip(table.columns, schema, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def from_python(
    schema: pa.Schema, rows: list[tuple[Any, ...]], good: list[int], failures: list[DecodeFailure]
) -> DecodeResult:
    """Build a DecodeResult from per-record Python values (the slow, simple path)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = [
        pa.array(list(column), type=field.type)
        for column, field in zip(columns, schema, strict=True)
    ]
    return DecodeResult(pa.RecordBatch.from_arrays(arrays, schema=schema), good, failures)


def decode_each(serde: Any, values: Sequence[Any]) -> DecodeResult:
    """Decode record by record with ``serde.deserialize``; each bad record is a failure.

    The fallback of serdes whose vectorised path cannot say which record is bad.
    """
    rows, good, failures = [], [], []
    for index, value in enumerate(values):
        try:
            rows.append(serde.deserialize(value))
            good.append(index)
        except SerdeError as exc:
            failures.append(DecodeFailure(index, "DecodeError", str(exc)))
    return from_python(serde.arrow_schema(), rows, good, failures)
