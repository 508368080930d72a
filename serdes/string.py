"""Text: the Kafka value decoded to one ``string`` field."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kstorm.errors import ConfigError, SerdeError
from serdes._batch import all_bytes_or_none, check_arity, check_field_name, decode_each
from serdes.base import DecodeResult


@dataclass(frozen=True, slots=True)
class StringSerde:
    r"""Decode the value with ``encoding`` into one Arrow ``string`` field.

    Bytes that are not valid in ``encoding`` become a :class:`DecodeFailure` with
    ``error_type="DecodeError"``; a ``None`` value (a Kafka tombstone) becomes a null field.
    UTF-8 batches are validated by Arrow in one pass; other encodings decode per record.

    Example:
        >>> serde = StringSerde(field="line")
        >>> serde.deserialize("héllo".encode())
        ('héllo',)
        >>> serde.deserialize_batch([b"ok", b"\xff", None]).failures[0].error_type
        'DecodeError'
        >>> serde.serialize(["héllo"])
        b'h\xc3\xa9llo'
    """

    field: str = "value"
    encoding: str = "utf-8"

    def __post_init__(self) -> None:
        check_field_name("StringSerde", self.field)
        try:
            name = codecs.lookup(self.encoding).name
        except (LookupError, TypeError) as exc:
            msg = f"StringSerde: unknown text encoding {self.encoding!r}"
            raise ConfigError(msg) from exc
        object.__setattr__(self, "encoding", name)

    def fields(self) -> list[str]:
        """``[field]``."""
        return [self.field]

    def arrow_schema(self) -> pa.Schema:
        """One nullable ``string`` field."""
        return pa.schema([pa.field(self.field, pa.string())])

    def deserialize(self, data: bytes | None) -> tuple[Any, ...]:
        """``(text,)``; raises :class:`SerdeError` when ``data`` does not decode."""
        if data is None:
            return (None,)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            got = type(data).__name__
            msg = f"StringSerde: expected bytes or None for field {self.field!r}, got {got}"
            raise SerdeError(msg)
        try:
            return (bytes(data).decode(self.encoding),)
        except UnicodeDecodeError as exc:
            msg = f"StringSerde: field {self.field!r} is not valid {self.encoding}: {exc}"
            raise SerdeError(msg) from exc

    def deserialize_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        """Validate a UTF-8 batch in Arrow; fall back per record to pinpoint bad ones."""
        if self.encoding == "utf-8" and all_bytes_or_none(values):
            try:
                array = pa.array(values, type=pa.binary()).cast(pa.string())
            except pa.ArrowException:
                pass  # at least one record is not UTF-8: find which below
            else:
                batch = pa.RecordBatch.from_arrays([array], schema=self.arrow_schema())
                return DecodeResult(batch, list(range(len(values))))
        return decode_each(self, values)

    def serialize(self, values: Sequence[Any]) -> bytes:
        """Encode ``values[0]`` (a ``str``) with the serde's encoding."""
        check_arity("StringSerde", self.fields(), values)
        (value,) = values
        if not isinstance(value, str):
            got = type(value).__name__
            msg = f"StringSerde.serialize: field {self.field!r} must be str, got {got}"
            raise SerdeError(msg)
        try:
            return value.encode(self.encoding)
        except UnicodeEncodeError as exc:
            msg = (
                f"StringSerde.serialize: field {self.field!r} cannot be encoded as "
                f"{self.encoding}: {exc}"
            )
            raise SerdeError(msg) from exc
