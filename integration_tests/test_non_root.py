"""The README's first command (``kstorm demo``) for a user who is not root and has no home.

Run as root (CI), the test installs kstorm from a copy of this checkout into a virtual
environment of its own, readable by everyone, made from an interpreter outside root's home,
and runs ``kstorm demo`` there as ``nobody`` (``runuser``): no write access to the checkout,
to root's caches or to a home (``HOME=/nonexistent``), a ``TMPDIR`` of its own. Run by a
user who is not root, it runs the demo as that user in the same way. Either way the demo's
embedded broker, its Redis and local Spark start, and every window count must equal the
demo's ground truth.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
USER = "nobody"
EXACT = "every window count equals the ground truth"
COPIED = shutil.ignore_patterns(".git", ".ci", "__pycache__", "*.egg-info", "build", "dist",
                                ".ruff_cache", ".pytest_cache", ".mypy_cache", "site", "bench",
                                "docs", "integration_tests", "tests", "docker", "*.log")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory under /tmp that every user can read (its own, removed afterwards)."""
    path = Path(tempfile.mkdtemp(prefix="ksnr-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _runs_as(user: str, argv: list[str]) -> bool:
    return subprocess.run(["runuser", "-u", user, "--", *argv], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60, check=False).returncode == 0


def _interpreter_for(user: str) -> str:
    """This Python if ``user`` can run it, else a system one of the same minor version."""
    if _runs_as(user, [sys.executable, "-c", "pass"]):
        return sys.executable
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in ("/usr/bin", "/usr/local/bin"):
        candidate = Path(folder) / minor
        if candidate.is_file() and _runs_as(user, [str(candidate), "-c", "import venv"]):
            return str(candidate)
    pytest.fail(f"no {minor} that user {user!r} can run (tried {sys.executable}, /usr/bin, "
                f"/usr/local/bin): install Debian's {minor} and {minor}-venv")


def test_the_demo_is_exact_for_a_user_who_is_not_root(shared_dir: Path) -> None:
    work = shared_dir / "work"
    (work / "tmp").mkdir(parents=True)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8",
           "TMPDIR": str(work / "tmp"), "KSTORM_SPARK_LOG": str(work / "spark.log")}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.fail("runuser (util-linux) is needed to run the demo as another user")
        venv, src = shared_dir / "venv", shared_dir / "src"
        shutil.copytree(REPO, src, ignore=COPIED)
        subprocess.run([_interpreter_for(USER), "-m", "venv", str(venv)], check=True,
                       stdin=subprocess.DEVNULL)
        install = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
             "--disable-pip-version-check", str(src)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900, check=False)
        assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
        shutil.rmtree(src)  # the demo must not need the checkout
        for root, dirs, files in os.walk(shared_dir):
            for name in dirs + files:
                path = Path(root, name)
                if not path.is_symlink():
                    path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
        shutil.chown(work, USER)
        shutil.chown(work / "tmp", USER)
        env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
        argv = ["runuser", "-u", USER, "--", "env", "-i",
                *(f"{k}={v}" for k, v in env.items()), str(venv / "bin" / "kstorm"), "demo"]
    else:
        argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()),
                f"PYTHONPATH={REPO}", sys.executable, "-m", "kstorm.cli", "demo"]
    demo = subprocess.run(argv, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=900, check=False)
    out = demo.stdout + demo.stderr
    assert demo.returncode == 0, out[-4000:]
    assert EXACT in out, out[-4000:]
