"""Raw bytes: the Kafka value as one ``binary`` field, untouched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kstorm.errors import SerdeError
from serdes._batch import all_bytes_or_none, check_arity, check_field_name, decode_each
from serdes.base import DecodeResult

_BYTES_LIKE = (bytes, bytearray, memoryview)


@dataclass(frozen=True, slots=True)
class BytesSerde:
    r"""Pass the value through as one field of Arrow type ``binary``.

    A ``None`` value (a Kafka tombstone) becomes a null field.

    Example:
        >>> serde = BytesSerde(field="payload")
        >>> serde.deserialize(b"\x00\x01")
        (b'\x00\x01',)
        >>> serde.serialize([b"abc"])
        b'abc'
    """

    field: str = "value"

    def __post_init__(self) -> None:
        check_field_name("BytesSerde", self.field)

    def fields(self) -> list[str]:
        """``[field]``."""
        return [self.field]

    def arrow_schema(self) -> pa.Schema:
        """One nullable ``binary`` field."""
        return pa.schema([pa.field(self.field, pa.binary())])

    def deserialize(self, data: bytes | None) -> tuple[Any, ...]:
        """``(data,)``; raises :class:`SerdeError` if ``data`` is not bytes-like."""
        if data is None or isinstance(data, _BYTES_LIKE):
            return (None if data is None else bytes(data),)
        got = type(data).__name__
        msg = f"BytesSerde: expected bytes or None for field {self.field!r}, got {got}"
        raise SerdeError(msg)

    def deserialize_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        """Wrap the values in one Arrow ``binary`` column (no copy of the Python loop)."""
        if not all_bytes_or_none(values):
            return decode_each(self, values)
        array = pa.array(values, type=pa.binary())
        batch = pa.RecordBatch.from_arrays([array], schema=self.arrow_schema())
        return DecodeResult(batch, list(range(len(values))))


    def serialize(self, values: Sequence[Any]) -> bytes:
        """``values[0]`` as bytes; raises :class:`SerdeError` for anything not bytes-like."""
        check_arity("BytesSerde", self.fields(), values)
        (value,) = values
        if isinstance(value, _BYTES_LIKE):
            return bytes(value)
        got = type(value).__name__
        msg = f"BytesSerde.serialize: field {self.field!r} must be bytes, got {got}"
        raise SerdeError(msg)
