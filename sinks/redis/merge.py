"""How a batch's new value for a key combines with the stored one.

A merge is ``merge(old, new) -> value``. It is only called when there *is* an old
value; the first write of a key stores ``new`` as it is.

Built-in merges run inside Redis, in the commit's Lua script:

=========  ==========================================  ================
name       stored value becomes                        values
=========  ==========================================  ================
``set``    the batch's value (last row wins)           any JSON value
``add``    old + the batch's value                     numbers
``count``  old + number of rows for the key            (none needed)
``max``    max(old, the batch's value)                 numbers
``min``    min(old, the batch's value)                 numbers
=========  ==========================================  ================

Your own merge is either

* a :class:`LuaMerge`: a named Lua function body, also run inside the commit script::

      LuaMerge("concat", "return old .. ',' .. new", numeric=False)

* or any Python callable ``(old, new) -> value``. It runs on the driver inside an
  optimistic transaction (read, merge in Python, then one script writes the batch
  if none of its keys changed meanwhile, else everything is retried): a few times
  slower, but any Python works::

      RedisSink(config, key="top:{user}", value="score", merge=lambda old, new: max(old, new))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kstorm.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class LuaMerge:
    """A merge function that runs inside Redis, in the commit's Lua script.

    Attributes:
        name: Identifies the merge in errors and in the script (letters, digits, ``_``).
        lua: Body of a Lua ``function(old, new)`` that returns the merged value.
        numeric: If true, ``old`` and ``new`` arrive as Lua numbers and the result
            must be a number. If false they arrive as the stored text (JSON) and
            the result must be text.
        combine: Optional Python fold of several new values one batch holds for
            the same key (``sum`` for ``add``). Without it the Lua body is applied
            once per row, in row order.

    Example:
        >>> concat = LuaMerge("concat", "return old .. ',' .. new", numeric=False)
    """

    name: str
    lua: str
    numeric: bool = True
    combine: Callable[[Sequence[Any]], Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            msg = f"LuaMerge: name must be letters, digits and '_', got {self.name!r}"
            raise ConfigError(msg)
        if not isinstance(self.lua, str) or "return" not in self.lua:
            msg = f"LuaMerge {self.name!r}: lua must be a function body with a 'return'"
            raise ConfigError(msg)


@dataclass(frozen=True)
class PythonMerge:
    """A user callable ``(old, new) -> value``, run on the driver (optimistic transaction)."""

    fn: Callable[[Any, Any], Any]

    @property
    def name(self) -> str:
        """The callable's name, for error messages."""
        return getattr(self.fn, "__qualname__", repr(self.fn))


def _last(values: Sequence[Any]) -> Any:
    return values[-1]


BUILTIN_MERGES: dict[str, LuaMerge] = {
    "set": LuaMerge("set", "return new", numeric=False, combine=_last),
    "add": LuaMerge("add", "return old + new", combine=sum),
    # count is add over a value of 1 per row; the sink feeds it those ones.
    "count": LuaMerge("count", "return old + new", combine=sum),
    "max": LuaMerge("max", "return math.max(old, new)", combine=max),
    "min": LuaMerge("min", "return math.min(old, new)", combine=min),
}

Merge = LuaMerge | PythonMerge


def resolve_merge(spec: str | LuaMerge | Callable[[Any, Any], Any]) -> Merge:
    """The merge named or given by ``spec``.

    Example:
        >>> resolve_merge("add").name
        'add'
    """
    if isinstance(spec, str):
        try:
            return BUILTIN_MERGES[spec]
        except KeyError:
            msg = f"RedisSink: merge must be one of {sorted(BUILTIN_MERGES)}, a LuaMerge or a " \
                  f"callable (old, new) -> value, got {spec!r}"
            raise ConfigError(msg) from None
    if isinstance(spec, LuaMerge):
        return spec
    if callable(spec):
        return PythonMerge(spec)
    msg = f"RedisSink: merge must be a name, a LuaMerge or a callable, got {spec!r}"
    raise ConfigError(msg)


__all__ = ["BUILTIN_MERGES", "LuaMerge", "Merge", "PythonMerge", "resolve_merge"]
