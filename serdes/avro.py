"""Avro values (fastavro): schemaless bodies, or the Confluent wire format with a registry.

Fields: a top-level record becomes one field per record field; any other top-level type is
one field ``value``. Arrow types follow the table in ``serdes._avro_arrow``; in short,
records are structs, arrays lists, maps ``map<string, T>``, ``[null, T]`` a nullable T,
other unions ``struct<member0, member1, ...>`` (Spark's ``from_avro`` layout),
``timestamp-millis`` is ``timestamp[ms, tz=UTC]`` and ``decimal`` is ``decimal128``.
A ``None`` value (Kafka tombstone) is a row of nulls. Bad records become failures:
``Truncated`` (the bytes end early) or ``SchemaMismatch`` (anything else: bytes left over,
a bad union index, invalid UTF-8, a value too large for its Arrow type, ...).

fastavro is imported when a serde is built: without it, :class:`MissingDependencyError`
says ``pip install kstorm[avro]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from serdes._avro_batch import body_reader, decode_batch, write_body
from serdes._avro_schema import Compiled, compile_schema, schema_text
from serdes._batch import single
from serdes.base import DecodeResult
from serdes.confluent_avro import ConfluentAvroSerde


class AvroSerde:
    """Schemaless Avro: every value is a bare Avro body written with ``writer_schema``.

    With ``reader_schema``, records are resolved into it (Avro schema evolution: fields it
    adds take their defaults, fields it drops are skipped) and its fields are the output.

    Example:
        >>> schema = {"type": "record", "name": "Click", "fields": [
        ...     {"name": "user", "type": "string"}, {"name": "n", "type": "long"}]}
        >>> serde = AvroSerde(schema)
        >>> data = serde.serialize(["ada", 3])
        >>> serde.deserialize(data)
        ('ada', 3)
        >>> newer = dict(schema, fields=[*schema["fields"],
        ...     {"name": "page", "type": "string", "default": "/"}])
        >>> AvroSerde(schema, reader_schema=newer).deserialize(data)
        ('ada', 3, '/')
    """

    def __init__(self, writer_schema: dict[str, Any] | str, *, reader_schema: Any = None) -> None:
        self._writer_text = schema_text(writer_schema, "writer_schema")
        self._reader_text = (
            None if reader_schema is None else schema_text(reader_schema, "reader_schema")
        )
        self._compiled: tuple[Compiled, Compiled] | None = None
        self._schemas()  # fail now (on the driver) on a bad schema or missing fastavro

    def __getstate__(self) -> dict[str, Any]:
        return {"writer": self._writer_text, "reader": self._reader_text}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._writer_text, self._reader_text = state["writer"], state["reader"]
        self._compiled = None  # compiled again, lazily, in this process

    def __repr__(self) -> str:
        reader = "" if self._reader_text is None else f", reader_schema={self._reader_text}"
        return f"AvroSerde({self._writer_text}{reader})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AvroSerde) and self.__getstate__() == other.__getstate__()

    def __hash__(self) -> int:
        return hash((self._writer_text, self._reader_text))

    def _schemas(self) -> tuple[Compiled, Compiled]:
        """(writer, output): the output is the reader schema if there is one."""
        if self._compiled is None:
            writer = compile_schema(self._writer_text)
            output = writer if self._reader_text is None else compile_schema(self._reader_text)
            self._compiled = (writer, output)
        return self._compiled

    def fields(self) -> list[str]:
        """The (reader) record's field names, or ``["value"]``."""
        return list(self._schemas()[1].names)

    def arrow_schema(self) -> pa.Schema:
        """Arrow types of :meth:`fields` (see the module docs for the mapping)."""
        return self._schemas()[1].arrow_schema

    def deserialize(self, data: bytes | None) -> tuple[Any, ...]:
        """One record, shaped as a row of :meth:`deserialize_batch`."""
        return single("AvroSerde", self.deserialize_batch([data]))

    def deserialize_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        """Decode each body with fastavro, then build the Arrow batch in one call."""
        writer, output = self._schemas()
        read_body = body_reader(writer, output)
        return decode_batch(values, lambda data: read_body(data, 0), output)

    def serialize(self, values: Sequence[Any]) -> bytes:
        """Field values (as :meth:`deserialize` returns them) to an Avro body.

        Bodies are written with ``writer_schema``; its fields that :meth:`fields` lacks
        take their defaults.
        """
        writer, output = self._schemas()
        return write_body(writer, output, values, "AvroSerde")


__all__ = ["AvroSerde", "ConfluentAvroSerde"]
