"""Why a JSON record is bad, in words: the per-record (stdlib ``json``) diagnosis.

Arrow decides *whether* a record is bad (see ``_json_read``); this module only says *why*,
so its messages name the field and what was expected and got.
"""

from __future__ import annotations

import json
from typing import Any

from serdes._json_types import JsonType, json_kind


class _Object(dict[str, Any]):
    """A parsed JSON object that remembers keys it saw more than once."""

    duplicates: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return obj


def _reject_constant(name: str) -> Any:
    msg = f"{name} is not valid JSON"
    raise ValueError(msg)


def _loads(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_object, parse_constant=_reject_constant)


def load_json_text(data: bytes) -> tuple[str | None, str | None]:
    """``(text, None)`` if ``data`` is one valid JSON value in UTF-8, else ``(None, reason)``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 at byte {exc.start}"
    try:
        _loads(text)
    except RecursionError:
        return None, "invalid JSON: nested too deeply"
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"
    return text, None


def diagnose(data: bytes, types: tuple[tuple[str, JsonType], ...]) -> tuple[str, str] | None:
    """``(error_type, message)`` if the stdlib parser sees what is wrong with ``data``."""
    if not data.strip(b" \t\r\n"):
        return "MalformedJSON", "empty value: expected a JSON object"
    text, error = load_json_text(data)
    if error is not None or text is None:
        return "MalformedJSON", str(error)
    document = _loads(text)
    if not isinstance(document, dict):
        return "MalformedJSON", f"expected a JSON object, got {json_kind(document)}"
    for name, json_type in types:
        value = document.get(name)
        if value is not None and not json_type.accepts(value):
            got = f"{json_kind(value)} {json.dumps(value)[:60]}"
            return "SchemaMismatch", f"field {name!r}: expected {json_type.name}, got {got}"
    for name in getattr(document, "duplicates", ()):
        return "MalformedJSON", f"field {name!r} appears more than once"
    return None


def explain(data: bytes, types: tuple[tuple[str, JsonType], ...], reason: str) -> tuple[str, str]:
    """``(error_type, message)`` for a record Arrow rejected with ``reason``."""
    diagnosis = diagnose(data, types)
    if diagnosis is not None:
        return diagnosis
    error_type = "MalformedJSON" if reason.startswith("JSON parse error") else "SchemaMismatch"
    return error_type, reason
