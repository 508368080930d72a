"""Decoding many Avro records into one Arrow batch; the shared part of the Avro serdes."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from kstorm.errors import SerdeError
from serdes._avro_schema import Compiled, fastavro
from serdes._batch import check_arity
from serdes.base import DecodeFailure, DecodeResult


class BadRecord(SerdeError):
    """Raised inside a per-record reader: this record is bad for ``error_type``.

    Never leaves :func:`decode_batch`: the record becomes a dead letter with the reason.
    """

    def __init__(self, message: str, *, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def body_reader(writer: Compiled, reader: Compiled | None) -> Callable[[bytes, int], Any]:
    """A function decoding the schemaless body ``data[start:]``; every byte must be used."""
    read = fastavro().schemaless_reader
    writer_schema = writer.read_parsed
    reader_schema = None
    if reader is not None and reader.text != writer.text:
        reader_schema = reader.read_parsed

    def read_body(data: bytes, start: int) -> Any:
        source = io.BytesIO(data)
        if start:
            source.seek(start)
        # positional: return_record_name=True, return_record_name_override=True
        value = read(source, writer_schema, reader_schema, True, True)
        left = len(data) - source.tell()
        if left:
            msg = f"{left} bytes left over after the record (written with another schema?)"
            raise BadRecord(msg, error_type="SchemaMismatch")
        return value

    return read_body


def decode_batch(
    values: Sequence[bytes | None], read: Callable[[bytes], Any], output: Compiled
) -> DecodeResult:
    """Decode each value with ``read``; a ``None`` value (tombstone) is a row of nulls."""
    rows: list[Any] = []
    good: list[int] = []
    failures: list[DecodeFailure] = []
    convert = output.to_arrow
    for index, value in enumerate(values):
        if value is None:
            rows.append(None)
            good.append(index)
            continue
        if not isinstance(value, (bytes, bytearray, memoryview)):
            message = f"expected bytes, got {type(value).__name__}"
            failures.append(DecodeFailure(index, "SchemaMismatch", message))
            continue
        try:
            decoded = read(value if type(value) is bytes else bytes(value))
            rows.append(
                convert(decoded) if convert is not None and decoded is not None else decoded
            )
        except BadRecord as exc:
            failures.append(DecodeFailure(index, exc.error_type, str(exc)))
            continue
        except SerdeError:
            raise  # not a bad record: e.g. the schema registry cannot be reached
        except EOFError as exc:
            detail = f": {exc}" if str(exc) else ""
            failures.append(DecodeFailure(index, "Truncated", f"the record ends early{detail}"))
            continue
        except Exception as exc:  # fastavro's errors for corrupt data vary in type
            message = f"does not match the schema: {type(exc).__name__}: {exc}"
            failures.append(DecodeFailure(index, "SchemaMismatch", message))
            continue
        good.append(index)
    return _assemble(rows, good, failures, output)


def _assemble(
    rows: list[Any], good: list[int], failures: list[DecodeFailure], output: Compiled
) -> DecodeResult:
    """Arrow batch of ``rows``; rows Arrow cannot hold (e.g. int overflow) become failures."""
    try:
        return DecodeResult(_to_batch(rows, output), good, failures)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass  # find the rows at fault, one by one
    kept_rows, kept = [], []
    for row, index in zip(rows, good, strict=True):
        try:
            _to_batch([row], output)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            message = f"a value does not fit its Arrow type: {exc}"
            failures.append(DecodeFailure(index, "SchemaMismatch", message))
        else:
            kept_rows.append(row)
            kept.append(index)
    failures.sort(key=lambda failure: failure.index)
    return DecodeResult(_to_batch(kept_rows, output), kept, failures)


def _to_batch(rows: list[Any], output: Compiled) -> pa.RecordBatch:
    schema = output.arrow_schema
    if not output.is_record:
        return pa.RecordBatch.from_arrays([pa.array(rows, type=schema[0].type)], schema=schema)
    struct = pa.array(rows, type=pa.struct(list(schema)))
    return pa.RecordBatch.from_arrays(struct.flatten(), schema=schema)


def write_body(writer: Compiled, output: Compiled, values: Sequence[Any], serde: str) -> bytes:
    """Encode ``values`` (the fields of ``output``, shaped as it reads them) with ``writer``."""
    if not isinstance(values, (list, tuple)) or len(values) != len(output.names):
        check_arity(serde, list(output.names), values)
    datum = dict(zip(output.names, values, strict=True)) if output.is_record else values[0]
    sink = io.BytesIO()
    try:
        if output.to_avro is not None and datum is not None:
            datum = output.to_avro(datum)
        fastavro().schemaless_writer(sink, writer.parsed, datum, strict_allow_default=True)
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
        msg = f"{serde}.serialize: values {datum!r:.120} do not fit the writer schema: {exc}"
        raise SerdeError(msg) from exc
    return sink.getvalue()
