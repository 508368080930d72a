"""What ``kstorm run`` needs besides Spark: the user's topology and its configuration.

- :func:`load_topology` imports ``pkg.module:attr``: a :class:`StormTopology`, a builder,
  or a function (no arguments) returning either.
- :func:`load_conf` merges, lowest precedence first: a config file (``.toml``, ``.yaml`` /
  ``.yml`` or ``.json``; Storm's key names, nested tables flattened with dots), environment
  variables ``KSTORM_<KEY>`` (the key upper-cased, dots as ``_``, a leading ``kstorm.``
  dropped: ``KSTORM_CHECKPOINT_DIR``, ``KSTORM_KAFKA_BOOTSTRAP_SERVERS``,
  ``KSTORM_TOPOLOGY_MAX_SPOUT_PENDING``), then ``-c key=value`` overrides. Values from the
  environment and ``-c`` are read as JSON when they parse (numbers, booleans, objects),
  else as strings. Every key is then validated by :class:`kstorm.TopologyConfig` as usual:
  an unknown key is an error naming it.

Example:
    >>> env_name("kstorm.checkpoint.dir"), env_name("kafka.bootstrap.servers")
    ('KSTORM_CHECKPOINT_DIR', 'KSTORM_KAFKA_BOOTSTRAP_SERVERS')
    >>> load_conf(None, {"KSTORM_TRIGGER": "available-now"}, ["topology.debug=true"])
    {'kstorm.trigger': 'available-now', 'topology.debug': True}
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError
from kstorm.topology import StormTopology

ENV_PREFIX = "KSTORM_"


def known_keys() -> list[str]:
    """Every configuration key :class:`TopologyConfig` accepts (aliases included)."""
    keys: list[str] = []
    for field in TopologyConfig.model_fields.values():
        choices = getattr(field.validation_alias, "choices", None)
        keys += [str(c) for c in choices] if choices else []
        if field.alias:
            keys.append(field.alias)
    return sorted(set(keys))


def env_name(key: str) -> str:
    """The environment variable that sets ``key``."""
    bare = key[len("kstorm."):] if key.startswith("kstorm.") else key
    return ENV_PREFIX + bare.upper().replace(".", "_")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        # a table is a nested key unless the key itself takes a mapping (e.g. kstorm.spark.conf)
        if isinstance(value, Mapping) and name not in _MAPPING_KEYS:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


_MAPPING_KEYS = {"kstorm.spark.conf", "kafka.client.config"}


def read_file(path: Path) -> dict[str, Any]:
    """A config file's keys (TOML, YAML or JSON by its suffix), flattened."""
    try:
        text = path.read_text()
    except OSError as exc:
        msg = f"config file {str(path)!r} cannot be read: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            data: Any = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        elif suffix == ".json":
            data = json.loads(text)
        else:
            msg = f"config file {str(path)!r}: expected .toml, .yaml, .yml or .json"
            raise ConfigError(msg)
    except ConfigError:
        raise
    except Exception as exc:
        msg = f"config file {str(path)!r} is not valid {suffix[1:].upper()}: {exc}"
        raise ConfigError(msg) from exc
    if not isinstance(data, Mapping):
        msg = f"config file {str(path)!r}: expected a table of keys, got {type(data).__name__}"
        raise ConfigError(msg)
    return _flatten(data)


def load_conf(path: Path | None, environ: Mapping[str, str],
              overrides: Iterable[str]) -> dict[str, Any]:
    """The merged configuration (module docstring: file < environment < ``-c``)."""
    conf = read_file(path) if path is not None else {}
    by_env = {env_name(key): key for key in known_keys()}
    for name, text in sorted(environ.items()):
        if name in by_env:
            conf[by_env[name]] = _value(text)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            msg = f"-c {item!r}: expected key=value"
            raise ConfigError(msg)
        conf[key.strip()] = _value(text)
    return conf


def load_topology(target: str) -> tuple[str, StormTopology]:
    """``(default name, topology)`` of ``pkg.module:attr`` (see the module docstring)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        msg = f"{target!r}: expected pkg.module:attribute (e.g. examples.page_views:topology)"
        raise ConfigError(msg)
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as `python -m` does: the project's modules
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"cannot import {module_name!r}: {exc}"
        raise ConfigError(msg, hint="run kstorm from your project's directory, or "
                          "install it (pip install -e .)") from exc
    try:
        found: Any = getattr(module, attr)
    except AttributeError as exc:
        msg = f"module {module_name!r} has no attribute {attr!r}"
        raise ConfigError(msg) from exc
    if callable(found) and not isinstance(found, StormTopology) and not hasattr(
            found, "create_topology"):
        found = found()
    if hasattr(found, "create_topology"):
        found = found.create_topology()
    if not isinstance(found, StormTopology):
        msg = (f"{target!r} is a {type(found).__name__}: expected a topology, a builder, or a "
               "function returning one")
        raise ConfigError(msg)
    generic = attr in ("topology", "build", "build_topology", "main")
    name = module_name.rsplit(".", 1)[-1] if generic else attr
    return name, found


_NOT_SHIPPED = {"tests", "test", "integration_tests", "bench", "docs", "build", "dist",
                "node_modules", "venv", "env", "site-packages"}


def project_archive(root: Path, out: Path) -> list[str]:
    """Zip ``root``'s top-level packages and modules (your project) into ``out``.

    Packages are directories with an ``__init__.py``; tests, benchmarks, build output,
    virtual environments and hidden directories stay out. Returns what was shipped.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     root = Path(tmp)
        ...     _ = (root / "app").mkdir(), (root / "app" / "__init__.py").write_text("")
        ...     _ = (root / "tests").mkdir(), (root / "tests" / "__init__.py").write_text("")
        ...     _ = (root / "run.py").write_text("")
        ...     project_archive(root, root / "out.zip")
        ['app', 'run.py']
    """
    import zipfile

    shipped: list[str] = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in sorted(root.iterdir()):
            name = entry.name
            if name.startswith((".", "_")) and name != "__init__.py" or name in _NOT_SHIPPED:
                continue
            if entry.is_dir() and (entry / "__init__.py").is_file():
                for file in sorted(entry.rglob("*.py")):
                    if not any(p.startswith(".") or p == "__pycache__"
                               for p in file.relative_to(root).parts):
                        archive.write(file, file.relative_to(root).as_posix())
                shipped.append(name)
            elif entry.is_file() and entry.suffix == ".py" and entry != out:
                archive.write(entry, name)
                shipped.append(name)
    return shipped

