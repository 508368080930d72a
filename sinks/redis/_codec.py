"""Values to the text Redis stores, and back.

Codec ``"json"`` (default) stores compact JSON, so a number is stored as a plain
decimal that ``redis-cli`` shows as-is and Lua's ``tonumber`` reads (``42``,
``0.5``), and a record as a JSON object (``{"n":2,"word":"storm"}``, keys sorted).
Codec ``"string"`` stores ``str`` values verbatim.

NumPy/pandas scalars (what Spark hands back) become Python numbers; datetimes
become ISO-8601 strings. NaN and infinities are refused: JSON has no such numbers.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import numbers
from typing import Any, Literal

from kstorm.errors import SinkError

ValueCodec = Literal["json", "string"]
VALUE_CODECS: tuple[str, ...] = ("json", "string")


def plain(value: Any) -> Any:
    """``value`` with NumPy scalars and datetimes made JSON-friendly."""
    if isinstance(value, bool | str | None):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return value


def _default(value: Any) -> Any:
    converted = plain(value)
    if converted is value:
        msg = f"{type(value).__name__} is not JSON serializable"
        raise TypeError(msg)
    return converted


_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False,
                        ensure_ascii=False, default=_default)


def number(value: Any, where: str) -> int | float:
    """``value`` as a finite Python number, or a SinkError naming ``where``."""
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return value  # the common case, without the ABC checks below
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{where}: this merge needs a number, got {value!r}"
        raise SinkError(msg)
    if isinstance(value, float) and not math.isfinite(value):
        msg = f"{where}: cannot store the non-finite number {value!r}"
        raise SinkError(msg)
    return value


def encode(value: Any, codec: ValueCodec, where: str = "") -> str:
    """The text stored for ``value``; ``where`` (if given) names the key in errors.

    Example:
        >>> encode({"word": "storm", "n": 2}, "json", "k")
        '{"n":2,"word":"storm"}'
    """
    if codec == "string":
        if not isinstance(value, str):
            msg = f"{where}{': ' if where else ''}value_codec='string' needs str values, " \
                  f"got {value!r}"
            raise SinkError(msg)
        return value
    if type(value) is int:  # fast paths giving exactly what json.dumps gives
        return int.__repr__(value)
    if type(value) is float and math.isfinite(value):
        return float.__repr__(value)
    try:
        return _JSON.encode(plain(value))
    except (TypeError, ValueError) as exc:
        msg = f"{where}{': ' if where else ''}cannot store {value!r} as JSON ({exc})"
        raise SinkError(msg) from exc


def decode(raw: bytes | str | None, codec: ValueCodec) -> Any:
    """The value for stored text; text that is not JSON comes back as a string."""
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    if codec == "string":
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


__all__ = ["VALUE_CODECS", "ValueCodec", "decode", "encode", "number", "plain"]
