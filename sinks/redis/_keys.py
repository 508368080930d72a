"""Redis key names: the user's key templates and kstorm's own bookkeeping keys.

Everything kstorm writes besides the user's values lives under one reserved
prefix, per topology and sink (see the layout in ``sinks/redis/__init__.py``)::

    kstorm:<topology>:<sink>:offsets          the batch record (txid + source end offsets)
    kstorm:<topology>:<sink>:txid             plain keys: key -> txid that last wrote it
    kstorm:<topology>:<sink>:prev             plain keys: key -> value before that txid
    kstorm:<topology>:<sink>:txid:<key>       hash <key>: field -> txid
    kstorm:<topology>:<sink>:prev:<key>       hash <key>: field -> value before that txid
    kstorm:<topology>:<sink>:lastkeys         opaque mode: the keys the last txid wrote
    kstorm:<topology>:<sink>:stage:<txid>     a very large batch, uploaded before its commit
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kstorm.errors import ConfigError, SinkError

RESERVED_PREFIX = "kstorm:"
TXID_FIELD = "txid"
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass(frozen=True)
class KeyTemplate:
    """A key (or hash field) built from a row's fields, ``str.format`` style.

    Format specs and conversions work (``{ts:%Y-%m-%d}``, ``{id!r}``); attribute and
    index access and positional fields do not.

    Example:
        >>> KeyTemplate("counts:{word}:{window_start}").render({"word": "a", "window_start": 0})
        'counts:a:0'
    """

    template: str
    fields: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template:
            msg = f"RedisSink: a key template must be a non-empty string, got {self.template!r}"
            raise ConfigError(msg)
        try:
            names = [name for _, name, _, _ in string.Formatter().parse(self.template)
                     if name is not None]
        except ValueError as exc:
            msg = f"RedisSink: bad key template {self.template!r} ({exc})"
            raise ConfigError(msg) from exc
        for name in names:
            if not name or name.isdigit() or "." in name or "[" in name:
                msg = f"RedisSink: key template {self.template!r} must name row fields " \
                      f"plainly ({{field}} or {{field:spec}}), got {{{name}}}"
                raise ConfigError(msg)
        object.__setattr__(self, "fields", tuple(dict.fromkeys(names)))

    def render(self, row: Mapping[str, Any]) -> str:
        """The key for ``row``; a SinkError names a missing or null field."""
        for name in self.fields:
            if row.get(name) is None:
                got = "is null" if name in row else f"is missing; the row has {sorted(row)}"
                msg = f"RedisSink: key template {self.template!r}: field {name!r} {got}"
                raise SinkError(msg)
        return self.template.format_map(row)


def check_name(kind: str, name: str) -> str:
    """``name`` if it is a valid topology or sink id, else a ConfigError."""
    if not isinstance(name, str) or not _NAME.match(name):
        msg = f"RedisSink: {kind} must be letters, digits, '.', '_' or '-', got {name!r}"
        raise ConfigError(msg)
    return name


@dataclass(frozen=True)
class Namespace:
    """kstorm's bookkeeping keys for one sink of one topology."""

    topology: str
    sink_id: str

    @property
    def prefix(self) -> str:
        """``kstorm:<topology>:<sink>:``, the start of every bookkeeping key."""
        return f"{RESERVED_PREFIX}{self.topology}:{self.sink_id}:"

    @property
    def record(self) -> str:
        """The hash holding the last committed txid and the source end offsets."""
        return self.prefix + "offsets"

    def meta(self, kind: str, key: str, field: str) -> tuple[str, str]:
        """``(hash, field)`` holding the ``"txid"`` or ``"prev"`` of a value.

        Example:
            >>> Namespace("wc", "redis").meta("txid", "counts:a", "")
            ('kstorm:wc:redis:txid', 'counts:a')
        """
        if field:
            return f"{self.prefix}{kind}:{key}", field
        return f"{self.prefix}{kind}", key

    def stage(self, txid: int) -> str:
        """The list a very large batch is uploaded to before its commit."""
        return f"{self.prefix}stage:{txid}"


STATE_PREFIX = "@"  # record fields holding runtime state, not offsets (not a topic name)


def offset_fields(offsets: Mapping[str, Mapping[int, int]]) -> list[str]:
    """Flatten ``{topic: {partition: end}}`` to ``["topic/partition", "end", ...]``.

    Example:
        >>> offset_fields({"words": {0: 42}})
        ['words/0', '42']
    """
    flat: list[str] = []
    for topic, partitions in offsets.items():
        if not isinstance(topic, str) or not _TOPIC.match(topic):
            msg = f"RedisSink: offsets need Kafka topic names, got {topic!r}"
            raise SinkError(msg)
        for partition, end in partitions.items():
            for what, number in (("partition", partition), ("offset", end)):
                if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                    msg = f"RedisSink: offsets of {topic!r}: {what} must be an int >= 0, " \
                          f"got {number!r}"
                    raise SinkError(msg)
            flat += [f"{topic}/{partition}", str(end)]
    return flat


def parse_record(raw: Mapping[Any, Any]) -> tuple[int | None, dict[str, dict[int, int]]]:
    """The ``(txid, offsets)`` of a batch record hash as read from Redis."""
    txid: int | None = None
    offsets: dict[str, dict[int, int]] = {}
    for name, value in raw.items():
        key = name.decode() if isinstance(name, bytes) else name
        if key == TXID_FIELD:
            txid = int(value)
            continue
        if key.startswith(STATE_PREFIX):
            continue  # runtime state stored with the offsets (see RedisSink.committed_state)
        topic, _, partition = key.rpartition("/")
        offsets.setdefault(topic, {})[int(partition)] = int(value)
    return txid, offsets


__all__ = ["KeyTemplate", "Namespace", "RESERVED_PREFIX", "check_name", "offset_fields",
           "parse_record"]
