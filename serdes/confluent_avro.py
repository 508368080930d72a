"""Avro in the Confluent wire format, with writer schemas from a schema registry.

A value is ``0x00`` (the magic byte), the writer schema's registry id (4 bytes, big
endian), then the schemaless Avro body. Records are read into one *reader* schema (given,
or the subject's latest version when first needed), so records written with older or
newer compatible schemas come out with the same fields. Extra failure types:
``BadMagicByte`` and ``UnknownSchemaId``; a registry that cannot be reached is not a bad
record and raises :class:`SerdeError` (the task fails and is retried).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from kstorm.errors import ConfigError, MissingDependencyError, SerdeError
from serdes._avro_batch import BadRecord, body_reader, decode_batch, write_body
from serdes._avro_schema import INSTALL_HINT, Compiled, compile_schema, schema_text
from serdes._batch import single
from serdes.base import DecodeResult

MAGIC = 0
HEADER = 5
_CLIENTS: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def schema_registry() -> Any:
    """``confluent_kafka.schema_registry``, or :class:`MissingDependencyError`."""
    try:
        with warnings.catch_warnings():
            _quiet_authlib()
            module = importlib.import_module("confluent_kafka.schema_registry")
    except ImportError as exc:
        msg = (
            f"ConfluentAvroSerde needs confluent-kafka's schema registry client, which cannot "
            f"be imported ({exc}): {INSTALL_HINT}"
        )
        raise MissingDependencyError(msg) from exc
    return module


def registry_client(url: str, config: Mapping[str, Any]) -> Any:
    """One shared client per (url, config) in this process (``mock://`` URLs included)."""
    client_type = schema_registry().SchemaRegistryClient
    key = (url, tuple(sorted((str(k), repr(v)) for k, v in config.items())))
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            build = getattr(client_type, "new_client", client_type)
            _CLIENTS[key] = build({**config, "url": url})
        return _CLIENTS[key]


def _quiet_authlib() -> None:
    """Silence authlib's warning about its own httpx integration during the import.

    ``authlib.deprecate`` forces its warnings to "always" when imported, so it is imported
    first and the "ignore" filter goes in front of it (both undone when the caller's
    ``catch_warnings`` block ends).
    """
    with contextlib.suppress(ImportError):
        import authlib.deprecate  # noqa: F401
    warnings.filterwarnings("ignore", message="The httpx module is deprecated")


class ConfluentAvroSerde:
    r"""Confluent-framed Avro backed by ``confluent_kafka``'s ``SchemaRegistryClient``.

    Args:
        registry_url: e.g. ``"http://registry:8081"``; ``"mock://name"`` is an in-process
            registry for tests (shared by serdes with the same URL in one process only).
        subject: registry subject, e.g. ``"orders-value"``; needed to serialize and when
            there is no ``reader_schema``.
        reader_schema: the schema records are read into (dict, JSON text or .avsc path).
        auto_register: ``serialize`` registers the schema under ``subject`` if needed
            (else it must already be registered).
        registry_config: more ``SchemaRegistryClient`` settings (auth, TLS).

    Example:
        >>> schema = {"type": "record", "name": "Order", "fields": [
        ...     {"name": "id", "type": "long"}]}
        >>> serde = ConfluentAvroSerde("mock://doc", subject="orders-value",
        ...                            reader_schema=schema)
        >>> data = serde.serialize([7])
        >>> data[:1], serde.deserialize(data)
        (b'\x00', (7,))
    """

    def __init__(
        self,
        registry_url: str,
        *,
        subject: str | None = None,
        reader_schema: Any = None,
        auto_register: bool = True,
        registry_config: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(registry_url, str) or "://" not in registry_url:
            msg = f"ConfluentAvroSerde: registry_url must be a URL, got {registry_url!r}"
            raise ConfigError(msg)
        if subject is not None and (not isinstance(subject, str) or not subject):
            msg = f"ConfluentAvroSerde: subject must be a non-empty string, got {subject!r}"
            raise ConfigError(msg)
        if reader_schema is None and subject is None:
            msg = "ConfluentAvroSerde: give reader_schema= or subject= (to use its latest schema)"
            raise ConfigError(msg)
        config = dict(registry_config or {})
        if "url" in config:
            msg = "ConfluentAvroSerde: pass the URL as registry_url, not in registry_config"
            raise ConfigError(msg)
        self._state: dict[str, Any] = {
            "url": registry_url,
            "subject": subject,
            "reader": None
            if reader_schema is None
            else schema_text(reader_schema, "reader_schema"),
            "reader_id": None,
            "auto_register": bool(auto_register),
            "config": config,
        }
        self._reset()
        if self._state["reader"] is not None:
            compile_schema(self._state["reader"])  # fail early on a bad schema / no fastavro

    def _reset(self) -> None:
        self._client: Any = None
        self._readers: dict[int, Callable[[bytes, int], Any]] = {}  # schema id -> body reader

    def __getstate__(self) -> dict[str, Any]:
        self._output()  # resolve the reader schema on the driver: executors agree on fields
        return dict(self._state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._state = dict(state)
        self._reset()

    def __repr__(self) -> str:
        s = self._state
        config = f", registry_config keys={sorted(s['config'])}" if s["config"] else ""
        return f"ConfluentAvroSerde({s['url']!r}, subject={s['subject']!r}{config})"

    def _registry(self) -> Any:
        if self._client is None:
            self._client = registry_client(self._state["url"], self._state["config"])
        return self._client

    def _output(self) -> Compiled:
        """The reader schema, fetched as the subject's latest version if not given."""
        if self._state["reader"] is None:
            subject = self._state["subject"]
            client = self._registry()
            try:
                latest = client.get_latest_version(subject)
            except Exception as exc:
                msg = f"ConfluentAvroSerde: no latest schema for subject {subject!r}: {exc}"
                raise SerdeError(msg) from exc
            self._state["reader"] = schema_text(latest.schema.schema_str, "reader_schema")
            self._state["reader_id"] = latest.schema_id
        return compile_schema(self._state["reader"])

    def _body_reader(self, schema_id: int, output: Compiled) -> Callable[[bytes, int], Any]:
        """Decoder for bodies written with the schema registered as ``schema_id`` (cached)."""
        if schema_id in self._readers:
            return self._readers[schema_id]
        client = self._registry()
        try:
            schema = client.get_schema(schema_id)
        except Exception as exc:
            if getattr(exc, "http_status_code", None) == 404:
                msg = f"schema id {schema_id} is not in the registry {self._state['url']}"
                raise BadRecord(msg, error_type="UnknownSchemaId") from exc
            msg = f"ConfluentAvroSerde: cannot fetch schema id {schema_id}: {exc}"
            raise SerdeError(msg) from exc
        if (schema.schema_type or "AVRO") != "AVRO" or schema.references:
            kind = "uses schema references" if schema.references else f"is {schema.schema_type}"
            msg = f"schema id {schema_id} {kind}, not plain Avro"
            raise BadRecord(msg, error_type="SchemaMismatch")
        writer = compile_schema(schema_text(schema.schema_str, f"schema id {schema_id}"))
        self._readers[schema_id] = body_reader(writer, output)
        return self._readers[schema_id]

    def _read(self, data: bytes, output: Compiled) -> Any:
        if not data:
            msg = "empty value: expected a 5-byte Confluent header"
            raise BadRecord(msg, error_type="Truncated")
        if data[0] != MAGIC:
            msg = f"first byte is {data[0]}, expected the magic byte {MAGIC}"
            raise BadRecord(msg, error_type="BadMagicByte")
        if len(data) < HEADER:
            msg = f"{len(data)} bytes: the 5-byte Confluent header is cut short"
            raise BadRecord(msg, error_type="Truncated")
        read_body = self._body_reader(int.from_bytes(data[1:HEADER], "big"), output)
        return read_body(data, HEADER)

    def fields(self) -> list[str]:
        """The reader record's field names, or ``["value"]``."""
        return list(self._output().names)

    def arrow_schema(self) -> pa.Schema:
        """Arrow types of :meth:`fields` (see ``serdes.avro`` for the mapping)."""
        return self._output().arrow_schema

    def deserialize(self, data: bytes | None) -> tuple[Any, ...]:
        """One record, shaped as a row of :meth:`deserialize_batch`."""
        return single("ConfluentAvroSerde", self.deserialize_batch([data]))

    def deserialize_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        """Decode each record with its writer schema, into the reader schema."""
        output = self._output()
        return decode_batch(values, lambda data: self._read(data, output), output)

    def serialize(self, values: Sequence[Any]) -> bytes:
        """Field values to header + Avro body, written with the reader schema's id."""
        output = self._output()
        body = write_body(output, output, values, "ConfluentAvroSerde")
        return bytes([MAGIC]) + self._schema_id().to_bytes(4, "big") + body

    def _schema_id(self) -> int:
        if self._state["reader_id"] is not None:
            return int(self._state["reader_id"])
        subject = self._state["subject"]
        if subject is None:
            msg = "ConfluentAvroSerde.serialize needs subject= to register or look up its schema"
            raise SerdeError(msg)
        client = self._registry()
        schema = schema_registry().Schema(self._state["reader"], "AVRO")
        try:
            if self._state["auto_register"]:
                schema_id = client.register_schema(subject, schema)
            else:
                schema_id = client.lookup_schema(subject, schema).schema_id
        except Exception as exc:
            msg = f"ConfluentAvroSerde: cannot register or find the schema under {subject!r}: {exc}"
            raise SerdeError(msg) from exc
        self._state["reader_id"] = schema_id
        return int(schema_id)
