"""The driver JVM's own temporary directory, removed once its driver is gone (jvm_tmp.py).

Real processes and real ``flock``s; no JVM (the integration session runs with it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kstorm._spark.speedups import jvm_tmp


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of the test's own, and no directory made yet by this process.

    (Under ``/tmp``: the tests below see which directories a driver makes there.)
    """
    import shutil
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="kjt-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    _forget(monkeypatch)
    yield short
    _forget(monkeypatch)
    shutil.rmtree(short, ignore_errors=True)


def _driver(tmp: Path) -> subprocess.Popen[str]:
    """Another driver: makes and locks its directory, prints it, then waits."""
    code = ("import sys, tempfile, time\n"
            f"tempfile.tempdir = {str(tmp)!r}\n"
            "from kstorm._spark.speedups import jvm_tmp\n"
            "print(jvm_tmp.driver_tmpdir(), flush=True)\n"
            "time.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_a_driver_gets_a_private_locked_directory_once(fresh: Path) -> None:
    path = jvm_tmp.driver_tmpdir()
    assert path is not None and path.parent == jvm_tmp.base_dir()
    assert path.name.startswith(f"{os.getpid()}-") and (path / jvm_tmp.LOCK).exists()
    assert jvm_tmp.driver_tmpdir() == path  # fixed for the process's life (the JVM has it)
    assert os.stat(path.parent).st_mode & 0o777 == 0o700
    assert jvm_tmp.sweep(path.parent) == []  # locked by this process: kept


def test_a_killed_driver_s_directory_goes_at_the_next_start_a_live_one_stays(
        fresh: Path) -> None:
    killed, alive = _driver(fresh), _driver(fresh)
    try:
        dead_dir = Path(killed.stdout.readline().strip())
        live_dir = Path(alive.stdout.readline().strip())
        (dead_dir / "librocksdbjni123.so").write_bytes(b"x" * 1000)  # what a JVM leaves
        (dead_dir / "spark-1" / "blockmgr-2").mkdir(parents=True)
        killed.kill()
        killed.wait(timeout=30)
        mine = jvm_tmp.driver_tmpdir()  # the next start sweeps
        assert not dead_dir.exists()
        assert live_dir.exists() and mine is not None and mine.exists()
    finally:
        for proc in (killed, alive):
            proc.kill()
            proc.wait(timeout=30)


def test_a_directory_without_its_lock_is_left_until_it_is_old(fresh: Path) -> None:
    base = jvm_tmp.base_dir()
    base.mkdir(mode=0o700)
    young, old = base / "1-young", base / "2-old"
    young.mkdir()
    old.mkdir()
    past = time.time() - 2 * jvm_tmp.STALE_UNLOCKED_S
    os.utime(old, (past, past))
    assert jvm_tmp.sweep(base) == [old]  # a driver may be making the young one right now
    assert young.exists()


def test_someone_else_s_directory_is_neither_used_nor_swept(fresh: Path) -> None:
    base = jvm_tmp.base_dir()
    base.mkdir(mode=0o755)  # open to others: not ours to trust
    (base / "1-x").mkdir()
    assert jvm_tmp.driver_tmpdir() is None
    assert (base / "1-x").exists()
    assert jvm_tmp.java_option("-Xss4m") == "-Xss4m"  # the JVM keeps its default


def test_the_java_option_is_added_unless_the_user_set_one(fresh: Path) -> None:
    option = jvm_tmp.java_option("-Xss4m")
    assert option == f"-Xss4m -Djava.io.tmpdir={jvm_tmp.driver_tmpdir()}"
    assert jvm_tmp.java_option("-Djava.io.tmpdir=/mine") == "-Djava.io.tmpdir=/mine"


def _forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """No directory of this process made yet (those made so far: unlocked and removed)."""
    import shutil

    for path, fd in [*jvm_tmp._held.items(),
                     *([(jvm_tmp._own[1], jvm_tmp._own[2])] if jvm_tmp._own else [])]:
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
    monkeypatch.setattr(jvm_tmp, "_own", None)
    monkeypatch.setattr(jvm_tmp, "_sockets", None)
    monkeypatch.setattr(jvm_tmp, "_held", {})


def test_every_temporary_directory_length_gets_a_socket_directory_that_works(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """TMPDIR of 15 to 120 characters (and /tmp): the JVM's directory stays under it, and
    Spark's sockets go where a socket of their real path length was bound and answered."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="k", dir="/tmp"))  # /tmp/kXXXXXXXX: 14 characters
    try:
        for length in [4, *range(16, 121)]:
            tmp = Path("/tmp") if length == 4 else root / ("d" * (length - len(str(root)) - 1))
            assert len(str(tmp)) == length
            tmp.mkdir(exist_ok=True)
            monkeypatch.setattr(tempfile, "tempdir", str(tmp))
            _forget(monkeypatch)
            jvm = jvm_tmp.driver_tmpdir()
            assert jvm is not None and jvm.parent == jvm_tmp.base_dir(), length
            sockets, why = jvm_tmp.socket_dir()
            assert sockets is not None, (length, why)
            assert jvm_tmp.fits(sockets) and jvm_tmp.prove_socket(sockets) is None, length
            assert sockets == jvm if jvm_tmp.fits(jvm) else sockets.parent.name.startswith(
                "kstorm-sock-"), (length, sockets)
            assert jvm_tmp.socket_dir() == (sockets, why)  # fixed for the process's life
    finally:
        _forget(monkeypatch)
        shutil.rmtree(root, ignore_errors=True)


def test_a_socket_that_cannot_work_is_refused_with_the_reason(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    why = jvm_tmp.prove_socket(deep)
    assert why is not None and "over the 60" in why
    assert jvm_tmp.prove_socket(tmp_path / "missing") is not None  # no such directory


def test_no_directory_for_sockets_anywhere_says_why(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    import tempfile

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.setattr(jvm_tmp, "SHORT_ROOTS", (str(tmp_path / "none"),))
    _forget(monkeypatch)
    try:
        sockets, why = jvm_tmp.socket_dir()
        assert sockets is None and "over the 60" in why and "none" in why
    finally:
        _forget(monkeypatch)
