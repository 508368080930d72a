"""The Java that Spark will run on, checked before Spark starts.

Spark 4 runs on Java 17 or 21. Without a usable Java, PySpark's own error is
``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number``,
which names neither Java nor a fix. :func:`check_java` finds the ``java`` that Spark's
launch scripts will run (``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else ``java``
on ``PATH``: the rule of ``bin/spark-class``), asks it for its version, and raises
:class:`~kstorm.errors.JavaError` saying what is needed and what was found.

Example:
    >>> java = check_java()  # doctest: +SKIP
    >>> java.major, java.source  # doctest: +SKIP
    (17, 'PATH')
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kstorm.errors import JavaError

log = logging.getLogger("kstorm")

SUPPORTED = (17, 21)  # the Java versions Spark 4 is built and tested for
VERSION_TIMEOUT_S = 30.0  # `java -version` starts a JVM: seconds on a loaded machine
INSTALL_HINT = (
    "install OpenJDK 17 (`apt-get install -y openjdk-17-jre-headless`, "
    "`brew install openjdk@17`) or set JAVA_HOME to a Java 17 or 21"
)
# `openjdk version "17.0.15" 2025-04-15`, `java version "1.8.0_292"`, `openjdk version "21"`
_VERSION = re.compile(r'version "(?P<version>(?P<first>\d+)(?:\.(?P<second>\d+))?[^"]*)"')
_cache: dict[tuple[str, int, int], tuple[str, int]] = {}


@dataclass(frozen=True)
class JavaRuntime:
    """A ``java`` binary and what ``java -version`` says about it."""

    path: str
    version: str  # as printed, e.g. "17.0.15" or "1.8.0_292"
    major: int  # 8 for "1.8.0_292", 17 for "17.0.15"
    source: str  # "JAVA_HOME" or "PATH"

    @property
    def supported(self) -> bool:
        """Whether Spark is built and tested for this major version."""
        return self.major in SUPPORTED


def check_java(environ: Mapping[str, str] | None = None) -> JavaRuntime:
    """The Java Spark will start with; raises :class:`JavaError` if Spark cannot run on it.

    Java older than 17 (or none) is an error. A Java newer than 21 is logged as a warning
    and returned: Spark is not tested on it and may fail to start.

    Args:
        environ: the environment Spark will be launched with (default: ``os.environ``).
    """
    env = os.environ if environ is None else environ
    path, source = find_java(env)
    if path is None:
        raise _error(source)
    try:
        version, major = java_version(path)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        found = f"{path} (from {source}), which did not report a version: {exc}"
        raise _error(found) from exc
    java = JavaRuntime(path, version, major, source)
    if major < SUPPORTED[0]:
        found = f"Java {version} at {path} (from {source})"
        raise _error(found)
    if major > SUPPORTED[-1]:
        log.warning("Java %s at %s (from %s) is newer than the versions Spark 4 supports "
                    "(17, 21); if Spark fails to start, %s", version, path, source,
                    INSTALL_HINT)
    return java


def find_java(environ: Mapping[str, str]) -> tuple[str | None, str]:
    """``(path, where it came from)``, as Spark's launch script picks it.

    When nothing is found the path is None and the second item says what was looked at.
    """
    home = environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java), "JAVA_HOME"
        return None, f"no Java (JAVA_HOME={home} has no bin/java)"
    on_path = shutil.which("java", path=environ.get("PATH", os.defpath))
    if on_path:
        return on_path, "PATH"
    return None, "no Java (JAVA_HOME is not set and there is no `java` on PATH)"


def java_version(path: str) -> tuple[str, int]:
    """``(version as printed, major version)`` from ``<path> -version``; ValueError if unreadable.

    Cached per binary (path, size and modification time), so repeated checks in one process
    start one JVM.
    """
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    if key not in _cache:
        released = _release_version(Path(key[0]))
        if released is not None:  # a JDK's `release` file: no JVM to start (~1 s)
            _cache[key] = released
            return released
        done = subprocess.run([path, "-version"], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, check=False)
        output = done.stderr + done.stdout  # `java -version` prints to stderr
        match = _VERSION.search(output)
        if done.returncode != 0 or match is None:
            said = output.strip().splitlines()[0] if output.strip() else "(no output)"
            msg = f"`{path} -version` exited with {done.returncode}: {said}"
            raise ValueError(msg)
        leading, second = int(match["first"]), match["second"]
        major = int(second) if leading == 1 and second is not None else leading  # 1.8 -> 8
        _cache[key] = (str(match["version"]), major)
    return _cache[key]


def _release_version(java: Path) -> tuple[str, int] | None:
    """``JAVA_VERSION`` from the ``release`` file of the JDK/JRE ``java`` belongs to, if any."""
    try:
        text = (java.parent.parent / "release").read_text()
    except OSError:
        return None
    found = re.search(r'^JAVA_VERSION="(?P<version>(?P<first>\d+)(?:\.(?P<second>\d+))?[^"]*)"',
                      text, re.MULTILINE)
    if found is None:
        return None
    leading, second = int(found["first"]), found["second"]
    major = int(second) if leading == 1 and second is not None else leading
    return str(found["version"]), major


def _error(found: str) -> JavaError:
    from kstorm._spark.speedups.launch import log_path

    msg = f"Spark needs Java 17 or 21, found {found}; Spark's log: {log_path()}"
    return JavaError(msg, hint=INSTALL_HINT)
