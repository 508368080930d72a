"""Spark's Python helper processes forked from one that has already imported pyspark.

With a local master, Spark starts a new Python process for each of a query's helpers, one
after the other on the path to the first result: the ``create_data_source`` planner, the
streaming source runner, the read planner, the worker daemon. Each imports pyspark, pyarrow
and kstorm before it does anything (0.3-0.6 s of CPU each on a 2-core machine, while the
JVM needs the same cores). Here a *zygote* imports them once, beside the JVM's start, and
Spark's processes are forked from it:

- The session's Python executable (``SparkContext.pythonExec``) is a small launcher
  (:data:`LAUNCHER`, one file per interpreter in kstorm's cache directory, shared by every
  driver). Spark runs it as it would run Python (``launcher -m <module> ...``). The
  launcher hands its arguments, environment, working directory and standard streams
  (``SCM_RIGHTS``) to the zygote over a Unix socket in the abstract namespace (nothing on
  disk: a killed driver leaves nothing behind); the zygote forks only for a peer of its
  own user (``SO_PEERCRED``), the child takes them and runs the module as ``python -m``
  would. The launcher stays as Spark's process: it forwards signals to the child and
  exits with its status.
- Anything the zygote cannot do exactly as a new interpreter would is refused and the
  launcher ``exec``s the real interpreter instead: arguments other than ``-m``, a
  ``PYTHON*`` variable that differs from the zygote's (the hash seed, ...), a pyspark or
  py4j zip on the path that is not the installed pyspark's, no zygote listening.
- The zygote is the parent of the processes it forked, as the JVM would be, and lives
  while any of them runs (reaping them: nothing is left to ``init``, or to a driver that
  is a container's PID 1). With none, it exits ``idle_s`` after its last fork, but not
  within ``first_s`` of a query's start (:func:`ensure_running`, which also starts it again
  as a query starts): a query's planner helpers may end well before its batch workers
  ask. It also exits when the driver's pipe to it closes (the driver exited, or
  :func:`stop`); a child then outlives it, and its launcher waits for the child's exit
  (``pidfd``).

Used for sessions kstorm starts with a local master on Linux, when ``PYSPARK_PYTHON`` is
this interpreter (``kstorm.spark.python.zygote``; README "Start-up"). Executors of a cluster
start Python as Spark does.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("kstorm.spark")

IDLE_S = 5.0  # a query's helpers start within ~2 s of each other on a busy 2-core machine
FIRST_S = 120.0  # from a query's start until its batch workers have asked at least once
ENV = "KSTORM_ZYGOTE"  # the zygote's address, in the JVM's (and so the launcher's) environment

# The modules Spark's helpers run and what they unpickle (kstorm's data source).
PRELOAD = ("pyspark.daemon", "pyspark.worker", "pyspark.sql.worker.create_data_source",
           "pyspark.sql.worker.plan_data_source_read",
           "pyspark.sql.streaming.python_streaming_source_runner",
           # a stateful bolt's transformWithState: its driver-side runner and the workers'
           # state client import these protobuf messages as they start (~20 ms, and more
           # where the runner's path starts with a zip, whose directory it reads first)
           "pyspark.sql.streaming.transform_with_state_driver_worker",
           "pyspark.sql.streaming.proto.StateMessage_pb2",
           "kstorm", "kstorm._spark.kafka_source", "kstorm._spark.speedups.daemon")

LAUNCHER = '''#!{exe} -IS
"""kstorm's launcher for Spark's Python processes (kstorm/_spark/speedups/zygote.py).

It starts on every process Spark starts: only C modules (``_socket``, ``_signal``), no
``socket``/``signal``/``struct`` (their imports cost as much again as the interpreter).
"""
import os
import sys

REAL = {exe!r}


def run_python():
    os.execv(REAL, [REAL, *sys.argv[1:]])


addr = os.environ.get({env!r})
if not addr or not addr.startswith("@") or len(sys.argv) < 3 or sys.argv[1] != "-m":
    run_python()
addr = "\\0" + addr[1:]  # a socket in the abstract namespace
import _signal
import _socket
import marshal
import select


def recv(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
try:
    sock.connect(addr)
    body = marshal.dumps((sys.argv[2:], dict(os.environ), os.getcwd()))
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
    sock.sendmsg([len(body).to_bytes(4, "big"), body],
                 [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    head = recv(sock, 4)
except OSError:
    head = None
pid = int.from_bytes(head, "big", signed=True) if head else 0
if pid <= 0:
    sock.close()
    run_python()


def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except OSError:
        pass


for signum in (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGUSR1,
               _signal.SIGUSR2):
    _signal.signal(signum, forward)
try:
    status = recv(sock, 4)
except OSError:
    status = None
if status is None:  # the zygote exited before its child: wait for the child itself
    try:
        fd = os.pidfd_open(pid)
        select.select([fd], [], [])
    except OSError:
        pass
    os._exit(0)
code = os.waitstatus_to_exitcode(int.from_bytes(status, "big", signed=True))
if code < 0:
    _signal.signal(-code, _signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
'''

_lock = threading.Lock()
_address: str | None = None
_proc: subprocess.Popen[bytes] | None = None
_stop_registered = False


def supported() -> bool:
    """Whether this platform and interpreter can run the zygote (Linux, fork, pidfd)."""
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open") and \
        hasattr(os, "fork")


_proof: list[str | None] = []  # this process's proof, once


def proof() -> str | None:
    """Why the zygote cannot work here, or None once it proved it can (once per process).

    What every fork of the zygote needs, tried once: bind a socket in the abstract namespace,
    fork a child, hand it a descriptor over a Unix socket (``SCM_RIGHTS``) with the sender's
    credentials readable (``SO_PEERCRED``), and read back the byte the child writes to it.
    """
    if not _proof:
        try:
            _proof.append(_fork_and_exchange())
        except OSError as exc:
            _proof.append(f"fork and exchange failed here ({exc})")
    return _proof[0]


def _fork_and_exchange(timeout_s: float = 10.0) -> str | None:
    import select
    import warnings

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.bind(f"\0kstorm-zygote-proof-{os.getpid()}-{secrets.token_hex(4)}")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    r, w = os.pipe()
    try:
        with warnings.catch_warnings():  # the child only moves a byte and exits
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: the byte, back through the descriptor it was given
            code = 1
            try:
                msg, ancillary, _, _ = theirs.recvmsg(1, socket.CMSG_SPACE(4))
                fd = int.from_bytes(ancillary[0][2][:4], sys.byteorder)
                code = 0 if os.write(fd, msg) == 1 else 1
            finally:
                os._exit(code)
        try:
            ours.sendmsg([b"k"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                   w.to_bytes(4, sys.byteorder))])
            if _peer_uid(ours) != os.getuid():
                return "SO_PEERCRED does not name this user"
            ready, _, _ = select.select([r], [], [], timeout_s)
            got = os.read(r, 1) if ready else b""
        finally:
            os.waitpid(pid, 0)
        return None if got == b"k" else "a forked child did not answer through a passed fd"
    finally:
        for fd in (r, w):
            os.close(fd)
        ours.close()
        theirs.close()


def address() -> str:
    """The zygote address of this process (fixed for its life: the JVM has it in its environment).

    ``@`` then a name in the abstract socket namespace: unique to this driver, removed by
    the kernel when its zygote exits.
    """
    global _address
    if _address is None:
        _address = f"@kstorm-zygote-{os.getpid()}-{secrets.token_hex(8)}"
    return _address


def _bind_address() -> str:
    return "\0" + address()[1:]


_launchers: dict[tuple[str, Path], str | None] = {}  # (interpreter, folder) -> launcher


def launcher() -> str | None:
    """The launcher's path (written on first use), or None where it cannot work.

    One file per interpreter (its content depends only on the interpreter's path) in
    ``<cache>/zygote``; None where that directory cannot hold an executable (unwritable,
    mounted ``noexec``): Spark then starts Python as usual.
    """
    # the path as invoked, not its target: a virtual environment's python is a symlink to
    # the base interpreter, which run by its own path would not see the environment
    exe = os.path.abspath(sys.executable)
    if not supported() or len(exe) > 120:
        return None  # a shebang line has a length limit
    from kstorm._spark.speedups.launch import cache_dir

    text = LAUNCHER.format(exe=exe, env=ENV)
    folder = cache_dir() / "zygote"
    known = _launchers.get((exe, folder), "")
    if known is None:  # tried once in this process (and its failure logged once)
        return None
    if known and os.path.exists(known):
        return known
    path = folder / f"python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    _launchers[(exe, folder)] = found = _write_launcher(folder, path, text)
    return found


def _write_launcher(folder: Path, path: Path, text: str) -> str | None:
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.statvfs(folder).f_flag & os.ST_NOEXEC:
            return None  # Spark could not run it
        if not path.exists():
            _remove_orphans(folder)
            fd, tmp = tempfile.mkstemp(prefix=".python-", dir=folder)
            try:
                with os.fdopen(fd, "w") as out:
                    out.write(text)
                os.chmod(tmp, 0o700)
                os.replace(tmp, path)  # whole, or not at all (another driver may race)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    except OSError as exc:
        log.info("kstorm cannot write its Python launcher in %s (%s); Spark starts Python "
                 "as usual", folder, exc)
        return None
    return str(path)


def _remove_orphans(folder: Path) -> None:
    """Remove the launchers whose interpreter is gone (a deleted virtual environment)."""
    for entry in folder.glob("python-*"):
        with contextlib.suppress(OSError, ValueError), open(entry, "rb") as f:
            shebang = f.readline()
            exe = shebang[2:].split()[0].decode() if shebang.startswith(b"#!") else ""
            if exe and not os.path.exists(exe):
                entry.unlink()


def ensure_running(idle_s: float = IDLE_S, first_s: float = FIRST_S) -> None:
    """Start the zygote unless it runs, and keep it for the query about to start.

    It exits by itself once it has had no child for ``idle_s`` — but not before
    ``first_s`` after this call, so a query whose batch workers start late still finds it.
    """
    global _proc, _stop_registered
    with _lock:
        if _proc is not None and _proc.poll() is None:
            try:  # keep it: a new query is about to start helpers
                assert _proc.stdin is not None
                _proc.stdin.write(b"k")
                _proc.stdin.flush()
                return
            except OSError:
                pass
        if _proc is not None:
            _reap(_proc)
        env = dict(os.environ)
        env["PYTHONHASHSEED"] = env.get("PYTHONHASHSEED", "0")  # what SparkContext gives
        env["PYTHONUNBUFFERED"] = "YES"
        from kstorm._spark.speedups.launch import log_path

        # bound here, so a launcher can connect while the zygote is still importing
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        err = open(log_path(), "ab")  # noqa: SIM115 - the child holds it
        try:
            listener.bind(_bind_address())  # the last zygote's, if any, has exited (_reap)
            listener.listen(64)
            if not _stop_registered:
                atexit.register(stop)
                _stop_registered = True
            _proc = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", "kstorm._spark.speedups.zygote", str(listener.fileno()),
                 str(idle_s), str(first_s)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, env=env,
                cwd=_cwd(), pass_fds=(listener.fileno(),))
        finally:
            err.close()
            listener.close()


def _cwd() -> str:
    """The working directory of this process, or ``/`` once it was deleted under it.

    Each child changes to its launcher's own directory; the zygote's matters only as
    somewhere to be.
    """
    try:
        return os.getcwd()
    except OSError:
        return "/"


def stop() -> None:
    """Stop the zygote (its children go on)."""
    global _proc
    with _lock:
        if _proc is not None:
            _reap(_proc)
            _proc = None


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---- the zygote process -----------------------------------------------------------------

def serve(fd: int, idle_s: float = IDLE_S, first_s: float = FIRST_S) -> None:
    """Accept the launchers' requests on the listening socket ``fd`` (module docstring)."""
    import selectors
    import signal

    # Ctrl-C is the driver's to handle, as pyspark starts the JVM; Spark's Python processes
    # (this one's children) ignore it too
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listener = socket.socket(fileno=fd)
    _preload()
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(0, selectors.EVENT_READ, "driver")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    children: dict[int, socket.socket | None] = {}  # pid -> its launcher's connection
    state = _Zygote(listener, wake_r, wake_w, sel, children)
    clock = _monotonic
    deadline = clock() + first_s
    while True:
        left = None  # the parent of Spark's Python processes while any of them runs
        if not children:
            left = deadline - clock()
            if left <= 0:
                break
        events = sel.select(left)
        done = False
        for key, _ in events:
            if key.data == "accept":
                conn, _ = listener.accept()
                if state.fork_for(conn):  # never sooner than a starting query's window
                    deadline = max(deadline, clock() + idle_s)
            elif key.data == "driver":
                if not os.read(0, 64):
                    done = True
                elif deadline < clock() + first_s:
                    deadline = clock() + first_s  # a query starts: wait for its helpers
            elif key.data == "child":
                try:
                    wake_r.recv(4096)
                except BlockingIOError:
                    pass
                state.reap()
            else:  # a launcher went away (killed): stop its child as Spark would have
                pid = key.data
                sel.unregister(key.fileobj)
                children[pid] = None
                key.fileobj.close()
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
        if state.reap() and not children:
            deadline = max(deadline, clock() + idle_s)
        if done:
            break


def _monotonic() -> float:
    import time

    return time.monotonic()


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        try:
            module = importlib.import_module(name)
            for public in getattr(module, "__all__", ()) if name == "kstorm" else ():
                getattr(module, public)  # kstorm imports its public names on first use
        except Exception as exc:  # noqa: BLE001 - a child imports it again and says why
            print(f"kstorm zygote: cannot preload {name}: {exc}", file=sys.stderr)


class _Zygote:
    """The zygote's sockets and children (the parent side of each fork)."""

    def __init__(self, listener, wake_r, wake_w, sel, children) -> None:  # noqa: ANN001
        self.listener, self.wake_r, self.wake_w = listener, wake_r, wake_w
        self.sel, self.children = sel, children
        self.env = _startup_env(os.environ)
        own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.base_path = [p for p in sys.path[1:] if p not in own]

    def fork_for(self, conn) -> bool:  # noqa: ANN001
        """Serve one launcher: fork its process, or refuse (it then runs Python itself)."""
        import array
        import marshal
        import struct

        fds: list[int] = []
        try:
            if _peer_uid(conn) != os.getuid():  # the abstract namespace has no permissions
                print("kstorm zygote: refused a connection from another user", file=sys.stderr)
                return False
            msg, anc, _, _ = conn.recvmsg(4, socket.CMSG_LEN(3 * 4))
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(data[:len(data) - len(data) % got.itemsize])
                    fds.extend(got)
            body = _recv(conn, struct.unpack("!I", msg)[0]) if len(msg) == 4 else None
            request = marshal.loads(body) if body is not None else None
            why = self.refusal(request, fds)
            if why is not None:
                print(f"kstorm zygote: {request[0] if request else '?'} starts as a new "
                      f"interpreter: {why}", file=sys.stderr)
                conn.sendall(struct.pack("!i", 0))
                return False
            argv, env, cwd = request
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                self.child(argv, env, cwd, fds, conn)
            conn.sendall(struct.pack("!i", pid))
            self.children[pid] = conn
            self.sel.register(conn, 1, pid)  # selectors.EVENT_READ
            conn = None
            return True
        except OSError:
            return False
        finally:
            for fd in fds:
                os.close(fd)
            if conn is not None:
                conn.close()

    def refusal(self, request, fds: list[int]) -> str | None:  # noqa: ANN001
        """Why this request must run in a new interpreter, or None."""
        if request is None or len(fds) != 3:
            return "malformed"
        argv, env, _ = request
        if not argv or argv[0].startswith("-"):
            return "not -m <module>"
        theirs, mine = _startup_env(env), self.env
        if theirs != mine:
            differ = sorted(k for k in {*theirs, *mine} if theirs.get(k) != mine.get(k))
            return f"variables read at interpreter start differ: {', '.join(differ)}"
        import pyspark

        from kstorm._spark.speedups.daemon import foreign_zips, spark_zips

        zips = [z for z in spark_zips(env.get("PYTHONPATH", "").split(os.pathsep))
                if os.path.exists(z)]
        for entry in foreign_zips(zips, os.path.dirname(pyspark.__file__)):
            return f"another pyspark on the path ({entry})"
        return None

    def child(self, argv: list[str], env: dict[str, str], cwd: str, fds: list[int],
              conn) -> None:  # noqa: ANN001
        """In the forked child: become ``python -m argv...`` with the launcher's streams."""
        import signal

        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            self.sel.close()
            for sock in (self.listener, self.wake_r, self.wake_w, conn,
                         *self.children.values()):
                if sock is not None:
                    sock.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            fds.clear()
            os.environ.clear()
            os.environ.update(env)
            os.chdir(cwd)
            extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep)
                     if p]
            sys.path[:] = [os.getcwd(), *extra, *self.base_path]
            sys.argv[:] = [argv[0], *argv[1:]]
            _name_process(argv)
            import runpy

            runpy._run_module_as_main(argv[0], alter_argv=True)  # type: ignore[attr-defined]
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - as the interpreter would: print, exit 1
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            try:
                import atexit as _atexit

                _atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def reap(self) -> bool:
        """Collect the children that exited, telling their launchers; whether any had."""
        import struct

        reaped = False
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return reaped
            if pid == 0:
                return reaped
            reaped = True
            conn = self.children.pop(pid, None)
            if conn is not None:
                self.sel.unregister(conn)
                try:
                    conn.sendall(struct.pack("!i", status))
                except OSError:
                    pass
                conn.close()
        return reaped


def _name_process(argv: list[str]) -> None:
    """Name the child after what it runs (``top``, ``ps -o comm``): ``ks:worker``, ...

    Its command line stays the zygote's.
    """
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(process_name(argv))
    except OSError:
        pass


def process_name(argv: list[str]) -> str:
    """The name a child running ``python -m argv...`` gets (15 bytes at most).

    Example:
        >>> process_name(["kstorm._spark.speedups.daemon", "pyspark.worker"])
        'ks:worker'
        >>> process_name(["pyspark.sql.streaming.python_streaming_source_runner"])
        'ks:python_strea'
    """
    return ("ks:" + argv[-1].rsplit(".", 1)[-1])[:15]


def _startup_env(env: Mapping[str, str]) -> dict[str, str]:
    """What of ``env`` an interpreter reads as it starts (``PYTHONPATH`` aside: sys.path).

    The interpreter's own variables (``PYTHONHASHSEED``, ``PYTHONIOENCODING``, ...: no
    underscore after ``PYTHON``; Spark's ``PYTHON_WORKER_...`` are read at run time) and the
    locale.

    Example:
        >>> _startup_env({"PYTHONHASHSEED": "0", "PYTHON_UDF_BATCH_SIZE": "100", "LANG": "C"})
        {'PYTHONHASHSEED': '0', 'LANG': 'C'}
    """
    return {k: v for k, v in env.items()
            if (k.startswith("PYTHON") and not k.startswith("PYTHON_") and k != "PYTHONPATH")
            or k in ("LANG", "LC_ALL", "LC_CTYPE")}


def _peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of the Unix socket ``conn``."""
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _recv(conn, n: int) -> bytes | None:  # noqa: ANN001
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else IDLE_S,
          float(sys.argv[3]) if len(sys.argv) > 3 else FIRST_S)
