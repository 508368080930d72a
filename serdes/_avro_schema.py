"""Loading, parsing and compiling Avro schemas, once per process.

``compile_schema`` is cached by the schema's canonical JSON text, so every task in an
executor that unpickles a serde reuses the parsed schema and its Arrow converters.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from kstorm.errors import ConfigError, MissingDependencyError
from serdes._avro_arrow import AvroArrow, Convert

INSTALL_HINT = "pip install kstorm[avro]"


def fastavro() -> Any:
    """The ``fastavro`` module, or :class:`MissingDependencyError` saying what to install."""
    try:
        import fastavro as module
    except ImportError as exc:
        msg = f"Avro serdes need fastavro, which is not installed: {INSTALL_HINT}"
        raise MissingDependencyError(msg) from exc
    return module


def schema_text(source: Any, what: str) -> str:
    """Canonical JSON text of a schema given as a dict, JSON text, or path to an .avsc file."""
    if isinstance(source, (str, os.PathLike)):
        text = str(source)
        if isinstance(source, os.PathLike) or text.endswith(".avsc") or os.path.isfile(text):
            try:
                text = Path(text).read_text(encoding="utf-8")
            except OSError as exc:
                msg = f"Avro {what}: cannot read schema file {str(source)!r}: {exc}"
                raise ConfigError(msg) from exc
        try:
            source = json.loads(text)
        except ValueError:
            source = text  # a bare type name such as "string"
    if not isinstance(source, (dict, list, str)):
        msg = f"Avro {what}: expected a schema dict, JSON text or .avsc path, got {source!r:.80}"
        raise ConfigError(msg)
    return json.dumps(source, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Compiled:
    """A parsed schema and how its values become Arrow rows (and back)."""

    text: str
    parsed: Any  # fastavro's parsed schema (for writing: logical types as Python objects)
    read_parsed: Any  # the same, with the logical types Arrow builds from plain ints removed
    is_record: bool  # a top-level record becomes one field per record field
    arrow_schema: pa.Schema
    names: tuple[str, ...]  # the field names of ``arrow_schema``
    to_arrow: Convert  # from values decoded with ``read_parsed``
    to_avro: Convert


@functools.lru_cache(maxsize=256)
def compile_schema(text: str) -> Compiled:
    """Parse and compile a schema's canonical text (see :func:`schema_text`)."""
    avro = fastavro()
    named: dict[str, Any] = {}
    read_named: dict[str, Any] = {}
    try:
        parsed = avro.parse_schema(json.loads(text), named_schemas=named)
        read_parsed = avro.parse_schema(_plain(json.loads(text)), named_schemas=read_named)
    except Exception as exc:  # fastavro raises several types for a bad schema
        msg = f"Avro: invalid schema {text[:200]}: {exc}"
        raise ConfigError(msg) from exc
    mapper = AvroArrow(named)
    top = mapper.resolve(parsed)
    is_record = isinstance(top, dict) and top.get("type") == "record"
    if is_record:
        fields = [pa.field(f["name"], mapper.arrow_type(f["type"])) for f in top["fields"]]
    else:
        fields = [pa.field("value", mapper.arrow_type(parsed))]
    return Compiled(
        text=text,
        parsed=parsed,
        read_parsed=read_parsed,
        is_record=is_record,
        arrow_schema=pa.schema(fields),
        names=tuple(field.name for field in fields),
        to_arrow=AvroArrow(read_named).to_arrow(read_parsed),
        to_avro=mapper.to_avro(parsed),
    )


# Arrow builds these columns from the underlying ints (days, ms, us) far faster than
# fastavro creates date/datetime objects that Arrow then takes apart again.
_FROM_INTS = {
    "date": "int",
    "time-millis": "int",
    "time-micros": "long",
    "timestamp-millis": "long",
    "timestamp-micros": "long",
    "local-timestamp-millis": "long",
    "local-timestamp-micros": "long",
    "uuid": "string",
}


def _plain(schema: Any, in_union: bool = False) -> Any:
    """``schema`` without the logical types in ``_FROM_INTS``.

    They stay inside unions of several types, where the decoded Python type is what tells
    the branches apart.
    """
    if isinstance(schema, list):
        several = sum(1 for branch in schema if branch != "null") > 1
        return [_plain(branch, several) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    logical = schema.get("logicalType")
    if not in_union and isinstance(logical, str) and _FROM_INTS.get(logical) == schema.get("type"):
        return schema["type"]
    schema = dict(schema)
    if schema.get("type") == "record":
        schema["fields"] = [dict(f, type=_plain(f["type"])) for f in schema["fields"]]
    elif schema.get("type") == "array":
        schema["items"] = _plain(schema["items"])
    elif schema.get("type") == "map":
        schema["values"] = _plain(schema["values"])
    elif isinstance(schema.get("type"), (dict, list)):
        schema["type"] = _plain(schema["type"], in_union)
    return schema
