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

Not used where the temporary directory is not usable (or its path has a space: Java
options split on spaces), or when ``spark.driver.extraJavaOptions`` already sets
``java.io.tmpdir``.

The Unix sockets between the JVM and its Python processes (:func:`socket_dir`) go to a
directory of the driver's own too, chosen apart from ``java.io.tmpdir``: a socket path must
fit in 107 bytes whatever ``TMPDIR`` is, so where the JVM's directory is too deep for
Spark's socket names, a short one (``/tmp/kstorm-sock-<uid>/<pid>-<random>``, swept the same
way) holds them. Each candidate is proven first: a socket of Spark's real path length is
bound there, connected to and answered once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import socket
import stat
import tempfile
import time
import uuid
from pathlib import Path

log = logging.getLogger("kstorm")

LOCK = ".owner"
SUN_PATH_MAX = 107  # bytes of a Unix socket's path on Linux (sun_path holds 108 with its NUL)
SOCKET_DIR_MAX = 60  # characters: Spark refuses a longer spark.python.unix.domain.socket.dir
SPARK_SOCKET_NAME = f".{uuid.UUID(int=0)}.sock"  # Spark names its sockets ".<uuid>.sock"
SHORT_ROOTS = ("/tmp", "/dev/shm", "/var/tmp")  # for sockets where TMPDIR is too deep
STALE_UNLOCKED_S = 3600.0  # a directory without its lock file (its driver died making it)

_own: tuple[int, Path, int] | None = None  # (pid, directory, lock fd): java.io.tmpdir
_sockets: tuple[int, Path | None, str] | None = None  # (pid, directory or None, why not)
_held: dict[Path, int] = {}  # other directories of this process -> their lock fd


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
        path, fd = _locked_dir(base_dir())
    except OSError as exc:
        log.info("no private JVM temporary directory (%s): the JVM uses its default", exc)
        return None
    if " " in str(path):  # Java options split on spaces
        _release(path, fd)
        log.info("no private JVM temporary directory: %s has a space; the JVM uses its "
                 "default", path)
        return None
    _own = (os.getpid(), path, fd)
    return path


def socket_dir() -> tuple[Path | None, str]:
    """A proven directory of this driver for Spark's Unix sockets, or None and why not.

    The JVM's own directory (:func:`driver_tmpdir`) where Spark's socket paths fit and work
    there, else a short directory of this driver under one of :data:`SHORT_ROOTS`. Fixed for
    the process's life (its JVM has it).
    """
    global _sockets
    if _sockets is not None and _sockets[0] == os.getpid():
        return _sockets[1], _sockets[2]
    reasons = []
    candidates = [driver_tmpdir()]
    for root in SHORT_ROOTS:
        candidates.append(Path(root) / f"kstorm-sock-{os.getuid()}")
    chosen: Path | None = None
    for index, candidate in enumerate(candidates):
        if candidate is None:
            continue
        if index > 0:
            if not fits(candidate / f"{os.getpid()}-xxxxxxxx"):
                reasons.append(f"{candidate}: too long")
                continue
            try:
                candidate, fd = _locked_dir(candidate)
            except OSError as exc:
                reasons.append(f"{candidate}: {exc}")
                continue
            _held[candidate] = fd
        why = prove_socket(candidate)
        if why is None:
            chosen = candidate
            break
        reasons.append(why)
        if index > 0:
            _release(candidate, _held.pop(candidate))
    _sockets = (os.getpid(), chosen, "; ".join(reasons))
    return _sockets[1], _sockets[2]


def fits(directory: Path) -> bool:
    """Whether Spark takes ``directory`` for its sockets and their paths fit.

    At most :data:`SOCKET_DIR_MAX` characters, and Spark's socket files there fit in a Unix
    socket's path.

    Example:
        >>> fits(Path("/tmp/kstorm-jvm-0/123-abcdefgh")), fits(Path("/" + "d" * 70))
        (True, False)
    """
    return (len(str(directory)) <= SOCKET_DIR_MAX
            and len(os.fsencode(directory / SPARK_SOCKET_NAME)) <= SUN_PATH_MAX)


def prove_socket(directory: Path) -> str | None:
    """None if a Unix socket of Spark's path length in ``directory`` works; else why not.

    Binds ``<directory>/.<uuid>.sock`` (the name Spark gives its own), connects to it and
    sends one byte each way, then removes it.
    """
    path = directory / f".{uuid.uuid4()}.sock"
    if len(str(directory)) > SOCKET_DIR_MAX:
        return (f"{directory} is {len(str(directory))} characters, over the "
                f"{SOCKET_DIR_MAX} Spark takes for spark.python.unix.domain.socket.dir")
    if not fits(directory):
        return (f"{path} is {len(os.fsencode(path))} bytes, over the {SUN_PATH_MAX} of a Unix "
                "socket's path")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(path))
            server.listen(1)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(5.0)
                client.connect(str(path))
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(5.0)
                    client.sendall(b"k")
                    if conn.recv(1) != b"k":
                        return f"{path}: the byte sent did not arrive"
                    conn.sendall(b"s")
                    if client.recv(1) != b"s":
                        return f"{path}: the answer did not arrive"
    except OSError as exc:
        return f"{path}: {exc}"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return None


def _locked_dir(parent: Path) -> tuple[Path, int]:
    """A new directory of this process in ``parent`` (made private, swept), and its lock."""
    base = private_dir(parent)
    sweep(base)
    path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))
    try:
        fd = os.open(path / LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path, fd


def _release(path: Path, fd: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.close(fd)


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
