"""Reading results back: ``RedisSink.read_all``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._codec import ValueCodec, decode
from ._keys import RESERVED_PREFIX

if TYPE_CHECKING:
    import redis

_GLOB_SPECIAL = "*?[]\\"


def read_all(client: redis.Redis, prefix: str, codec: ValueCodec) -> dict[str, Any]:
    """Values of the string and hash keys starting with ``prefix``, decoded.

    kstorm's own keys (``kstorm:...``) are left out. A string key maps to its value,
    a hash key to ``{field: value}``.
    """
    pattern = "".join("\\" + c if c in _GLOB_SPECIAL else c for c in prefix) + "*"
    names = sorted(k.decode() for k in client.scan_iter(match=pattern, count=1000))
    names = [n for n in names if not n.startswith(RESERVED_PREFIX)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.type(name)
    kinds = pipe.execute()
    readable = [(n, k) for n, k in zip(names, kinds, strict=True) if k in (b"string", b"hash")]
    for name, kind in readable:
        if kind == b"string":
            pipe.get(name)
        else:
            pipe.hgetall(name)
    out: dict[str, Any] = {}
    for (name, kind), raw in zip(readable, pipe.execute(), strict=True):
        if kind == b"string":
            out[name] = decode(raw, codec)
        else:
            out[name] = {f.decode(): decode(v, codec) for f, v in raw.items()}
    return out


__all__ = ["read_all"]
