"""kstorm's local file system for Spark's checkpoint files, in the test session's JVM.

``kstorm/_spark/speedups/hadoop_fs.py``: with a local master, Hadoop's FileContext writes ``file:``
paths through ``kstorm.hadoop.NoForkLocalFs``, which sets permissions and recognises links
with ``java.nio`` instead of running ``chmod`` and ``readlink``. These tests drive it the
way Spark's checkpoint file manager does (create a temporary file, rename it into place) and
check what Hadoop's own file system would give: the permission after the umask, a rename that
refuses to replace a file unless told to, the status of a symbolic link.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError

from kstorm._spark.speedups.hadoop_fs import FS_CLASS

pytestmark = pytest.mark.integration


def _context(spark: Any) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return jvm, jvm.org.apache.hadoop.fs.FileContext.getFileContext(conf)


def _write(spark: Any, path: Path, data: bytes) -> None:
    jvm, fc = _context(spark)
    fs = jvm.org.apache.hadoop.fs
    flags = jvm.java.util.EnumSet.of(fs.CreateFlag.CREATE)
    out = fc.create(fs.Path(path.as_uri()), flags,
                    spark.sparkContext._gateway.new_array(fs.Options.CreateOpts, 0))
    out.write(bytearray(data))
    out.close()


def _rename(spark: Any, src: Path, dst: Path, overwrite: bool) -> None:
    jvm, fc = _context(spark)
    fs = jvm.org.apache.hadoop.fs
    how = spark.sparkContext._gateway.new_array(fs.Options.Rename, 1)
    how[0] = fs.Options.Rename.OVERWRITE if overwrite else fs.Options.Rename.NONE
    fc.rename(fs.Path(src.as_uri()), fs.Path(dst.as_uri()), how)


def test_the_session_writes_local_files_through_kstorms_file_system(spark: Any) -> None:
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    assert conf.get("fs.AbstractFileSystem.file.impl") == FS_CLASS
    _, fc = _context(spark)
    assert fc.getDefaultFileSystem().toString().startswith(FS_CLASS + "@")


def test_a_new_file_gets_hadoops_permission_after_the_umask(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "0.tmp"
    _write(spark, target, b"v1\n{}")
    assert target.read_bytes() == b"v1\n{}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # 666 less Hadoop's umask 022


def test_a_rename_into_place_refuses_to_replace_unless_told(spark: Any, tmp_path: Path) -> None:
    """What Spark's offset log relies on: a batch's entry is never silently replaced."""
    src, dst = tmp_path / ".0.tmp", tmp_path / "0"
    _write(spark, src, b"first")
    _rename(spark, src, dst, overwrite=False)
    assert dst.read_bytes() == b"first" and not src.exists()
    _write(spark, src, b"second")
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        _rename(spark, src, dst, overwrite=False)
    assert dst.read_bytes() == b"first"
    _rename(spark, src, dst, overwrite=True)
    assert dst.read_bytes() == b"second"


def test_a_rename_of_a_missing_file_fails(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        _rename(spark, tmp_path / "missing", tmp_path / "0", overwrite=False)


def test_link_status_is_the_same_as_hadoops_own(spark: Any, tmp_path: Path) -> None:
    """Links go to Hadoop's code; the answer for any path equals RawLocalFs's, quirks and all
    (Hadoop sees a link only in a path without the ``file:`` scheme)."""
    jvm = spark.sparkContext._jvm
    target = tmp_path / "target"
    target.write_text("x")
    link = tmp_path / "link"
    os.symlink(target, link)
    answers = {}
    for impl in ("org.apache.hadoop.fs.local.RawLocalFs", FS_CLASS):
        conf = jvm.org.apache.hadoop.conf.Configuration(
            spark.sparkContext._jsc.hadoopConfiguration())
        conf.set("fs.AbstractFileSystem.file.impl", impl)
        fc = jvm.org.apache.hadoop.fs.FileContext.getFileContext(conf)
        statuses = [fc.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(p))
                    for p in (str(link), link.as_uri(), str(target), target.as_uri())]
        answers[impl] = [(s.isSymlink(), s.getLen(), s.isFile(),
                          s.getSymlink().toString() if s.isSymlink() else None)
                         for s in statuses]
    hadoop, ours = answers.values()
    assert ours == hadoop
    assert ours[0][:3] == (True, 1, False) and ours[0][3].endswith(str(target))  # a link
    assert ours[2][:3] == (False, 1, True)
