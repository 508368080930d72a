"""JSON values: either validated JSON text, or typed fields read by Arrow in one pass."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstorm.errors import ConfigError, SerdeError
from serdes._batch import check_arity, check_field_name, from_python, single, table_to_batch
from serdes._json_explain import diagnose, explain, load_json_text
from serdes._json_read import read_objects
from serdes._json_types import JsonType, resolve
from serdes.base import DecodeFailure, DecodeResult

_BYTES_LIKE = (bytes, bytearray, memoryview)


class JsonSerde:
    """JSON objects to fields, and back.

    Without ``schema`` a record is one field (``field``, Arrow ``string``) holding the JSON
    *text*, checked to be valid JSON but not parsed into Python objects, so that any JSON
    value fits one Arrow column. With ``schema`` (field name -> type) a record must be a
    JSON object and each declared field becomes a typed column; other keys are ignored.
    Types: ``int``/``"int64"``, ``"int32"``, ``float``/``"double"``, ``str``/``"string"``,
    ``bool``/``"bool"`` and ``"timestamp-ms"`` (epoch milliseconds in JSON, Arrow
    ``timestamp[ms, tz=UTC]``).

    ``required`` names the fields that must be present and non-null (default: all of them);
    a record lacking one fails with ``MissingField``. Other failures: ``MalformedJSON``
    (not UTF-8, not JSON, not an object) and ``SchemaMismatch`` (a value of the wrong type).
    A ``None`` value (Kafka tombstone) is a record with every field null.

    Example:
        >>> serde = JsonSerde({"key": str, "ts": "timestamp-ms", "value": int})
        >>> result = serde.deserialize_batch([b'{"key": "k1", "ts": 0, "value": 42}', b"{"])
        >>> result.batch.column("value").to_pylist(), result.failures[0].error_type
        ([42], 'MalformedJSON')
        >>> serde.serialize(["k1", 0, 42])
        b'{"key":"k1","ts":0,"value":42}'
        >>> JsonSerde().deserialize(b'[1, 2]')
        ('[1, 2]',)
    """

    def __init__(
        self,
        schema: Mapping[str, type | str | pa.DataType] | None = None,
        *,
        field: str = "value",
        required: Iterable[str] | None = None,
    ) -> None:
        check_field_name("JsonSerde", field)
        if schema is None:
            if required is not None:
                msg = "JsonSerde: required= needs a schema (without one a record is one text field)"
                raise ConfigError(msg)
            self._types: tuple[tuple[str, JsonType], ...] = ()
            self._required: tuple[str, ...] = ()
            self._schema = pa.schema([pa.field(field, pa.string())])
        else:
            if not isinstance(schema, Mapping) or not schema:
                msg = f"JsonSerde: schema must be a non-empty mapping field -> type, got {schema!r}"
                raise ConfigError(msg)
            self._types = tuple(
                (check_field_name("JsonSerde", name, "schema field"), resolve(name, declared))
                for name, declared in schema.items()
            )
            names = [name for name, _ in self._types]
            self._required = tuple(names if required is None else _check_required(required, names))
            self._schema = pa.schema([pa.field(n, t.arrow_type) for n, t in self._types])
            self._read_schema = pa.schema([pa.field(n, t.read_type) for n, t in self._types])
        self._field = field

    def __getstate__(self) -> dict[str, Any]:
        schema = {name: json_type.name for name, json_type in self._types} or None
        required = list(self._required) if schema else None
        return {"schema": schema, "field": self._field, "required": required}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["schema"], field=state["field"], required=state["required"])  # type: ignore[misc]

    def __repr__(self) -> str:
        if not self._types:
            return f"JsonSerde(field={self._field!r})"
        schema = {name: json_type.name for name, json_type in self._types}
        return f"JsonSerde({schema!r}, required={list(self._required)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonSerde) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))

    def fields(self) -> list[str]:
        """The schema's field names, or ``[field]`` without a schema."""
        return list(self._schema.names)

    def arrow_schema(self) -> pa.Schema:
        """Arrow types of :meth:`fields`; every field is nullable."""
        return self._schema

    def deserialize(self, data: bytes | None) -> tuple[Any, ...]:
        """One record; raises :class:`SerdeError` naming the reason it is bad."""
        return single("JsonSerde", self.deserialize_batch([data]))

    def deserialize_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        """Many records; see the class docs for what makes a record bad."""
        if not self._types:
            return self._text_batch(values)
        split = _Split.of(values)
        suspect = functools.partial(_is_suspect, self._types)
        outcome = read_objects(split.records, self._read_schema, suspect)
        failures = split.failures
        for position, reason in outcome.bad.items():
            error_type, message = explain(split.records[position], self._types, reason)
            failures.append(DecodeFailure(split.index(position), error_type, message))
        good = outcome.good if split.indices is None else split.indices[outcome.good]
        table = outcome.table
        if split.tombstones:  # rows of nulls, merged back in input order
            nulls = [pa.nulls(len(split.tombstones), f.type) for f in self._read_schema]
            table = pa.concat_tables([table, pa.table(nulls, schema=self._read_schema)])
            good = np.concatenate([good, np.asarray(split.tombstones, dtype=np.int64)])
            order = np.argsort(good, kind="stable")
            table, good = table.take(order), good[order]
        table, good = self._drop_missing(table, good, failures, set(split.tombstones))
        failures.sort(key=lambda failure: failure.index)
        return DecodeResult(table_to_batch(table, self._schema), good.tolist(), failures)

    def _drop_missing(
        self, table: pa.Table, good: np.ndarray, failures: list[DecodeFailure], tombstones: set[int]
    ) -> tuple[pa.Table, np.ndarray]:
        """Move rows whose required fields are null from ``table`` into ``failures``."""
        if not self._required or table.num_rows == 0:
            return table, good
        missing = [pc.is_null(table.column(name)) for name in self._required]
        any_missing = missing[0]
        for mask in missing[1:]:
            any_missing = pc.or_(any_missing, mask)
        if not pc.any(any_missing).as_py():
            return table, good
        rows = np.flatnonzero(any_missing.to_numpy(zero_copy_only=False))
        columns = [mask.to_numpy(zero_copy_only=False) for mask in missing]
        for row in rows.tolist():
            name = next(n for n, col in zip(self._required, columns, strict=True) if col[row])
            message = f"required field {name!r} is missing or null"
            if int(good[row]) in tombstones:
                message = f"null value (tombstone): required field {name!r} is missing"
            failures.append(DecodeFailure(int(good[row]), "MissingField", message))
        keep = pc.invert(any_missing)
        return table.filter(keep), np.delete(good, rows)

    def _text_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        rows: list[tuple[Any, ...]] = []
        good: list[int] = []
        failures: list[DecodeFailure] = []
        for index, value in enumerate(values):
            if value is None:
                rows.append((None,))
                good.append(index)
                continue
            if not isinstance(value, _BYTES_LIKE):
                message = f"expected bytes, got {type(value).__name__}"
                failures.append(DecodeFailure(index, "MalformedJSON", message))
                continue
            text, error = load_json_text(bytes(value))
            if error is None:
                rows.append((text,))
                good.append(index)
            else:
                failures.append(DecodeFailure(index, "MalformedJSON", error))
        return from_python(self._schema, rows, good, failures)

    def serialize(self, values: Sequence[Any]) -> bytes:
        """Field values to compact UTF-8 JSON.

        Without a schema, a ``str`` or bytes value is taken as JSON text (checked, sent
        as is) and any other value is encoded with :func:`json.dumps`.
        """
        check_arity("JsonSerde", self.fields(), values)
        if not self._types:
            return _serialize_text(self._field, values[0])
        document: dict[str, Any] = {}
        for (name, json_type), value in zip(self._types, values, strict=True):
            if value is None:
                if name in self._required:
                    msg = f"JsonSerde.serialize: required field {name!r} is None"
                    raise SerdeError(msg)
            else:
                encoded = json_type.to_json(value)
                if encoded is None or not json_type.accepts(encoded):
                    msg = (
                        f"JsonSerde.serialize: field {name!r} expects {json_type.name}, "
                        f"got {type(value).__name__} {value!r:.60}"
                    )
                    raise SerdeError(msg)
                document[name] = encoded
        return _dumps(document)


def _check_required(required: Iterable[str], names: list[str]) -> list[str]:
    if isinstance(required, str):
        msg = f"JsonSerde: required must be a collection of field names, got {required!r}"
        raise ConfigError(msg)
    required = list(required)
    unknown = [name for name in required if name not in names]
    if unknown:
        msg = f"JsonSerde: required fields {unknown} are not in the schema {names}"
        raise ConfigError(msg)
    return [name for name in names if name in required]


@dataclass(slots=True)
class _Split:
    """The input values sorted into records to parse, tombstones and non-bytes."""

    records: Sequence[Any]
    indices: np.ndarray | None  # input index of each record (None: the same position)
    tombstones: list[int] = dataclass_field(default_factory=list)
    failures: list[DecodeFailure] = dataclass_field(default_factory=list)

    def index(self, position: int) -> int:
        return position if self.indices is None else int(self.indices[position])

    @classmethod
    def of(cls, values: Sequence[bytes | None]) -> _Split:
        if set(map(type, values)) <= {bytes}:  # the common case, checked in C
            return cls(values, None)
        return cls._sorted(values)

    @classmethod
    def _sorted(cls, values: Sequence[bytes | None]) -> _Split:
        records: list[bytes] = []
        indices: list[int] = []
        split = cls(records, None)
        for index, value in enumerate(values):
            if value is None:
                split.tombstones.append(index)
            elif isinstance(value, _BYTES_LIKE):
                records.append(bytes(value))
                indices.append(index)
            else:
                message = f"expected bytes, got {type(value).__name__}"
                split.failures.append(DecodeFailure(index, "MalformedJSON", message))
        split.indices = np.asarray(indices, dtype=np.int64)
        return split


def _is_suspect(types: tuple[tuple[str, JsonType], ...], record: bytes) -> bool:
    return diagnose(record, types) is not None


def _serialize_text(field: str, value: Any) -> bytes:
    if isinstance(value, (str, *_BYTES_LIKE)):
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
        _, error = load_json_text(data)
        if error is not None:
            msg = f"JsonSerde.serialize: field {field!r} is not JSON text: {error}"
            raise SerdeError(msg)
        return data
    return _dumps(value)


def _dumps(document: Any) -> bytes:
    try:
        text = json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # unencodable object, NaN, lone surrogate
        msg = f"JsonSerde.serialize: value cannot be written as JSON: {exc}"
        raise SerdeError(msg) from exc
