"""Task affinity: a stage partition's bolt instances stay in one Python worker of a machine.

Spark hands a task to whichever of its Python workers is idle, so the partition of a stage
whose bolt instances one worker prepared often runs in another worker at the next
micro-batch (README, "How Storm maps onto Spark"). A bolt that holds tuples across batches
(seed 001's joins, a bolt that acks in bulk) then never sees them again, and they time out.

Here, the first worker process to run a partition of a stage run owns it: it holds an
exclusive lock (``flock``) on a file named after it, which also holds the address of the
Unix socket on which the worker serves its partitions to the other workers. A worker given
a partition another live worker owns streams the partition's input rows to the owner and
yields the rows the owner sends back: the bolts run in the owner, on the instances it
prepared. The owner runs them in a thread while its own Spark task, if any, goes on.

Nothing is lost when an owner dies (the kernel drops its lock): the next worker given its
partition takes the partition over and prepares new instances; tuples the dead owner held
time out and are replayed, as when a bolt's process dies in Storm. A forward that breaks
mid-batch fails the Spark task, which Spark runs again (the batch's outputs only count
when it commits). Owners are local to a machine (the lock files and sockets live in its
temporary directory), so on a cluster a partition keeps its instances while Spark runs it
on the same machine.

Wire format, both ways: frames of one type byte and an 8-byte big-endian length. The
request is ``R`` (pickled :class:`Request`), then ``B`` frames (an Arrow IPC stream of one
record batch) and ``D`` (end of input); the answer is ``B`` frames, then ``D``, or ``E``
(the owner's error, as text) instead. ``X`` (a stopped topology's run id) asks a worker to
let that run's bolt instances go (``cleanup``); it answers ``D``. Every worker that holds
bolt instances serves, owner or not, so a stopped topology reaches them all.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pickle
import socket
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from kstorm._spark.speedups.jvm_tmp import pid_alive
from kstorm.errors import KstormError

log = logging.getLogger("kstorm.affinity")

_HEADER = struct.Struct(">cQ")
REQUEST, BATCH, DONE, ERROR, RELEASE = b"R", b"B", b"D", b"E", b"X"
RELEASE_TIMEOUT_S = 10.0  # how long a worker may take to clean up a stopped run's bolts
OWNER_WAIT_S = 2.0  # how long a new owner may take to write its address


class ForwardError(KstormError):
    """The owner of a partition failed it, or its connection broke mid-batch."""


class OwnerError(ForwardError):
    """The owner's bolts failed the partition (its traceback is the message)."""


@dataclass(frozen=True)
class Request:
    """What a forwarding worker asks of the owner: run ``key`` with this task's context."""

    key: str
    partition: int
    properties: dict[str, str | None] = field(default_factory=dict)  # Spark local properties


# -- framing ----------------------------------------------------------------------------------


def _send(out: BinaryIO, kind: bytes, payload: bytes = b"") -> None:
    out.write(_HEADER.pack(kind, len(payload)))
    if payload:
        out.write(payload)


def _receive(inp: BinaryIO) -> tuple[bytes, bytes]:
    head = inp.read(_HEADER.size)
    if len(head) < _HEADER.size:
        msg = "the connection closed mid-batch"
        raise ForwardError(msg)
    kind, size = _HEADER.unpack(head)
    payload = inp.read(size) if size else b""
    if len(payload) < size:
        msg = "the connection closed mid-frame"
        raise ForwardError(msg)
    return kind, payload


def _batch_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _read_batch(payload: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(payload).read_next_batch()


def _batches_until_done(inp: BinaryIO) -> Iterator[pa.RecordBatch]:
    """``B`` frames up to ``D``; an ``E`` frame or a broken connection raises."""
    while True:
        kind, payload = _receive(inp)
        if kind == BATCH:
            yield _read_batch(payload)
        elif kind == DONE:
            return
        elif kind == ERROR:
            raise OwnerError(payload.decode("utf-8", "replace"))
        else:
            msg = f"unexpected frame {kind!r}"
            raise ForwardError(msg)


# -- ownership --------------------------------------------------------------------------------


Runner = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


class Affinity:
    """The partitions a process owns (with their runners) and its socket server."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(tempfile.gettempdir()) / f"kstorm-tasks-{os.getuid()}"
        self._lock = threading.Lock()
        self._owned: dict[str, tuple[int, Runner, threading.Lock]] = {}  # key -> (fd, ...)
        self._address: str | None = None
        self._server: socket.socket | None = None
        self._pid = os.getpid()
        self._broken = False
        self.on_release: Callable[[str], None] = self.release  # what ``X`` runs

    # Who owns what -------------------------------------------------------------------------

    def owner(self, key: str, runner: Runner) -> str | None:
        """Who runs partition ``key`` (None: this process; "": this process, unowned).

        None if this process owns it (claimed now if free), the owner's address if another
        live process does, or "" if affinity cannot work here (then this process runs it,
        as without affinity).

        ``runner`` is what this process runs for ``key`` while it owns it (on other workers'
        behalf too).
        """
        self._reset_after_fork()
        with self._lock:
            if key in self._owned:
                return None
            if self._broken:
                return ""
        try:
            path = self._path(key)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            return self._give_up(exc)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return self._address_of(path) or ""
        try:
            address = self._serve()
            os.ftruncate(fd, 0)
            os.pwrite(fd, address.encode(), 0)
        except OSError as exc:
            os.close(fd)
            return self._give_up(exc)
        with self._lock:
            self._owned[key] = (fd, runner, threading.Lock())
        return None

    def _give_up(self, exc: OSError) -> str:
        """No lock file or socket here (a full disk, a socket path too long): run locally."""
        with self._lock:
            first, self._broken = not self._broken, True
        if first:
            log.warning("bolt instances stay per Python worker in this process (pid %d): "
                        "cannot use %s for task affinity: %s", os.getpid(), self.directory,
                        exc)
        return ""

    def run_owned(self, key: str, batches: Iterator[pa.RecordBatch]
                  ) -> Iterator[pa.RecordBatch]:
        """Run an owned partition (one run of it at a time)."""
        _, runner, lock = self._owned[key]
        with lock:
            yield from runner(batches)

    def release(self, prefix: str) -> None:
        """Give up the partitions whose keys start with ``prefix`` (a stage run let go)."""
        with self._lock:
            keys = [k for k in self._owned if k.startswith(prefix)]
            released = [(k, self._owned.pop(k)) for k in keys]
        for key, (fd, _, _) in released:
            with contextlib.suppress(OSError):
                self._path(key).unlink()
            os.close(fd)

    def _path(self, key: str) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return self.directory / f"{key}.owner"

    @staticmethod
    def _address_of(path: Path) -> str | None:
        """The owner's socket address (it may still be writing it: waits a little)."""
        deadline = time.monotonic() + OWNER_WAIT_S
        while True:
            try:
                address = path.read_text()
            except FileNotFoundError:
                return None
            if address:
                return address
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)

    def _reset_after_fork(self) -> None:
        """A forked child owns nothing of its parent's (its locks and server stay there)."""
        if os.getpid() != self._pid:
            self._lock = threading.Lock()
            self._owned, self._address, self._server = {}, None, None
            self._pid, self._broken = os.getpid(), False

    def close(self) -> None:
        """Give up every partition and stop serving (at process exit)."""
        self.release("")
        with self._lock:
            server, address, self._server, self._address = self._server, self._address, None, None
        if server is not None:
            server.close()
        if address is not None:
            with contextlib.suppress(OSError):
                os.unlink(address)

    # Serving ------------------------------------------------------------------------------

    def serving(self) -> None:
        """Serve (if not yet): other workers and stopped topologies can reach this one."""
        self._reset_after_fork()
        if self._broken:
            return
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._serve()
        except OSError as exc:
            self._give_up(exc)

    def _serve(self) -> str:
        with self._lock:
            if self._address is not None:
                return self._address
            address = str(self.directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.sock")
            _remove_stale(self.directory)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(address)
            server.listen(16)
            self._server, self._address = server, address
            import atexit

            atexit.register(self.close)
        threading.Thread(target=self._accept, args=(server,), name="kstorm-affinity",
                         daemon=True).start()
        return address

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), name="kstorm-affinity-task",
                             daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as inp, conn.makefile("wb") as out:
            try:
                kind, payload = _receive(inp)
                if kind == RELEASE:
                    self.on_release(payload.decode())
                    _send(out, DONE)
                    out.flush()
                    return
                if kind != REQUEST:
                    return
                request: Request = pickle.loads(payload)
                if request.key not in self._owned:
                    _send(out, ERROR, f"not the owner of {request.key}".encode())
                    out.flush()
                    return
                with task_context(request.partition, request.properties):
                    for batch in self.run_owned(request.key, _batches_until_done(inp)):
                        _send(out, BATCH, _batch_bytes(batch))
                _send(out, DONE)
                out.flush()
            except ForwardError:
                return  # the forwarding worker went away: its Spark task runs again
            except Exception as exc:  # the bolts' error goes back to the Spark task
                import traceback

                with contextlib.suppress(OSError):
                    _send(out, ERROR, "".join(traceback.format_exception(exc)).encode())
                    out.flush()


STALE_OWNER_S = 3600.0  # an owner file nobody has held for this long belongs to a past run


def _remove_stale(directory: Path) -> None:
    """Files of processes that are gone (Spark ends its workers with ``os._exit``).

    A socket whose process is dead, and an owner file that no process holds and nobody
    touched for :data:`STALE_OWNER_S` (run ids are new for every submit).
    """
    old = time.time() - STALE_OWNER_S
    for path in directory.iterdir():
        with contextlib.suppress(OSError):
            if path.suffix == ".sock":
                pid = path.name.split("-", 1)[0]
                if pid.isdigit() and not pid_alive(int(pid)):
                    path.unlink()
            elif path.suffix == ".owner" and path.stat().st_mtime < old:
                fd = os.open(path, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    path.unlink()
                except BlockingIOError:
                    pass
                finally:
                    os.close(fd)


def broadcast_release(prefix: str, directory: Path | None = None) -> int:
    """Ask every live worker serving in ``directory`` to let run ``prefix``'s bolts go.

    Returns how many answered. A worker that does not answer within
    :data:`RELEASE_TIMEOUT_S` (a bolt's ``cleanup`` hanging) is left alone.
    """
    directory = directory or AFFINITY.directory
    answered = 0
    for path in sorted(directory.glob("*.sock")) if directory.is_dir() else []:
        pid = path.name.split("-", 1)[0]
        if not pid.isdigit() or not pid_alive(int(pid)):
            continue
        conn = connect(str(path))
        if conn is None:
            continue
        conn.settimeout(RELEASE_TIMEOUT_S)
        try:
            with conn, conn.makefile("rb") as inp, conn.makefile("wb") as out:
                _send(out, RELEASE, prefix.encode())
                out.flush()
                if _receive(inp)[0] == DONE:
                    answered += 1
        except (OSError, ForwardError) as exc:
            log.warning("worker %s did not let run %s's bolts go: %s", pid, prefix, exc)
    return answered


def connect(address: str) -> socket.socket | None:
    """A connection to an owner, or None if it is not there (it died; a stale address)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address)
    except OSError:
        conn.close()
        return None
    return conn


def forward(conn: socket.socket, request: Request, batches: Iterator[pa.RecordBatch]
            ) -> Iterator[pa.RecordBatch]:
    """Run a partition in its owner: stream ``batches`` there, yield what comes back."""
    failure: list[BaseException] = []
    with conn, conn.makefile("rb") as inp:
        out = conn.makefile("wb")

        def send_input() -> None:
            try:
                for batch in batches:
                    _send(out, BATCH, _batch_bytes(batch))
                _send(out, DONE)
                out.flush()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the Spark task's thread
                failure.append(exc)
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_WR)

        _send(out, REQUEST, pickle.dumps(request))
        out.flush()
        sender = threading.Thread(target=send_input, name="kstorm-affinity-send", daemon=True)
        sender.start()
        clean = False
        try:
            yield from _batches_until_done(inp)
            clean = True
        except OwnerError:
            raise
        except ForwardError:  # the connection broke: maybe because Spark's input failed
            if failure and not isinstance(failure[0], OSError):
                raise failure[0] from None
            raise
        finally:
            if not clean:  # unblock the sender if the owner stopped reading
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            sender.join()
            with contextlib.suppress(OSError):
                out.close()
        if failure:
            raise failure[0]


# -- the Spark task's context, for a partition run on another worker's behalf ----------------

_TASK = threading.local()


@contextlib.contextmanager
def task_context(partition: int, properties: dict[str, str | None]) -> Iterator[None]:
    """Stand in for Spark's ``TaskContext`` in this thread (see :func:`local_property`)."""
    _TASK.value = (partition, properties)
    try:
        yield
    finally:
        _TASK.value = None


def forwarded_task() -> tuple[int, dict[str, str | None]] | None:
    """``(partition, local properties)`` when this thread runs a forwarded partition."""
    return getattr(_TASK, "value", None)


AFFINITY = Affinity()
