"""Tuples to Kafka records: which values the value serde gets, and the record key (pure).

Values: the tuple's fields in their order, or the ``fields`` the user chose. A serde whose
field names are all among them gets its values by name (so ``JsonSerde({"word": str,
"count": int})`` takes ``word`` and ``count`` from any tuple that has them); any other serde
gets them in order. A schemaless ``JsonSerde()`` (the default) writes one JSON object of
the chosen fields.

Keys: a field name (its value: ``bytes`` as is, ``str`` as UTF-8, anything else as its
``str()`` in UTF-8), a function ``tuple -> bytes | str | None``, or ``None`` (no key: the
producer spreads records over partitions).

Example:
    >>> from kstorm.tuple import Fields, Tuple
    >>> encode = RecordEncoder(JsonSerde(), key="word", fields=None, where="KafkaSink 'out'")
    >>> encode(Tuple(["storm", 3], Fields("word", "count"), "count"))
    (b'storm', b'{"word":"storm","count":3}')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstorm.errors import ConfigError, KstormError, SinkError
from kstorm.tuple import Tuple
from serdes.base import Serde
from serdes.json import JsonSerde

KeySpec = str | Callable[[Tuple], bytes | str | None] | None


def is_schemaless_json(serde: Serde) -> bool:
    """Whether ``serde`` is ``JsonSerde()`` without a schema (one JSON text field)."""
    return isinstance(serde, JsonSerde) and not serde.__getstate__()["schema"]


def check_fields(serde: Serde, fields: Sequence[str] | None, where: str) -> tuple[str, ...] | None:
    """``fields`` as a tuple, checked against ``serde`` (ConfigError when they cannot fit)."""
    if fields is None:
        return None
    if isinstance(fields, str) or not isinstance(fields, Sequence) or not fields or any(
            not isinstance(f, str) or not f for f in fields):
        msg = f"{where}: fields must be a non-empty list of field names, got {fields!r}"
        raise ConfigError(msg)
    if len(set(fields)) != len(fields):
        msg = f"{where}: fields has duplicates: {list(fields)}"
        raise ConfigError(msg)
    wanted = serde.fields()
    if not is_schemaless_json(serde) and not set(wanted) <= set(fields) \
            and len(wanted) != len(fields):
        msg = (f"{where}: the value serde {serde!r} writes fields {wanted}; fields must "
               f"include them or be as many, got {list(fields)}")
        raise ConfigError(msg)
    return tuple(fields)


def check_key(key: Any, where: str) -> KeySpec:
    """``key`` if it is a field name, a callable or None, else a ConfigError."""
    if key is None or callable(key) or (isinstance(key, str) and key):
        return key  # type: ignore[no-any-return]
    msg = f"{where}: key must be a field name, a function tuple -> bytes|str|None, or None, " \
          f"got {key!r}"
    raise ConfigError(msg)


class RecordEncoder:
    """``tuple -> (key bytes | None, value bytes)``; raises SinkError naming what failed."""

    def __init__(self, serde: Serde, *, key: KeySpec, fields: Sequence[str] | None,
                 where: str) -> None:
        self.serde, self.key, self.where = serde, key, where
        self.fields = check_fields(serde, fields, where)
        self.as_object = is_schemaless_json(serde)
        self.wanted = serde.fields()

    def __call__(self, tuple_: Tuple) -> tuple[bytes | None, bytes]:
        return self.key_of(tuple_), self.value_of(tuple_)

    def value_of(self, tuple_: Tuple) -> bytes:
        """The serialized value of ``tuple_`` (see the module docstring)."""
        names = self.fields if self.fields is not None else tuple(tuple_.fields)
        values = [self._get(tuple_, name) for name in names]
        if self.as_object:
            payload: list[Any] = [dict(zip(names, values, strict=True))]
        elif set(self.wanted) <= set(names):
            by_name = dict(zip(names, values, strict=True))
            payload = [by_name[name] for name in self.wanted]
        else:
            payload = values
        try:
            return self.serde.serialize(payload)
        except KstormError as exc:
            msg = f"{self.where}: cannot serialize tuple {_show(tuple_)}: {exc}"
            raise SinkError(msg) from exc
        except (TypeError, ValueError, OverflowError) as exc:  # a serde's own type checks
            msg = f"{self.where}: cannot serialize tuple {_show(tuple_)}: " \
                  f"{type(exc).__name__}: {exc}"
            raise SinkError(msg) from exc

    def key_of(self, tuple_: Tuple) -> bytes | None:
        """The record key of ``tuple_``, or None."""
        if self.key is None:
            return None
        if callable(self.key):
            try:
                raw = self.key(tuple_)
            except Exception as exc:
                msg = f"{self.where}: the key function raised on tuple {_show(tuple_)}: " \
                      f"{type(exc).__name__}: {exc}"
                raise SinkError(msg) from exc
            if raw is not None and not isinstance(raw, (bytes, str)):
                msg = f"{self.where}: the key function must return bytes, str or None, " \
                      f"got {type(raw).__name__} {raw!r:.60}"
                raise SinkError(msg)
        else:
            raw = self._get(tuple_, self.key)
        return key_bytes(raw)

    def _get(self, tuple_: Tuple, name: str) -> Any:
        if name not in tuple_.fields:
            msg = f"{self.where}: tuple from {tuple_.source_component!r} has no field " \
                  f"{name!r}; its fields are {list(tuple_.fields)}"
            raise SinkError(msg)
        return tuple_.get_value_by_field(name)


def key_bytes(value: Any) -> bytes | None:
    """A key value as bytes: bytes as is, str as UTF-8, None as None, else ``str()``."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return str(value).encode()


def _show(tuple_: Tuple) -> str:
    return f"{dict(zip(tuple_.fields, tuple_.values, strict=False))!r:.200}"
