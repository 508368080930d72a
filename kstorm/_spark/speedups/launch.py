"""How Spark's processes start: two start-up costs kstorm removes before the first batch.

1. **Spark's own Python processes compile pyspark from source.** Spark puts
   ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
   starts: the planner processes of Python data sources (one per lookup, per data source
   created and per read planned), the streaming source runner and the worker daemons. Python
   cannot cache bytecode for a zip, so each one compiles pyspark again (0.5-0.7 s of CPU). For
   a pip-installed pyspark, :func:`compiled_spark_home` mirrors the installation without
   ``python/lib`` (symlinks), and the JVM starts with that mirror as ``SPARK_HOME``: the same
   jars and scripts, but its Python processes import the installed, byte-compiled pyspark.
   One rule decides, wherever Spark's zips meet kstorm (``daemon.foreign_zips``): a zip
   inside the installed pyspark gives way to the compiled package -- here by a home without
   it, in the worker daemon (``daemon.py``, for a ``SPARK_HOME`` of the user's) by moving
   it last on the path -- and any other zip is another Spark's, kept (the zygote, too,
   then leaves the process to a new interpreter).
2. **The JVM loads ~20,000 classes from jars.** With class data sharing (JDK AppCDS),
   ``kstorm warm-up`` records the classes a session loaded into an archive when its JVM
   exits (``-XX:ArchiveClassesAtExit``); later sessions map that archive instead of parsing
   and verifying the classes again (``-XX:SharedArchiveFile``). The archive is keyed by the JVM,
   pyspark, Spark home and kstorm's jar (``hadoop_fs.py``), so an upgrade starts a new one; a
   JVM that cannot use it (mismatch, truncated file) ignores it and starts as usual. Turn it
   off with ``kstorm.spark.class.cache: false``.

Both live in the cache directory (``$KSTORM_CACHE_DIR``, else ``$XDG_CACHE_HOME/kstorm``,
else ``~/.cache/kstorm``).

Example:
    >>> home = compiled_spark_home(Path("/nonexistent/pyspark"), Path("/tmp"))
    >>> home is None   # not a pip-installed pyspark: Spark's own home is kept
    True
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from kstorm._spark.speedups import hadoop_fs
from kstorm._spark.speedups.jvm_tmp import pid_alive, private_dir

log = logging.getLogger("kstorm")

_ARCHIVE_PREFIX = "spark-classes-"


def cache_dir() -> Path:
    """The cache directory of kstorm (created on demand by the functions that write to it)."""
    explicit = os.environ.get("KSTORM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kstorm"


def compiled_spark_home(pyspark_dir: Path, cache: Path) -> Path | None:
    """A Spark home like ``pyspark_dir`` whose Python processes import the installed pyspark.

    Returns None (keep Spark's own home) unless ``pyspark_dir`` is a pip-installed pyspark
    (it holds ``jars`` and ``python/lib/pyspark.zip``, a copy of the installed package).
    """
    if not (pyspark_dir / "jars").is_dir() or not (pyspark_dir / "python/lib/pyspark.zip"
                                                    ).is_file():
        return None
    tag = hashlib.sha256(str(pyspark_dir.resolve()).encode()).hexdigest()[:12]
    home = cache / f"spark-home-{tag}"
    if (home / "jars").exists():
        return home
    staging = Path(tempfile.mkdtemp(prefix="spark-home-", dir=_made(cache)))
    for entry in pyspark_dir.iterdir():
        if entry.name not in ("python", "__pycache__"):
            (staging / entry.name).symlink_to(entry.resolve())
    try:
        staging.rename(home)
    except OSError:  # another process made it first: theirs is as good
        _remove_tree(staging)
    return home


def class_archive_options(spark_home: Path, cache: Path, *, record: bool = False) -> str:
    """JVM options that use the class-data-sharing archive, or with ``record`` make one.

    Recording slows the recording JVM itself (measured: SparkSession +3-5 s, first job
    +1.5-2.5 s under load 5), so only ``kstorm warm-up`` records; other sessions use the
    archive when there is one and otherwise start as usual.
    """
    archive = _archive_path(spark_home, cache)
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"
    if archive.is_file() or _claim_finished(cache, archive):
        _mark_used(archive)
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto {quiet}"
    if not record or _recording_elsewhere(cache, archive):
        return ""
    _prune_archives(cache, keep=archive)
    # Dumped when this JVM exits, under a temporary name; the next start claims it.
    fd, partial = tempfile.mkstemp(prefix=f"{archive.stem}.", suffix=".partial",
                                   dir=_made(cache))
    os.close(fd)
    return f"-XX:ArchiveClassesAtExit={partial} {quiet}"


def class_cache_proof(spark_home: Path, cache: Path) -> str | None:
    """Why the class cache cannot be used here, or None.

    A ready archive is used where it is (a read-only image's, too); without one, ``cache``
    must be a directory this process can write, or there is nothing to record or claim.
    """
    if _archive_path(spark_home, cache).is_file():
        return None
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=_made(cache))
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"its directory {cache} cannot be written ({exc.strerror or exc})"
    return None


def class_archive_state(cache: Path | None = None) -> str:
    """``"ready"``, ``"recording"`` (a running or exiting JVM will write it) or ``"absent"``.

    Looks at the archive of the Spark home this process's sessions use.
    """
    cache = cache or cache_dir()
    try:
        archive = _this_process_archive(cache)
        if archive is None:
            return "absent"
        if archive.is_file():
            return "ready"
        if any(cache.glob(f"{archive.stem}.*.partial")):
            return "recording"
    except OSError:  # e.g. no writable cache directory: sessions start without the cache
        pass
    return "absent"


def claim_recorded_archive(cache: Path | None = None) -> bool:
    """After this process's JVM has exited: name its dump the archive at once."""
    cache = cache or cache_dir()
    try:
        archive = _this_process_archive(cache)
        return archive is not None and (
            archive.is_file() or _claim_finished(cache, archive, min_age=0.0))
    except OSError:
        return False


def _this_process_archive(cache: Path) -> Path | None:
    """The archive path for the Spark home this process's sessions use (None: no home)."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or compiled_spark_home(
        Path(pyspark.__file__).parent, cache)
    return _archive_path(Path(home), cache) if home is not None else None


def _archive_path(spark_home: Path, cache: Path) -> Path:
    return cache / f"{_ARCHIVE_PREFIX}{_archive_key(spark_home)}.jsa"


def _claim_finished(cache: Path, archive: Path, min_age: float = 30.0) -> bool:
    """Give a finished dump of an earlier run the archive's name; whether there was one.

    A JVM writes the archive's header last, so a dump cut short is rejected by the JVM that
    maps it (and that JVM starts without the archive).
    """
    now = time.time()
    for partial in sorted(cache.glob(f"{archive.stem}.*.partial")):
        st = partial.stat()
        if st.st_size > 1_000_000 and now - st.st_mtime >= min_age:
            partial.rename(archive)
            return True
    return False


def _recording_elsewhere(cache: Path, archive: Path) -> bool:
    """Whether a running JVM will dump the archive at its exit (one recording at a time)."""
    now = time.time()
    recording = False
    for partial in cache.glob(f"{archive.stem}.*.partial"):
        if now - partial.stat().st_mtime < 3600:
            recording = True
        else:  # its JVM was killed before it could dump
            partial.unlink(missing_ok=True)
    return recording


def _archive_key(spark_home: Path) -> str:
    import pyspark

    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")
                        ) if os.environ.get("JAVA_HOME") else shutil.which("java")
    binary = Path(java).resolve() if java else None
    stamp = (binary.stat().st_mtime_ns, binary.stat().st_size) if binary else ()
    # kstorm's own jar is on the class path (session.py): a new jar needs a new archive
    jar = hadoop_fs.JAR
    jar_stamp = (jar.stat().st_mtime_ns, jar.stat().st_size) if jar.is_file() else ()
    material = "\n".join(map(str, [binary, stamp, pyspark.__version__, spark_home, jar,
                                    jar_stamp]))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


_ARCHIVES_KEPT = 2            # other archives kept besides the one being recorded...
_ARCHIVE_IDLE_S = 7 * 86400   # ...while used within this long (~160 MB each)


def _mark_used(archive: Path) -> None:
    """Note that a session used ``archive`` (its mtime; pruning keeps the ones in use)."""
    try:
        os.utime(archive)
    except OSError:  # e.g. an archive baked into a read-only image: kept as it is
        pass


def _prune_archives(cache: Path, keep: Path) -> None:
    """Remove archives nobody uses any more (other JVM / pyspark / kstorm versions).

    Besides ``keep`` (being recorded), the :data:`_ARCHIVES_KEPT` most recently used
    archives stay while used within :data:`_ARCHIVE_IDLE_S`: two kstorm installs on one
    machine (two virtualenvs, a second checkout) each keep theirs instead of removing the
    other's whenever one of them records.
    """
    if not cache.is_dir():
        return
    others = []
    for path in cache.glob(f"{_ARCHIVE_PREFIX}*.jsa"):
        try:
            if path != keep:
                others.append((path.stat().st_mtime, path))
        except OSError:
            continue
    others.sort(reverse=True)
    now = time.time()
    for rank, (used, path) in enumerate(others):
        if rank >= _ARCHIVES_KEPT or now - used > _ARCHIVE_IDLE_S:
            path.unlink(missing_ok=True)


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _remove_tree(path: Path) -> None:
    for entry in path.iterdir():
        entry.unlink()
    path.rmdir()


LOGS_KEPT = 20  # the newest logs of drivers that are gone stay (a killed run's is wanted)
_log: tuple[int, Path] | None = None  # (pid, log) of this process


def log_path() -> Path:
    """Where the JVM's (and its Python workers') console output goes.

    ``$KSTORM_SPARK_LOG``, else ``spark-<pid>.log`` in this user's private
    ``<tmp>/kstorm-logs-<uid>``, where the first call of a process removes the logs of
    drivers that are gone beyond the :data:`LOGS_KEPT` newest (each run used to leave one in
    ``/tmp`` for good). Where that directory is not usable: ``<tmp>/kstorm-spark-<pid>.log``.
    """
    global _log
    if os.environ.get("KSTORM_SPARK_LOG"):
        return Path(os.environ["KSTORM_SPARK_LOG"])
    if _log is not None and _log[0] == os.getpid():
        return _log[1]
    tmp = Path(tempfile.gettempdir())
    try:
        logs = private_dir(tmp / f"kstorm-logs-{os.getuid()}")
        prune_logs(logs, LOGS_KEPT)
        path = logs / f"spark-{os.getpid()}.log"
    except OSError as exc:
        path = tmp / f"kstorm-spark-{os.getpid()}.log"
        log.info("Spark's log goes to %s (%s)", path, exc)
    _log = (os.getpid(), path)
    return path


def prune_logs(logs: Path, keep: int) -> list[Path]:
    """Remove the ``spark-<pid>.log`` files in ``logs`` beyond the ``keep`` newest.

    A log whose process is alive stays (whatever its age); returns the removed ones.
    """
    found = []
    for entry in logs.glob("spark-*.log"):
        try:
            found.append((entry.stat().st_mtime, entry))
        except OSError:
            continue
    found.sort(reverse=True)
    removed = []
    for _, entry in found[keep:]:
        pid = entry.stem.removeprefix("spark-")
        if pid.isdigit() and pid_alive(int(pid)):
            continue
        entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def spark_submit_command(target: str, archive: Path, submit_args: Iterable[str],
                         run_args: Iterable[str]) -> list[str]:
    """The ``spark-submit`` command that runs ``target`` with the project ``archive``."""
    import pyspark

    home = Path(pyspark.__file__).parent
    main = Path(__file__).resolve().parents[2] / "_submit_main.py"
    return [str(home / "bin" / "spark-submit"), "--py-files", str(archive), *submit_args,
            str(main), target, *run_args]
