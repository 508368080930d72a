"""The fast-start environment of Spark's processes (``kstorm/_spark/speedups/launch.py``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kstorm._spark.speedups import launch


def _fake_pyspark(root: Path) -> Path:
    pyspark = root / "site-packages" / "pyspark"
    (pyspark / "jars").mkdir(parents=True)
    (pyspark / "jars" / "spark-core.jar").write_bytes(b"jar")
    (pyspark / "bin").mkdir()
    (pyspark / "python" / "lib").mkdir(parents=True)
    (pyspark / "python" / "lib" / "pyspark.zip").write_bytes(b"zip")
    (pyspark / "__init__.py").write_text("")
    return pyspark


def test_compiled_home_mirrors_everything_but_the_zipped_python(tmp_path: Path) -> None:
    pyspark = _fake_pyspark(tmp_path)
    home = launch.compiled_spark_home(pyspark, tmp_path / "cache")
    assert home is not None
    assert (home / "jars" / "spark-core.jar").read_bytes() == b"jar"
    assert (home / "bin").resolve() == (pyspark / "bin").resolve()
    assert not (home / "python").exists()  # so no pyspark.zip lands on the Python path
    assert launch.compiled_spark_home(pyspark, tmp_path / "cache") == home  # reused


def test_a_spark_distribution_keeps_its_own_home(tmp_path: Path) -> None:
    assert launch.compiled_spark_home(tmp_path / "not-pyspark", tmp_path / "cache") is None


def _options(home: Path, cache: Path) -> str:
    return launch.class_archive_options(home, cache, record=True)


def test_an_ordinary_session_never_records(tmp_path: Path) -> None:
    # recording slows the recording JVM: only `kstorm warm-up` does it
    assert launch.class_archive_options(tmp_path / "home", tmp_path / "cache") == ""
    assert not list(tmp_path.glob("cache/*.partial"))


def test_first_start_records_then_later_starts_use_the_archive(tmp_path: Path) -> None:
    home, cache = tmp_path / "home", tmp_path / "cache"
    first = _options(home, cache)
    assert "-XX:ArchiveClassesAtExit=" in first
    partial = Path(first.split("ArchiveClassesAtExit=")[1].split()[0])
    assert partial.exists()
    # while that JVM runs (its dump is not written yet) nobody else records or uses one
    assert _options(home, cache) == ""
    # the JVM exits and dumps; once the dump has settled the next start claims it
    partial.write_bytes(b"\0" * 2_000_000)
    old = time.time() - 120
    os.utime(partial, (old, old))
    used = _options(home, cache)
    assert "-XX:SharedArchiveFile=" in used
    archive = Path(used.split("SharedArchiveFile=")[1].split()[0])
    assert archive.is_file() and not partial.exists()
    assert _options(home, cache) == used


def test_a_fresh_dump_is_not_claimed_while_it_may_still_be_written(tmp_path: Path) -> None:
    home, cache = tmp_path / "home", tmp_path / "cache"
    first = _options(home, cache)
    partial = Path(first.split("ArchiveClassesAtExit=")[1].split()[0])
    partial.write_bytes(b"\0" * 2_000_000)  # being written right now
    assert _options(home, cache) == ""


def test_an_abandoned_recording_is_retried(tmp_path: Path) -> None:
    home, cache = tmp_path / "home", tmp_path / "cache"
    first = _options(home, cache)
    partial = Path(first.split("ArchiveClassesAtExit=")[1].split()[0])
    old = time.time() - 7200  # its JVM was killed before dumping
    os.utime(partial, (old, old))
    assert "-XX:ArchiveClassesAtExit=" in _options(home, cache)
    assert not partial.exists()


def _archive(cache: Path, key: str, days_ago: float) -> Path:
    path = cache / f"spark-classes-{key}.jsa"
    path.write_bytes(b"old")
    then = time.time() - days_ago * 86400
    os.utime(path, (then, then))
    return path


def test_archives_nobody_uses_any_more_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = _archive(cache, "0" * 16, days_ago=8)  # another version, unused for 8 days
    _options(tmp_path / "home", cache)
    assert not stale.exists()


def test_another_install_s_archive_in_use_is_kept_when_one_records(tmp_path: Path) -> None:
    # two kstorm installs on one machine: recording one's archive keeps the other's
    cache = tmp_path / "cache"
    cache.mkdir()
    recent = [_archive(cache, f"{i:016d}", days_ago=i / 10) for i in range(1, 4)]
    _options(tmp_path / "home", cache)
    assert [p.exists() for p in recent] == [True, True, False]  # the two most recent


def test_using_an_archive_marks_it_used(tmp_path: Path) -> None:
    home, cache = tmp_path / "home", tmp_path / "cache"
    cache.mkdir()
    archive = launch._archive_path(home, cache)
    archive.write_bytes(b"\0" * 10)
    then = time.time() - 3 * 86400
    os.utime(archive, (then, then))
    assert "-XX:SharedArchiveFile=" in _options(home, cache)
    assert time.time() - archive.stat().st_mtime < 60


@pytest.mark.parametrize(("env", "expected"), [
    ({"KSTORM_CACHE_DIR": "/x/kc"}, Path("/x/kc")),
    ({"XDG_CACHE_HOME": "/x/xdg"}, Path("/x/xdg/kstorm")),
])
def test_cache_dir(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: Path
                   ) -> None:
    monkeypatch.delenv("KSTORM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert launch.cache_dir() == expected


def test_an_unusable_cache_directory_only_costs_the_speed_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kstorm._spark.session import launch_options
    from kstorm.config import TopologyConfig

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("KSTORM_CACHE_DIR", str(blocker))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    options = launch_options(TopologyConfig.from_conf({}))
    assert "SPARK_HOME" not in os.environ
    assert "SharedArchiveFile" not in options["spark.driver.extraJavaOptions"]
    assert launch.class_archive_state() == "absent"


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tempfile``'s directory is the test's own, and this process has no log yet."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("KSTORM_SPARK_LOG", raising=False)
    monkeypatch.setattr(launch, "_log", None)
    return tmp_path


def test_spark_s_log_goes_to_a_private_directory_of_the_user(own_tmp: Path) -> None:
    path = launch.log_path()
    assert path == own_tmp / f"kstorm-logs-{os.getuid()}" / f"spark-{os.getpid()}.log"
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert launch.log_path() == path  # one per process


def test_logs_of_drivers_that_are_gone_go_beyond_the_newest(own_tmp: Path) -> None:
    logs = own_tmp / f"kstorm-logs-{os.getuid()}"
    logs.mkdir(mode=0o700)
    no_such_pid = int(Path("/proc/sys/kernel/pid_max").read_text())  # pids stay below it
    now = time.time()
    names = [f"spark-{no_such_pid + i}.log" for i in range(launch.LOGS_KEPT + 5)]
    for age, name in enumerate(names):  # names[0] the newest
        (logs / name).write_text("x")
        os.utime(logs / name, (now - age, now - age))
    alive = logs / f"spark-{os.getpid()}.log"  # the oldest, but its process runs
    alive.write_text("x")
    os.utime(alive, (now - 10_000, now - 10_000))
    other = logs / "notes.txt"
    other.write_text("x")

    launch.log_path()

    left = {p.name for p in logs.iterdir()}
    assert left == {*names[:launch.LOGS_KEPT], alive.name, other.name}


def test_an_unusable_log_directory_falls_back_to_the_temporary_directory(
        own_tmp: Path) -> None:
    (own_tmp / f"kstorm-logs-{os.getuid()}").write_text("a file, not a directory")
    assert launch.log_path() == own_tmp / f"kstorm-spark-{os.getpid()}.log"


def test_kstorm_spark_log_names_the_file(own_tmp: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSTORM_SPARK_LOG", str(own_tmp / "mine.log"))
    assert launch.log_path() == own_tmp / "mine.log"
    assert not (own_tmp / f"kstorm-logs-{os.getuid()}").exists()
