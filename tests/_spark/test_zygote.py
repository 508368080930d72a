"""The zygote Spark's Python processes are forked from (kstorm/_spark/speedups/zygote.py).

Real processes, no Spark: the launcher is run as Spark runs Python (``launcher -m module
args``) with a probe module, against a real zygote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kstorm._spark import session
from kstorm._spark.speedups import zygote
from kstorm.config import TopologyConfig

pytestmark = pytest.mark.skipif(not zygote.supported(), reason="the zygote needs Linux")

PROBE = '''
import json, os, sys, time
out = {"argv": sys.argv[1:], "cwd": os.getcwd(), "pid": os.getpid(), "ppid": os.getppid(),
       "x": os.environ.get("PROBE_X"), "stdin": sys.stdin.readline().strip(),
       "hash": hash("kstorm"), "path0": sys.path[1]}
print(json.dumps(out), flush=True)
if "--sleep" in sys.argv:
    time.sleep(float(sys.argv[-1]))
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
'''


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "zygote_probe.py").write_text(PROBE)
    return mod


@pytest.fixture(autouse=True)
def fresh_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test finds (or writes) its launcher anew: launcher() remembers per process."""
    monkeypatch.setattr(zygote, "_launchers", {})


@pytest.fixture
def running() -> subprocess.Popen[bytes]:
    zygote.stop()
    zygote.ensure_running(idle_s=30.0)
    assert zygote._proc is not None
    yield zygote._proc
    zygote.stop()


def _env(probe: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(probe), PROBE_X="x-value",
               PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", "0"), PYTHONUNBUFFERED="YES")
    env[zygote.ENV] = zygote.address()
    env.update(extra)
    return env


def _launch(probe: Path, tmp_path: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    launcher = zygote.launcher()
    assert launcher is not None
    return subprocess.Popen([launcher, "-m", "zygote_probe", *args], env=_env(probe, **extra),
                            cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def _result(proc: subprocess.Popen[str], stdin: str = "hello\n") -> dict:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin)
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def test_a_forked_child_runs_the_module_as_python_would(running, probe, tmp_path) -> None:
    proc = _launch(probe, tmp_path, "a1", "a2", PROBE_EXIT="3")
    out = _result(proc)
    assert proc.wait(timeout=30) == 3  # the child's exit status is the launcher's
    assert out["ppid"] == running.pid  # forked from the zygote, not a new interpreter
    assert out["argv"] == ["a1", "a2"]
    assert out["cwd"] == str(tmp_path)
    assert out["x"] == "x-value"
    assert out["stdin"] == "hello"  # the launcher's standard streams are the child's
    assert out["path0"] == str(probe)  # PYTHONPATH first, as for python -m
    fresh = subprocess.run([sys.executable, "-c", "print(hash('kstorm'))"], env=_env(probe),
                           capture_output=True, text=True, check=True)
    assert out["hash"] == int(fresh.stdout)  # the same hash seed as a new interpreter


def test_a_signal_to_the_launcher_reaches_the_child(running, probe, tmp_path) -> None:
    proc = _launch(probe, tmp_path, "--sleep", "60")
    child = _result(proc)["pid"]
    proc.send_signal(signal.SIGTERM)  # as Spark stops its Python processes
    assert proc.wait(timeout=30) == -signal.SIGTERM
    _gone(child)


def test_a_killed_launcher_takes_its_child_down(running, probe, tmp_path) -> None:
    proc = _launch(probe, tmp_path, "--sleep", "60")
    child = _result(proc)["pid"]
    proc.kill()
    proc.wait(timeout=30)
    _gone(child)


@pytest.mark.parametrize("extra", [{"PYTHONHASHSEED": "7"}, {"PYTHONIOENCODING": "latin-1"}])
def test_what_a_fork_cannot_reproduce_runs_in_a_new_interpreter(running, probe, tmp_path,
                                                                 extra) -> None:
    proc = _launch(probe, tmp_path, "b", **extra)
    out = _result(proc)
    assert proc.wait(timeout=30) == 0
    assert out["pid"] == proc.pid  # the launcher became the interpreter (exec)
    assert out["argv"] == ["b"] and out["stdin"] == "hello"


def test_without_a_zygote_the_launcher_runs_python(probe, tmp_path) -> None:
    zygote.stop()
    proc = _launch(probe, tmp_path, "c", PROBE_EXIT="4")
    out = _result(proc)
    assert proc.wait(timeout=30) == 4
    assert out["pid"] == proc.pid and out["argv"] == ["c"]


def test_the_launcher_runs_python_as_invoked_not_its_symlink_target(tmp_path,
                                                                   monkeypatch) -> None:
    venv = tmp_path / "venv"  # its bin/python is a symlink to this interpreter
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    assert python.is_symlink()
    monkeypatch.setattr(zygote.sys, "executable", str(python))
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(tmp_path / "cache"))
    launcher = zygote.launcher()
    assert launcher is not None
    (tmp_path / "prefix_probe.py").write_text("import sys\nprint(sys.prefix)\n")
    env = {k: v for k, v in os.environ.items() if k != zygote.ENV}  # no zygote: it runs Python
    out = subprocess.run([launcher, "-m", "prefix_probe"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(venv)  # the environment's packages, not the base interpreter's
    assert session.same_interpreter(str(python), str(venv / "bin" / "python3"))
    assert not session.same_interpreter(str(python), os.path.realpath(python))


def test_the_zygote_lives_while_its_children_do_then_exits_when_idle(probe, tmp_path) -> None:
    zygote.stop()
    zygote.ensure_running(idle_s=0.5, first_s=0.5)
    proc = _launch(probe, tmp_path, "--sleep", "2")
    out = _result(proc)
    assert out["ppid"] == zygote._proc.pid
    time.sleep(1.0)
    assert zygote._proc.poll() is None  # idle, but the parent of a running child
    assert proc.wait(timeout=30) == 0
    zygote._proc.wait(timeout=30)  # its last child reaped, idle: gone
    zygote.stop()


def test_a_child_outlives_a_stopped_zygote(probe, tmp_path) -> None:
    zygote.stop()
    zygote.ensure_running(idle_s=30.0)
    proc = _launch(probe, tmp_path, "--sleep", "2")
    out = _result(proc)
    zygote.stop()  # the driver lets go while the child runs
    assert proc.poll() is None  # the launcher waits for the child, not for the zygote
    assert proc.wait(timeout=30) == 0
    _gone(out["pid"])


def test_the_zygote_stops_when_the_driver_lets_go(running) -> None:
    zygote.stop()
    assert running.poll() is not None
    _refused(zygote.address())  # its address went with it


def test_a_killed_driver_leaves_nothing_behind(tmp_path) -> None:
    cache = tmp_path / "cache"
    driver = subprocess.Popen(  # a driver that starts its zygote, then is SIGKILLed
        [sys.executable, "-c", "import time\n"
         "from kstorm._spark.speedups import zygote\n"
         "print(zygote.launcher(), zygote.address(), flush=True)\n"
         "zygote.ensure_running()\n"
         "print(zygote._proc.pid, flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, KSTORM_CACHE_DIR=str(cache)))
    assert driver.stdout is not None
    launcher, address = driver.stdout.readline().split()
    pid = int(driver.stdout.readline())
    driver.kill()
    driver.wait(timeout=30)
    _gone(pid)  # the zygote saw its driver go
    _refused(address)  # the kernel removed its address
    # the one file left is the launcher, shared by every driver of this interpreter
    assert sorted(p.name for p in (cache / "zygote").iterdir()) == [Path(launcher).name]


def test_drivers_share_one_launcher(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(tmp_path / "cache"))
    first = zygote.launcher()
    assert first is not None and first == zygote.launcher()
    assert os.stat(first).st_mode & 0o777 == 0o700
    other = subprocess.run([sys.executable, "-c", "from kstorm._spark.speedups import zygote\n"
                            "print(zygote.launcher(), zygote.address())"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert other[0] == first and other[1] != zygote.address()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a second user: run as root")
def test_another_user_gets_no_fork(running) -> None:
    import socket

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # as "nobody", send a launcher's request
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(30)
                sock.connect("\0" + zygote.address()[1:])
                fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
                sock.sendmsg([b"\0\0\0\1", b"N"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                try:
                    answer = sock.recv(4)
                except ConnectionResetError:  # closed with the request unread
                    answer = b""
                os.write(write, repr(answer).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - for the test's message
            os.write(write, repr(exc).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as answer:
        got = answer.read()
    assert os.waitpid(pid, 0)[1] == 0, got
    assert got == "b''"  # closed without a pid: nothing was forked
    assert running.poll() is None


def test_only_local_sessions_of_this_interpreter_fork(monkeypatch) -> None:
    local = TopologyConfig.from_conf({"kstorm.spark.master": "local[2]"})
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert session.zygote_wanted(local)
    assert not session.zygote_wanted(TopologyConfig.from_conf(
        {"kstorm.spark.master": "local[2]", "kstorm.spark.python.zygote": False}))
    assert not session.zygote_wanted(TopologyConfig.from_conf(
        {"kstorm.spark.master": "spark://127.0.0.1:7077"}))
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/true")
    assert not session.zygote_wanted(local)  # another interpreter: Spark starts it


def test_no_launcher_where_the_cache_directory_is_mounted_noexec(monkeypatch) -> None:
    real = os.statvfs

    class NoExec:
        def __init__(self, path: str) -> None:
            self.f_flag = real(path).f_flag | os.ST_NOEXEC

    monkeypatch.setattr(zygote.os, "statvfs", NoExec)
    assert zygote.launcher() is None  # Spark starts Python as usual
    assert not session.zygote_wanted(
        TopologyConfig.from_conf({"kstorm.spark.master": "local[2]"}))


def test_a_launcher_is_written_once_and_its_failure_logged_once(tmp_path, monkeypatch,
                                                                 caplog) -> None:
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(tmp_path / "cache"))
    first = zygote.launcher()
    assert first is not None
    os.unlink(first)  # someone cleared the cache: written again, not a dangling path
    assert zygote.launcher() == first and os.path.exists(first)

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory should be")
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(blocked))
    with caplog.at_level("INFO", logger="kstorm"):
        assert zygote.launcher() is None
        assert zygote.launcher() is None
    assert sum("cannot write its Python launcher" in r.message for r in caplog.records) == 1


def test_launchers_of_interpreters_that_are_gone_are_removed(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "zygote"
    folder.mkdir(parents=True)
    gone = folder / "python-0000000000000000"
    gone.write_text(f"#!{tmp_path / 'deleted-venv' / 'bin' / 'python'} -IS\n")
    kept = folder / "python-1111111111111111"
    kept.write_text(f"#!{sys.executable} -IS\n")  # another driver's interpreter, still here
    launcher = zygote.launcher()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [Path(launcher).name, kept.name])


def _refused(address: str) -> None:
    import socket

    with socket.socket(socket.AF_UNIX) as sock, pytest.raises(ConnectionRefusedError):
        sock.connect("\0" + address[1:])


def _gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # a zombie child of this test's zygote counts as gone
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs")
