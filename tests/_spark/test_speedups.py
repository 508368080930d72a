"""The fenced speed-ups (kstorm/_spark/speedups/): one switch, a version gate, the list of
private members, and each private route's public twin giving the same results."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kstorm._spark import check_pyspark, speedups
from kstorm.errors import ConfigError, MissingDependencyError

REPO = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"\._jdf|\._jvm|\._gateway|\._jsc|_load_from_socket|[A-Za-z_]+_\$eq|"
                     r"_run_module_as_main|_run_exitfuncs|setAccessible|\._jwrite|"
                     r"_mapStateClient|_stateful_processor_api_client|\._jconf|\._jsq|"
                     r"_private_field|_worker_calls|_active_spark_context|_accumulatorServer|"
                     r"\._stateName|_receive_proto_message\w*|_parse_datatype_json_string|"
                     r"_create_row_inbound_converter|\$\$\w+")
# The members that never leave the package, in any spelling: an attribute, or a name given
# to getattr (``getattr(sc, "_jvm")`` must not slip past the fence).
FENCED = re.compile(r"""(\.|["'])(_jvm|_jsc|_gateway|_jdf|_jwrite|_jsq|_jconf)\b|"""
                    r"_mapStateClient|_stateful_processor_api_client|setAccessible|"
                    r"_run_module_as_main|_run_exitfuncs|_active_spark_context|"
                    r"_accumulatorServer|_load_from_socket")
FENCE = "kstorm/_spark/speedups/"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(speedups.ENV, raising=False)
    monkeypatch.setattr(speedups, "_said", set())


def test_every_private_member_in_use_is_listed_with_its_module() -> None:
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "kstorm").rglob("*.py")):
        for match in PRIVATE.finditer(path.read_text()):
            found.setdefault(str(path.relative_to(REPO)), set()).add(match.group(0))
    found.pop("kstorm/_spark/speedups/__init__.py", None)  # the list itself
    assert found == {k: set(v) for k, v in speedups.PRIVATE_MEMBERS.items()}


def test_no_module_outside_the_speed_ups_package_touches_a_fenced_member() -> None:
    """Spark's JVM handles (``._jvm``, ``._jsc``, ``._gateway``, ``._jdf``...), pyspark's
    state-server client, Java reflection and CPython's private runners are used only inside
    kstorm/_spark/speedups/: anywhere else in kstorm (or its sinks and serdes) is a failure."""
    outside: dict[str, list[str]] = {}
    for package in ("kstorm", "sinks", "serdes"):
        for path in sorted((REPO / package).rglob("*.py")):
            where = str(path.relative_to(REPO))
            if where.startswith(FENCE):
                continue
            found = [m.group(0).lstrip(".\"'") for m in FENCED.finditer(path.read_text())]
            if found:
                outside[where] = sorted(set(found))
    assert outside == {}


def test_the_fence_sees_each_spelling() -> None:
    for line in ("sc._jvm.java", "spark.sparkContext._jsc.sc()", "SparkContext._gateway",
                 'getattr(sc, "_jvm")', "frame._jdf.collect()", "handle.setAccessible(True)",
                 "ms._mapStateClient", "runpy._run_module_as_main", "SparkContext."
                 "_active_spark_context", 'getattr(sc, "_accumulatorServer", None)'):
        assert FENCED.search(line), line
    for line in ("self._jvm_tmp", "lost_jvm(exc)", "_jvm_running()", "stop_jvm()",
                 "gateway_started()", "_jvm_output_to(path)"):
        assert not FENCED.search(line), line


def test_the_switch_turns_off_named_speed_ups_or_all(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    assert speedups.enabled("zygote")
    monkeypatch.setenv(speedups.ENV, "zygote")
    with caplog.at_level(logging.INFO, "kstorm"):
        assert not speedups.enabled("zygote") and not speedups.enabled("zygote")
        assert speedups.enabled("unix-sockets")
    said = [r.getMessage() for r in caplog.records if "zygote" in r.getMessage()]
    assert said == [f"speed-up zygote off: {speedups.ENV} says so; the public route does "
                    "its work"]  # once
    monkeypatch.setenv(speedups.ENV, "all")
    assert not any(speedups.enabled(n) for n in speedups.NAMES)
    monkeypatch.setenv(speedups.ENV, "zygot")
    with pytest.raises(ConfigError, match="zygot"):
        speedups.enabled("zygote")


def test_an_untested_pyspark_gets_the_public_data_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from kstorm._spark import batch_rows

    assert speedups.enabled("batch-rows", private_pyspark=True) == (
        speedups.pyspark_minor() in speedups.TESTED_PYSPARK)
    monkeypatch.setattr(speedups, "pyspark_version", lambda: "4.9.0")
    assert not speedups.enabled("batch-rows", private_pyspark=True)
    assert speedups.enabled("zygote")  # proven at start, not by version
    assert not batch_rows.fast_route() and not batch_rows.ArrowRows().fast
    assert speedups.report()["state-map"] == "off (pyspark 4.9 untested)"


def test_pyspark_outside_the_supported_range_is_refused_with_the_missing_api() -> None:
    assert check_pyspark("4.2.0") == "4.2.0" and check_pyspark("4.3.0") == "4.3.0"
    with pytest.raises(MissingDependencyError, match="ReadLimit") as refused:
        check_pyspark("4.1.4")
    assert refused.value.hint == "pip install 'pyspark>=4.2,<5'"
    with pytest.raises(MissingDependencyError, match="major release"):
        check_pyspark("5.0.0")


class _Frame:
    """A frame whose public ``toArrow`` is known, and whose private route breaks."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.schema = None

    def toArrow(self) -> pa.Table:  # noqa: N802 - pyspark's name
        return self.table

    @property
    def sparkSession(self) -> Any:  # noqa: N802
        raise AttributeError("no private members here")


def test_a_private_route_that_breaks_hands_the_batch_to_the_public_one(
        caplog: pytest.LogCaptureFixture) -> None:
    from kstorm._spark.batch_rows import ArrowRows

    table = pa.table({"n": [1, 2, 3]})
    rows = ArrowRows(fast=True)
    assert rows.fast
    with caplog.at_level(logging.INFO, "kstorm"):
        assert rows(_Frame(table)).equals(table)  # the batch is not lost
    assert not rows.fast  # and the private route stays off
    assert any("speed-up batch-rows off" in r.getMessage() for r in caplog.records)
    assert ArrowRows(fast=False)(_Frame(table)).equals(table)


class _MapState:
    """pyspark's public MapState methods over a dict (no state server)."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def getValue(self, key: tuple[bytes]) -> tuple[bytes] | None:  # noqa: N802
        return (self.data[key[0]],) if key[0] in self.data else None

    def updateValue(self, key: tuple[bytes], value: tuple[bytes]) -> None:  # noqa: N802
        self.data[key[0]] = value[0]

    def removeKey(self, key: tuple[bytes]) -> None:  # noqa: N802
        self.data.pop(key[0], None)

    def iterator(self) -> Any:
        return iter([((k,), (v,)) for k, v in self.data.items()])


def test_the_state_map_public_route_reads_and_writes_the_map_state() -> None:
    from kstorm._spark.tws_map import BinaryMap

    state = _MapState()
    m = BinaryMap(state, fast=False)
    m.update_all([(b"a", b"1"), (b"b", b"2")])
    m.update(b"a", b"3")
    m.remove(b"b")
    assert m.get(b"a") == b"3" and m.get(b"b") is None
    assert dict(m.items()) == {b"a": b"3"} == state.data
    assert not BinaryMap(state).fast  # no state server client: the public route
