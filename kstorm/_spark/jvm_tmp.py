"""The driver JVM's temporary directory: one per driver, removed once its driver is gone.

A JVM puts everything temporary under ``java.io.tmpdir`` (``/tmp``): Spark's scratch
(``spark-*``, ``blockmgr-*``, ``artifacts-*``), the Unix sockets to its Python processes, and
the native libraries its jars unpack at every start (RocksDB's ``librocksdbjni*.so``, 15 MB;
``liblz4-java*.so``). Spark's shutdown hooks and ``deleteOnExit`` remove them when the JVM
exits normally; a JVM that is killed (``SIGKILL``, the OOM killer, a lost container) leaves
them all: ~15 MB and a few directories per start (a test suite that kills drivers on
purpose left 0.5 GB per run in ``/tmp``).

So the driver JVM kstorm starts gets a directory of its own (``-Djava.io.tmpdir``):
``<tempdir>/kstorm-jvm-<uid>/<pid>-<random>``, which its driver process holds an exclusive
``flock`` on (``.owner``) for its whole life. Each new driver first removes the directories
whose lock nobody holds any more (their driver exited or was killed; the kernel drops a dead
process's locks, across PID namespaces too). Nothing else is touched: only directories under
this user's private ``kstorm-jvm-<uid>``, and only unlocked ones.

Not used where the path would be too long for the JVM's Unix sockets under it, where the
temporary directory is not usable, or when ``spark.driver.extraJavaOptions`` already sets
``java.io.tmpdir``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

log = logging.getLogger("kstorm")

LOCK = ".owner"
MAX_PATH = 60  # Spark's socket files (".<uuid>.sock", 42 bytes) must fit in sun_path (107)
STALE_UNLOCKED_S = 3600.0  # a directory without its lock file (its driver died making it)

_own: tuple[int, Path, int] | None = None  # (pid, directory, lock fd) of this process


def base_dir() -> Path:
    """The parent of this user's drivers' JVM temporary directories."""
    return Path(tempfile.gettempdir()) / f"kstorm-jvm-{os.getuid()}"


def driver_tmpdir() -> Path | None:
    """The JVM temporary directory of this driver (made and locked on first use), or None.

    Directories of drivers that are gone are removed first (:func:`sweep`).
    """
    global _own
    if _own is not None and _own[0] == os.getpid():
        return _own[1]
    try:
        base = private_dir(base_dir())
        sweep(base)
        path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))
        if len(str(path)) > MAX_PATH or " " in str(path):  # (options split on spaces)
            shutil.rmtree(path, ignore_errors=True)
            log.info("no private JVM temporary directory: %s is too long for the JVM's Unix "
                     "sockets (or has a space); the JVM uses its default", path)
            return None
        fd = os.open(path / LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        log.info("no private JVM temporary directory (%s): the JVM uses its default", exc)
        return None
    _own = (os.getpid(), path, fd)
    return path


def sweep(base: Path) -> list[Path]:
    """Remove the directories in ``base`` whose driver is gone; returns them."""
    removed = []
    for entry in base.iterdir():
        if not entry.is_dir() or entry.is_symlink():
            continue
        try:
            fd = os.open(entry / LOCK, os.O_RDWR)
        except FileNotFoundError:  # being made right now, or its driver died making it
            with contextlib.suppress(OSError):
                if time.time() - entry.stat().st_mtime > STALE_UNLOCKED_S:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(entry)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its driver holds it: in use
            os.close(fd)
            continue
        try:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
        finally:
            os.close(fd)
    return removed


def private_dir(path: Path) -> Path:
    """``path``, made if missing: a real directory of this user, closed to others.

    In a shared ``/tmp`` nobody else's directory or symlink is used or swept.
    """
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        msg = f"{path} is not a private directory of this user"
        raise OSError(msg)
    return path


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (of any user), for files named after their process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def java_option(extra_java_options: str) -> str:
    """``extra_java_options`` with ``-Djava.io.tmpdir`` of this driver, unless it has one.

    Example:
        >>> java_option("-Xss4m -Djava.io.tmpdir=/mine")
        '-Xss4m -Djava.io.tmpdir=/mine'
    """
    if "-Djava.io.tmpdir=" in extra_java_options:
        return extra_java_options
    path = driver_tmpdir()
    if path is None:
        return extra_java_options
    return f"{extra_java_options} -Djava.io.tmpdir={path}".strip()
