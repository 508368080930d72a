"""The serde protocol: bytes <-> tuple fields.

A serde is a picklable *declaration* (built on the driver, shipped to executors). Anything
expensive (parsed schemas, registry clients) is created lazily on first use inside the
executor and cached on a private attribute that is dropped when pickled.

Deserialization is vectorized: the Kafka spout hands a whole fetched batch of values to
``deserialize_batch`` and gets back an Arrow record batch of the good records plus the
reasons for the bad ones. A bad record is never an exception out of ``deserialize_batch``:
it becomes a :class:`DecodeFailure` that the runtime routes to the dead-letter path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class DecodeFailure:
    """Why the record at ``index`` of the input batch could not be deserialized."""

    index: int
    error_type: str  # e.g. "MalformedJSON", "UnknownSchemaId", "SchemaMismatch", "MissingField"
    message: str


@dataclass(slots=True)
class DecodeResult:
    """The outcome of deserializing a batch of ``n`` values.

    ``batch`` holds one row per *good* input, in input order, with the serde's
    ``arrow_schema``; ``good`` lists the input indices of those rows; ``failures`` the
    others. ``len(good) + len(failures) == n`` always.
    """

    batch: pa.RecordBatch
    good: list[int]
    failures: list[DecodeFailure] = field(default_factory=list)


@runtime_checkable
class Serde(Protocol):
    """Turns bytes into named, typed fields and back."""

    def fields(self) -> list[str]:
        """Names of the fields a record deserializes to, in order."""
        ...

    def arrow_schema(self) -> pa.Schema:
        """Arrow types of those fields (same order as :meth:`fields`)."""
        ...

    def deserialize(self, data: bytes | None) -> tuple[Any, ...]:
        """One record to field values; raises :class:`kstorm.errors.SerdeError`."""
        ...

    def deserialize_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        """Many records at once (the fast path the spout uses)."""
        ...

    def serialize(self, values: Sequence[Any]) -> bytes:
        """Field values (in :meth:`fields` order) to bytes; raises ``SerdeError``."""
        ...
