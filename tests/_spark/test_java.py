"""The Java check that runs before Spark starts, with fake ``java`` binaries (no JVM)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from kstorm._spark import java as _java
from kstorm._spark.java import check_java, find_java
from kstorm.errors import JavaError, KstormError

OPENJDK_17 = 'openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17)'
ORACLE_8 = 'java version "1.8.0_292"\nJava(TM) SE Runtime Environment (build 1.8.0_292-b10)'


def fake_java(home: Path, banner: str, status: int = 0, also: str = "") -> Path:
    """``<home>/bin/java`` printing ``banner`` on stderr, as ``java -version`` does.

    ``also``: a shell command it runs too.
    """
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True, exist_ok=True)
    java.write_text(f"#!/bin/sh\n{also}\ncat >&2 <<'EOF'\n{banner}\nEOF\nexit {status}\n")
    java.chmod(0o755)
    return java


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(_java, "_cache", {})
    monkeypatch.setenv("KSTORM_SPARK_LOG", str(tmp_path / "spark.log"))


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def test_java_17_from_java_home(tmp_path):
    java = fake_java(tmp_path / "jdk17", OPENJDK_17)
    runtime = check_java({"JAVA_HOME": str(tmp_path / "jdk17"), "PATH": ""})
    assert (runtime.path, runtime.version, runtime.major, runtime.source) == (
        str(java), "17.0.15", 17, "JAVA_HOME")
    assert runtime.supported


def test_java_21_from_path(tmp_path):
    fake_java(tmp_path / "jdk21", 'openjdk version "21" 2023-09-19')
    runtime = check_java({"PATH": str(tmp_path / "jdk21" / "bin")})
    assert (runtime.major, runtime.source) == (21, "PATH")


def test_java_home_wins_over_path_as_in_sparks_launch_script(tmp_path):
    fake_java(tmp_path / "old", ORACLE_8)
    fake_java(tmp_path / "new", OPENJDK_17)
    env = {"JAVA_HOME": str(tmp_path / "old"), "PATH": str(tmp_path / "new" / "bin")}
    with pytest.raises(JavaError) as caught:
        check_java(env)
    assert "Java 1.8.0_292" in first_line(caught.value)
    assert "(from JAVA_HOME)" in first_line(caught.value)


def test_no_java_at_all_says_what_is_needed_and_where_sparks_log_is(tmp_path):
    with pytest.raises(JavaError) as caught:
        check_java({"PATH": str(tmp_path)})
    line = first_line(caught.value)
    assert line.startswith("Spark needs Java 17 or 21, found no Java")
    assert "JAVA_HOME is not set and there is no `java` on PATH" in line
    assert line.endswith(f"Spark's log: {tmp_path / 'spark.log'}")
    assert "openjdk-17" in caught.value.hint


def test_a_java_home_without_java_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(JavaError, match=re.escape(f"JAVA_HOME={tmp_path / 'empty'} has no "
                                                  "bin/java")):
        check_java({"JAVA_HOME": str(tmp_path / "empty"), "PATH": ""})


def test_java_8_is_too_old_and_the_error_names_version_and_path(tmp_path):
    java = fake_java(tmp_path / "jdk8", ORACLE_8)
    with pytest.raises(JavaError) as caught:
        check_java({"JAVA_HOME": str(tmp_path / "jdk8")})
    assert first_line(caught.value) == (
        f"Spark needs Java 17 or 21, found Java 1.8.0_292 at {java} (from JAVA_HOME); "
        f"Spark's log: {tmp_path / 'spark.log'}")
    assert isinstance(caught.value, KstormError)


def test_java_11_is_too_old(tmp_path):
    fake_java(tmp_path / "jdk11", 'openjdk version "11.0.2" 2019-01-15')
    with pytest.raises(JavaError, match=r"found Java 11\.0\.2 at"):
        check_java({"PATH": str(tmp_path / "jdk11" / "bin")})


def test_a_newer_java_runs_with_a_warning(tmp_path, caplog):
    fake_java(tmp_path / "jdk25", 'openjdk version "25" 2025-09-16')
    with caplog.at_level(logging.WARNING, logger="kstorm"):
        runtime = check_java({"PATH": str(tmp_path / "jdk25" / "bin")})
    assert runtime.major == 25 and not runtime.supported
    assert "newer than the versions Spark 4 supports (17, 21)" in caplog.text


def test_a_java_that_cannot_report_its_version_is_an_error(tmp_path):
    fake_java(tmp_path / "broken", "Error: could not open `lib/jvm.cfg'", status=1)
    with pytest.raises(JavaError) as caught:
        check_java({"JAVA_HOME": str(tmp_path / "broken")})
    line = first_line(caught.value)
    assert "did not report a version" in line and "could not open" in line


def test_the_version_is_asked_once_per_binary(tmp_path):
    calls = tmp_path / "calls"
    fake_java(tmp_path / "jdk17", OPENJDK_17, also=f"echo run >> {calls}")
    env = {"JAVA_HOME": str(tmp_path / "jdk17")}
    assert check_java(env).major == check_java(env).major == 17
    assert calls.read_text().splitlines() == ["run"]  # one JVM start, not one per check


def test_find_java_uses_the_given_environment(tmp_path):
    java = fake_java(tmp_path / "jdk", OPENJDK_17)
    assert find_java({"PATH": str(java.parent)}) == (str(java), "PATH")
    assert find_java({"PATH": ""})[0] is None
