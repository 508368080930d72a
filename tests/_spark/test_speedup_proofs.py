"""Each speed-up proves it works here before it is used; a failed proof turns it off, said
once, and the public route does the work (``kstorm/_spark/speedups/``)."""

from __future__ import annotations

import logging
import os
import zipfile
from pathlib import Path

import pytest

from kstorm._spark import session, speedups
from kstorm._spark.speedups import hadoop_fs, launch, zygote
from kstorm.config import TopologyConfig

LOCAL = {"kstorm.spark.master": "local[2]"}
RAW_LOCAL_FS = "org.apache.hadoop.fs.local.RawLocalFs"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(speedups.ENV, raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(speedups, "_said", set())
    monkeypatch.setattr(zygote, "_proof", [])
    monkeypatch.setattr(zygote, "_launchers", {})


def _off_lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.getMessage().startswith(f"speed-up {name} off:")]


def test_the_zygote_proves_a_fork_and_a_byte_through_a_passed_descriptor() -> None:
    assert zygote.proof() is None
    assert zygote.proof() is None  # once per process: no second fork
    assert session.zygote_wanted(TopologyConfig.from_conf(LOCAL))


def test_a_zygote_that_cannot_fork_here_is_off_and_spark_starts_python(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(zygote.os, "fork", no_fork)
    settings = TopologyConfig.from_conf(LOCAL)
    with caplog.at_level(logging.INFO, "kstorm"):
        assert not session.zygote_wanted(settings)
        assert not session.zygote_before_launch(settings)  # the JVM gets no zygote address
    (line,) = _off_lines(caplog, "zygote")
    assert "fork and exchange failed here" in line and "Resource temporarily" in line


def test_a_zygote_child_that_does_not_answer_is_a_failed_proof(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real_fork = os.fork

    def mute_child() -> int:
        pid = real_fork()
        if pid == 0:
            os._exit(0)  # exits without writing the byte back
        return pid

    monkeypatch.setattr(zygote.os, "fork", mute_child)
    with caplog.at_level(logging.INFO, "kstorm"):
        assert not session.zygote_wanted(TopologyConfig.from_conf(LOCAL))
    (line,) = _off_lines(caplog, "zygote")
    assert "did not answer" in line


def test_the_hadoop_jar_proves_it_holds_its_file_system_class() -> None:
    assert hadoop_fs.proof() is None
    options = session.spark_options(TopologyConfig.from_conf(LOCAL))
    assert options["spark.hadoop.fs.AbstractFileSystem.file.impl"] == hadoop_fs.FS_CLASS


@pytest.mark.parametrize("jar", ["missing", "not-a-zip", "without-the-class"])
def test_a_jar_that_cannot_give_the_class_leaves_hadoops_own_file_system(
        jar: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    broken = tmp_path / "kstorm-hadoop.jar"
    if jar == "not-a-zip":
        broken.write_bytes(b"truncated")
    elif jar == "without-the-class":
        with zipfile.ZipFile(broken, "w") as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    real = hadoop_fs.proof
    monkeypatch.setattr(hadoop_fs, "proof", lambda: real(broken))
    with caplog.at_level(logging.INFO, "kstorm"):
        options = session.spark_options(TopologyConfig.from_conf(LOCAL))
        session.spark_options(TopologyConfig.from_conf(LOCAL))
    assert options["spark.hadoop.fs.AbstractFileSystem.file.impl"] == RAW_LOCAL_FS
    (line,) = _off_lines(caplog, "hadoop-fs")  # once, however many sessions
    assert str(broken) in line


def test_an_unwritable_class_cache_directory_is_skipped_with_one_info_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cache = blocker / "kstorm"  # cannot be made: its parent is a file (also for root)
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(cache))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_DIST_CLASSPATH"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
    with caplog.at_level(logging.INFO, "kstorm"):
        options = session.launch_options(TopologyConfig.from_conf({}))
    java = options["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in java and "ArchiveClassesAtExit" not in java
    (line,) = _off_lines(caplog, "class-cache")
    assert f"its directory {cache} cannot be written" in line
    assert not any("kstorm warm-up" in r.getMessage() for r in caplog.records)


def test_a_ready_class_archive_in_a_read_only_place_is_still_used(tmp_path: Path) -> None:
    home, cache = tmp_path / "spark", tmp_path / "cache"
    home.mkdir()
    cache.mkdir()
    launch._archive_path(home, cache).write_bytes(b"archive")
    cache.chmod(0o555)
    try:
        assert launch.class_cache_proof(home, cache) is None
    finally:
        cache.chmod(0o755)
