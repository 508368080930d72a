"""The layout tells the architecture: no import circles, no upward imports, one home per fact.

Imports are read with ``ast`` from the source (function-level imports included, so a lazy
import cannot hide a circle). Layers, bottom up:

- the model: the public API modules at ``kstorm/`` top level, ``kstorm.windowing``,
  ``kstorm.acking`` (pure logic, no Spark), and the contract modules every layer shares
  (the envelope, the Kafka connection value, the reserved ids, the failpoints);
- the engine: ``kstorm._kafka`` < ``kstorm._runtime`` < ``kstorm._spark`` (only ``_spark``
  imports pyspark);
- the facade: ``submit_topology``, the testing helpers, the CLI, the demo, embedded services.

A module may import its own layer and the layers below it, never above. And the names:
``kstorm/`` keeps at most 20 top-level modules, ``sinks/`` and ``serdes/`` are built on
public kstorm modules only (as a user's sink would be), every name ``kstorm`` exports comes
from a public module, and the pure ``windowing``/``acking`` packages hold no runtime parts.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kstorm", "sinks", "serdes")
FACADE = {"kstorm.submit", "kstorm.testing", "kstorm.testdriver", "kstorm.embedded",
          "kstorm._submit_main", "kstorm.__init__"}
FACADE_PACKAGES = ("kstorm.cli",)  # the command, its demo, doctor, describe and warm-up
# Pure value modules every layer may use: the wire contract, the connection value, the
# reserved ids and the failpoints (kill-test hooks).
CONTRACTS = {"kstorm._runtime.envelope", "kstorm.kafka.connection", "kstorm._ids",
             "kstorm.failpoints"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__") if name.endswith(".__init__") and
                  name.count(".") > 1 else name] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES and f"{name}.__init__" not in MODULES:
        name = name.rpartition(".")[0]
    if not name:
        return None
    return name if name in MODULES else f"{name}.__init__"


def _imports(name: str, path: Path) -> set[str]:
    """Modules of ours that ``name`` imports anywhere in its source (TYPE_CHECKING aside)."""
    tree = ast.parse(path.read_text())
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded.update(id(n) for n in ast.walk(node))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    package = package.removesuffix(".__init__")
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            # ``from pkg import mod`` imports the module; ``from mod import name`` the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target)
            if resolved is not None and resolved != name:
                found.add(resolved)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int:
    if name in CONTRACTS:
        return 0
    if name in FACADE or name.startswith(FACADE_PACKAGES):
        return 4
    if name.startswith("kstorm._spark"):
        return 3
    if name.startswith("kstorm._runtime"):
        return 2
    if name.startswith("kstorm._kafka"):
        return 1
    return 0  # the model, sinks and serdes


def test_no_module_imports_its_way_back_to_itself():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    assert circles == []


def test_no_engine_module_imports_a_layer_above_it():
    upward = defaultdict(list)
    for module, targets in GRAPH.items():
        if not module.startswith("kstorm."):
            continue
        for target in targets:
            if target.startswith("kstorm.") and _layer(target) > _layer(module):
                upward[module].append(target)
    assert dict(upward) == {}


def test_only_the_spark_package_imports_pyspark():
    offenders = []
    for name, path in MODULES.items():
        if name.startswith("kstorm._spark") or name == "kstorm.__init__":
            continue
        if re.search(r"^\s*(from|import) pyspark\b", path.read_text(), re.MULTILINE):
            offenders.append(name)
    assert offenders == []


def test_nothing_rereads_the_raw_config_outside_the_config_module():
    offenders = []
    pattern = re.compile(r"""conf(ig)?\.get\(\s*["'](kstorm|topology|kafka)\.""")
    for name, path in MODULES.items():
        if name != "kstorm.config" and pattern.search(path.read_text()):
            offenders.append(name)
    assert offenders == []


def test_no_librdkafka_settings_are_built_outside_the_connection_object():
    client_with_a_dict = re.compile(r"(Producer|Consumer|AdminClient)\(\s*\{")
    servers_set = re.compile(r"""["']bootstrap\.servers["']\s*:\s*[^"'\s]""")
    offenders = []
    for name, path in MODULES.items():
        if name == "kstorm.kafka.connection":
            continue
        text = path.read_text()
        if client_with_a_dict.search(text) or servers_set.search(text):
            offenders.append(name)
    assert offenders == []


def test_only_the_offset_log_module_reads_sparks_checkpoint_logs():
    offenders = []
    for name, path in MODULES.items():
        if name == "kstorm._spark.offset_log":
            continue
        if re.search(r"""["'](offsets|commits)["']\s*/|/\s*["'](offsets|commits)["']""",
                     path.read_text()):
            offenders.append(name)
    assert offenders == []


def test_one_transaction_loop_decides_what_follows_a_failed_attempt():
    """The Spark runner's commit phase and the test driver run a batch's attempts through
    ``kstorm/_runtime/batch_loop.py``: nothing else asks ``Transactions.decide``."""
    offenders = [name for name, path in MODULES.items()
                 if name not in ("kstorm._runtime.batch_loop", "kstorm._runtime.transaction")
                 and re.search(r"\.decide\(\s*attempt", path.read_text())]
    assert offenders == []
    for name in ("kstorm._spark.commit", "kstorm.testdriver"):
        assert "kstorm._runtime.batch_loop" in GRAPH[name]


def test_the_planner_never_imports_test_helpers():
    assert "kstorm.testing" not in GRAPH["kstorm._runtime.plan"]


def test_test_modules_have_unique_basenames() -> None:
    """pytest (rootdir-relative, no packages) cannot collect two test modules of one name."""
    root = Path(__file__).resolve().parent.parent
    names = [p.name for d in ("tests", "integration_tests") for p in (root / d).rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


# tests/ mirrors the package: a folder per package (or area) it tests; at its root only the
# tests of the top-level modules and of the whole (the architecture, the docs, the CLI)
TEST_FOLDERS = {"_kafka", "_runtime", "_spark", "acking", "bench", "serdes", "sinks", "state",
                "transactional", "windowing"}


def test_unit_tests_are_filed_by_the_package_they_test() -> None:
    root = Path(__file__).resolve().parent
    folders = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert folders == TEST_FOLDERS
    for folder in TEST_FOLDERS:  # each named after a kstorm package, or a top-level one
        assert (ROOT / "kstorm" / folder).is_dir() or (ROOT / folder).is_dir(), folder
    at_root = sorted(p.name for p in root.glob("test_*.py"))
    assert len(at_root) <= 20, at_root


SPEEDUPS = "kstorm._spark.speedups"


def _speedups_used(path: Path) -> set[tuple[str, str]]:
    """(module of the speed-ups package, name) pairs a module outside it uses."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}
    used: set[tuple[str, str]] = set()
    submodules = {p.stem for p in (ROOT / "kstorm/_spark/speedups").glob("*.py")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(SPEEDUPS):
                    used.add((a.name, "import"))  # a dotted import: not through the interface
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if node.module == "kstorm._spark" and a.name == "speedups":
                    aliases[a.asname or a.name] = "__init__"
                elif node.module == SPEEDUPS and a.name in submodules - {"__init__"}:
                    aliases[a.asname or a.name] = a.name
                elif node.module == SPEEDUPS:
                    used.add(("__init__", a.name))
                elif node.module.startswith(SPEEDUPS + "."):
                    used.add((node.module.removeprefix(SPEEDUPS + "."), a.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in aliases:
            used.add((aliases[node.value.id], node.attr))
    return used


def test_the_speed_ups_are_used_only_through_their_interface():
    """Outside kstorm/_spark/speedups/, only the names its INTERFACE lists are used."""
    from kstorm._spark.speedups import INTERFACE

    outside = {}
    for name, path in MODULES.items():
        if name.startswith(SPEEDUPS):
            continue
        for module, attr in _speedups_used(path):
            if attr not in INTERFACE.get(module, ()):
                outside.setdefault(name, set()).add(f"{module}.{attr}")
    assert outside == {}


def test_private_spark_members_live_in_the_speed_ups_package():
    """Every module PRIVATE_MEMBERS lists (tests/_spark/test_speedups.py greps them all) is
    inside the package: the rest of kstorm reaches Spark's, py4j's and CPython's private members
    only through the INTERFACE of the module that holds them."""
    from kstorm._spark.speedups import PRIVATE_MEMBERS

    stray = [m for m in PRIVATE_MEMBERS if not m.startswith("kstorm/_spark/speedups/")]
    assert stray == []
TOP_LEVEL_MODULES = 20
_PRIVATE_IMPORT = re.compile(
    r"^\s*(from\s+kstorm(\.\w+)*\._\w*|import\s+kstorm(\.\w+)*\._\w*"
    r"|from\s+kstorm(\.\w+)*\s+import\s+(\([^)]*?)?_\w)", re.MULTILINE)


def test_kstorm_keeps_at_most_twenty_top_level_modules() -> None:
    """Storm's concepts are the top level; everything else lives in a package of its own."""
    top = sorted(p.name for p in (ROOT / "kstorm").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= TOP_LEVEL_MODULES, top


def test_sinks_and_serdes_import_no_private_kstorm_module() -> None:
    """They are built as a user's sink or serde would be: on kstorm's public modules."""
    offenders = {}
    for name, path in MODULES.items():
        if name.startswith(("sinks", "serdes")):
            found = [m.group(0).strip() for m in _PRIVATE_IMPORT.finditer(path.read_text())]
            if found:
                offenders[name] = found
    assert offenders == {}


def test_the_private_import_rule_sees_each_form() -> None:
    for line in ("from kstorm._kafka.connection import KafkaConnection",
                 "    import kstorm._testhooks", "from kstorm.state._x import y",
                 "from kstorm import _ids", "from kstorm import (\n    _ids,\n)"):
        assert _PRIVATE_IMPORT.search(line), line
    for line in ("from kstorm.kafka.connection import KafkaConnection",
                 "from kstorm.failpoints import pause_before_commit", "from kstorm import sink"):
        assert not _PRIVATE_IMPORT.search(line), line


def test_every_name_kstorm_exports_comes_from_a_public_module() -> None:
    import kstorm

    private = {}
    for name in kstorm.__all__:
        module = getattr(getattr(kstorm, name), "__module__", "kstorm")
        if any(part.startswith("_") for part in module.split(".")):
            private[name] = module
    assert private == {}


def test_the_pure_window_and_acking_packages_hold_no_runtime_modules() -> None:
    """A windowed bolt task's runtime is ``kstorm/_runtime/window_*.py``, not in windowing/."""
    hidden = sorted(str(p.relative_to(ROOT)) for package in ("windowing", "acking")
                    for p in (ROOT / "kstorm" / package).glob("_*.py")
                    if p.name != "__init__.py")
    assert hidden == []


def _exception_classes() -> list[tuple[str, type]]:
    """(module, class) of every Exception class defined in kstorm, sinks and serdes.

    (Not the KeyboardInterrupt of a stopped demo: an interrupt, not an error.)
    """
    import importlib

    found = []
    for package in ("kstorm", "sinks", "serdes"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.bases]
            if not classes:
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            loaded = importlib.import_module(module)
            found += [(module, cls) for name in classes
                      if isinstance(cls := getattr(loaded, name, None), type)
                      and issubclass(cls, Exception) and cls.__module__ == module]
    return found


def test_every_error_is_under_kstorm_error_and_the_public_ones_live_in_errors() -> None:
    """One root (kstorm/errors.py): every exception kstorm defines is a KstormError; those a
    user can meet are defined in errors.py, listed in its __all__ and drawn in its tree."""
    from kstorm import errors

    found = _exception_classes()
    assert len(found) > 15
    assert [f"{m}.{c.__name__}" for m, c in found if not issubclass(c, errors.KstormError)] \
        == []
    public = [f"{m}.{c.__name__}" for m, c in found if m != "kstorm.errors"
              and not any(part.startswith("_") for part in m.split("."))]
    assert public == []  # elsewhere only private ones (a module or package named _x)
    own = sorted(c.__name__ for m, c in found if m == "kstorm.errors")
    assert sorted(errors.__all__) == own
    assert [name for name in own if name not in (errors.__doc__ or "")] == []
