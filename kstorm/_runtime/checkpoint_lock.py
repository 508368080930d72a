"""One driver per checkpoint: an exclusive lock held for the topology's life.

Two drivers on one checkpoint (a second ``kstorm run``, a restarted pod whose predecessor
still runs) would each plan batches and rewrite Spark's logs and kstorm's files under the
other (a start may move the checkpoint aside, or take a batch out of Spark's commit log to
run it again), with nothing to say which driver's batches the sinks hold. The second driver
to start gets a :class:`StateError` naming the first instead.

The lock is ``flock`` on ``<checkpoint>/.lock`` (Spark ignores the file). The caller notes
whether the checkpoint existed before locking creates its directory. A checkpoint moved aside
takes its lock file along: :meth:`CheckpointLock.follow` locks the new directory's before
letting the old one go. The kernel releases the lock when the driver's process dies however
it dies (``SIGKILL`` included), so a restart never waits on a dead driver; on a shared mount
(NFS) the lock is the server's, seen by drivers on every machine.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kstorm.errors import StateError

_HINT = ("stop the other driver first (one killed with SIGKILL lets go at once), or give this "
         "topology its own kstorm.checkpoint.dir")
_held: dict[Path, CheckpointLock] = {}  # this process's locks, by lock file
_held_guard = threading.Lock()


def lock_path(checkpoint: Path) -> Path:
    """Where the lock of ``checkpoint`` lives."""
    return checkpoint / ".lock"


class CheckpointLock:
    """The lock of one checkpoint, held by this process until :meth:`release`."""

    def __init__(self, checkpoint: Path, path: Path, fd: int) -> None:
        self.checkpoint = checkpoint
        self.path = path
        self._fd: int | None = fd
        self.running: Callable[[], bool] | None = None  # set once the query runs

    @classmethod
    def acquire(cls, checkpoint: Path, topology: str) -> CheckpointLock:
        """Lock ``checkpoint`` for ``topology``'s driver, or raise :class:`StateError`."""
        checkpoint = Path(checkpoint)
        path = lock_path(checkpoint)
        _let_go_if_finished(path)
        for _ in range(10):
            fd = _locked(checkpoint, path)
            if _same_file(fd, path):
                break
            os.close(fd)  # removed or moved aside since it was opened: lock the file there now
        else:
            msg = f"cannot lock the checkpoint {checkpoint}: {path} keeps being replaced"
            raise StateError(msg, hint=_HINT)
        lock = cls(checkpoint, path, fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"topology": topology, "pid": os.getpid(),
                                  "host": socket.gethostname(),
                                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                                  }).encode(), 0)
        with _held_guard:
            _held[path] = lock
        return lock

    def follow(self, topology: str) -> None:
        """The checkpoint was moved aside with its lock file: lock the new directory's.

        The new lock is taken before the old one is let go, so no other driver runs between.
        """
        old_fd, self._fd = self._fd, None
        try:
            fresh = CheckpointLock.acquire(self.checkpoint, topology)
        except BaseException:
            self._fd = old_fd
            raise
        with _held_guard:
            _held[self.path] = self
        self._fd, fresh._fd = fresh._fd, None
        if old_fd is not None:
            os.close(old_fd)

    def release(self, *, discard: bool = False) -> None:
        """Let the checkpoint go (idempotent).

        ``discard``: the checkpoint did not exist before this lock made its directory (a
        start that was refused): remove the lock file and the directory if nothing else is
        in it, while still holding the lock.
        """
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with _held_guard:
            if _held.get(self.path) is self:
                del _held[self.path]
        try:
            if discard and _same_file(fd, self.path) and \
                    [p.name for p in self.checkpoint.iterdir()] == [self.path.name]:
                self.path.unlink()
                self.checkpoint.rmdir()
        except OSError:
            pass  # something else appeared in it meanwhile: it stays
        finally:
            os.close(fd)  # closing the only descriptor releases the flock

    @property
    def held(self) -> bool:
        return self._fd is not None


def _locked(checkpoint: Path, path: Path) -> int:
    """A descriptor of ``path`` holding its exclusive lock, or :class:`StateError`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            msg = (f"cannot lock the checkpoint {checkpoint} ({path}: {exc}): kstorm makes "
                   "sure one driver at a time runs a checkpoint")
            raise StateError(msg, hint="put the checkpoint on a file system with file locks "
                                       "(a local disk, NFS)") from exc
        holder = _holder(path)
        msg = (f"the checkpoint {checkpoint} is in use by another running topology "
               f"({holder}): two drivers on one checkpoint would plan and commit batches "
               "over each other's files")
        raise StateError(msg, hint=_HINT) from exc
    return fd


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not removed or replaced)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _let_go_if_finished(path: Path) -> None:
    """A lock this process holds for a query that has ended (its handle never stopped)."""
    with _held_guard:
        mine = _held.get(path)
    if mine is None or mine.running is None:
        return
    try:
        ended = not mine.running()
    except Exception:  # noqa: BLE001 - a session gone: its query is gone too
        ended = True
    if ended:
        mine.release()


def _holder(path: Path) -> str:
    """Who holds the lock at ``path``, as its file says."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "holder unknown"
    same = info.get("host") == socket.gethostname() and info.get("pid") == os.getpid()
    who = "this process" if same else f"pid {info['pid']} on {info.get('host', '?')}"
    return f"topology {info.get('topology', '?')!r}, {who}, since {info.get('since', '?')}"
