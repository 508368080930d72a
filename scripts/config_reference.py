"""Write docs/config-reference.md from kstorm's typed config (``TopologyConfig``).

Every key, its type, its default and its bounds come from the model itself, so the page
cannot drift from the code: ``tests/test_docs.py`` runs ``--check`` and fails when the page
is not what this script writes. The meaning of each key is in docs/configuration.md, which
the same test checks lists every key.

    python scripts/config_reference.py          # rewrite the page
    python scripts/config_reference.py --check  # exit 1 if the page is stale
"""

from __future__ import annotations

import enum
import sys
import types
import typing
from pathlib import Path

from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "config-reference.md"

HEADER = """\
# Configuration reference

Generated from `kstorm.config.TopologyConfig` by `scripts/config_reference.py`; do not edit
by hand. What each key means is on the [Configuration](configuration.md) page. Keys are
accepted in a conf dict, in a `--conf` file (TOML, YAML or JSON), as `-c key=value` and as
`KSTORM_<KEY>` environment variables (see [Running a topology](running.md)).

| key | also accepted as | type | default | bounds |
| --- | --- | --- | --- | --- |
"""


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " or ".join(f"`{a!r}`" if not isinstance(a, str) else f"`{a}`" for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " or ".join(f"`{m.value}`" for m in annotation)
    if annotation is type(None):
        return "none"
    if annotation is SecretStr:
        return "secret string"
    if origin is not None:
        return {dict: "table", list: "list"}.get(origin, getattr(origin, "__name__", str(origin)))
    return {str: "string", int: "integer", bool: "boolean", Path: "path"}.get(
        annotation, getattr(annotation, "__name__", str(annotation)))


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        value = info.default
    if value is None:
        return "—"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        value = str(value).lower()
    return f"`{value}`"


def _bounds(info: FieldInfo) -> str:
    parts = []
    for m in info.metadata:
        for name, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(m, name, None) is not None:
                parts.append(f"{sign} {getattr(m, name)}")
    return ", ".join(parts)


def _also(info: FieldInfo, key: str, attr: str) -> str:
    va = info.validation_alias
    if not isinstance(va, AliasChoices):
        return ""
    return ", ".join(f"`{c}`" for c in va.choices if isinstance(c, str) and c not in (key, attr))


def render() -> str:
    """The page: one row per ``TopologyConfig`` field, sorted by key."""
    from kstorm.config import TopologyConfig

    rows = {}
    for attr, info in TopologyConfig.model_fields.items():
        key = info.alias or attr
        rows[key] = (f"| `{key}` | {_also(info, key, attr)} | {_type_name(info.annotation)} "
                    f"| {_default(info)} | {_bounds(info)} |")
    return HEADER + "\n".join(rows[k] for k in sorted(rows)) + "\n"


def main(argv: list[str]) -> int:
    """Write the page, or with ``--check`` exit 1 when it differs from what would be written."""
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/config_reference.py")
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
