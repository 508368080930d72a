"""kstorm's jar (``kstorm/_spark/speedups/hadoop_fs.py``): built from the sources next to it."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from kstorm._spark.speedups import hadoop_fs


def test_the_committed_jar_was_built_from_the_committed_sources() -> None:
    """Edit a .java file and forget `python -m kstorm._spark.speedups.hadoop_fs`: this fails."""
    assert hadoop_fs.jar_sources_digest() == hadoop_fs.sources_digest(), (
        "kstorm/_spark/speedups/jvm/kstorm-hadoop.jar is out of date: run "
        "`python -m kstorm._spark.speedups.hadoop_fs` (needs a JDK) and commit the jar")


def test_the_jar_holds_the_file_system_spark_is_told_to_use() -> None:
    with zipfile.ZipFile(hadoop_fs.JAR) as jar:
        names = set(jar.namelist())
    assert hadoop_fs.FS_CLASS.replace(".", "/") + ".class" in names
    assert "kstorm/hadoop/NoForkLocalFileSystem.class" in names


def test_the_sources_digest_covers_names_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "X.java").write_text("class X {}")
    first = hadoop_fs.sources_digest(tmp_path)
    (tmp_path / "a" / "X.java").write_text("class X { }")
    second = hadoop_fs.sources_digest(tmp_path)
    (tmp_path / "a" / "X.java").rename(tmp_path / "a" / "Y.java")
    assert len({first, second, hadoop_fs.sources_digest(tmp_path)}) == 3


def test_a_missing_or_foreign_jar_records_no_digest(tmp_path: Path) -> None:
    assert hadoop_fs.jar_sources_digest(tmp_path / "missing.jar") is None
    with zipfile.ZipFile(tmp_path / "other.jar", "w") as jar:
        jar.writestr("x.class", b"")
    assert hadoop_fs.jar_sources_digest(tmp_path / "other.jar") is None


@pytest.mark.skipif(shutil.which("javac") is None, reason="building the jar needs a JDK (javac)")
def test_a_build_gives_the_same_jar_entries_and_digest(tmp_path: Path) -> None:
    """The build is repeatable: fixed entry times; the digest of today's sources."""
    built = hadoop_fs.build(tmp_path / "k.jar")
    again = hadoop_fs.build(tmp_path / "k2.jar")
    assert built.read_bytes() == again.read_bytes()
    assert hadoop_fs.jar_sources_digest(built) == hadoop_fs.sources_digest()
    with zipfile.ZipFile(built) as a, zipfile.ZipFile(hadoop_fs.JAR) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
    version = subprocess.run(["javac", "-version"], capture_output=True, text=True)
    assert version.returncode == 0
