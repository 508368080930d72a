"""Spark settings kstorm chooses for a session, and that the user's ``kstorm.spark.conf`` wins."""

from __future__ import annotations

import os

from kstorm._spark import hadoop_fs
from kstorm._spark.session import spark_options, with_kstorm_jar
from kstorm.config import TopologyConfig

RAW = "org.apache.hadoop.fs.local.RawLocalFs"
KEY = "spark.hadoop.fs.AbstractFileSystem.file.impl"


def test_local_checkpoints_are_written_without_crc_side_files() -> None:
    options = spark_options(TopologyConfig.from_conf({}))
    assert options[KEY] == hadoop_fs.FS_CLASS  # a raw local file system (hadoop_fs.py)
    # Hadoop's FileSystem.getLocal must stay a (checksummed) LocalFileSystem
    assert "spark.hadoop.fs.file.impl" not in options


def test_a_cluster_keeps_hadoops_raw_local_fs_its_executors_have() -> None:
    """Executors of a cluster do not have kstorm's jar on their class path."""
    conf = {"kstorm.spark.master": "spark://127.0.0.1:7077"}
    assert spark_options(TopologyConfig.from_conf(conf))[KEY] == RAW


def test_kstorms_jar_goes_last_on_the_drivers_class_path_once() -> None:
    jar = str(hadoop_fs.JAR)
    assert with_kstorm_jar(None) == jar
    assert with_kstorm_jar("") == jar
    mine = os.pathsep.join(["/opt/a.jar", jar, "/opt/b.jar"])
    assert with_kstorm_jar(mine) == os.pathsep.join(["/opt/a.jar", "/opt/b.jar", jar])


def test_the_users_spark_conf_wins_over_kstorms_choice() -> None:
    chosen = "org.apache.hadoop.fs.local.LocalFs"
    options = spark_options(TopologyConfig.from_conf({"kstorm.spark.conf": {KEY: chosen}}))
    assert options[KEY] == chosen


def test_no_planner_is_stopped_while_another_query_may_be_planning() -> None:
    """A query of the session before its first batch may be planning: nothing is touched."""
    from types import SimpleNamespace

    from kstorm._spark.session import LOOKUP_PLANNER, QUERY_PLANNERS, release_planners

    ours = SimpleNamespace(id="ours", lastProgress=None)
    planning = SimpleNamespace(id="other", lastProgress=None)
    spark = SimpleNamespace(streams=SimpleNamespace(active=[ours, planning]))  # no JVM here
    assert release_planners(spark, (LOOKUP_PLANNER, *QUERY_PLANNERS), ours) == []  # type: ignore[arg-type]


def test_python_processes_talk_to_the_jvm_over_unix_domain_sockets() -> None:
    key = "spark.python.unix.domain.socket.enabled"
    assert spark_options(TopologyConfig.from_conf({}))[key] == "true"
    cluster = {"kstorm.spark.master": "spark://127.0.0.1:7077"}
    assert spark_options(TopologyConfig.from_conf(cluster))[key] == "true"  # executor-local
    mine = {"kstorm.spark.conf": {key: "false"}}
    assert spark_options(TopologyConfig.from_conf(mine))[key] == "false"


def test_a_planner_not_yet_idle_when_the_query_ends_is_tried_again(monkeypatch) -> None:
    """The query planned (here: already ended) while a planner's worker was still busy, and
    the JVM's map once changed under the reader: kstorm keeps trying for a few seconds."""
    import threading
    from types import SimpleNamespace

    from kstorm._spark import runner, session
    from kstorm._spark.session import LOOKUP_PLANNER, QUERY_PLANNERS

    calls: list[tuple[str, ...]] = []
    finished = threading.Event()

    def release(spark: object, modules: tuple[str, ...], query: object) -> list[str]:
        calls.append(modules)
        if len(calls) == 1:
            raise RuntimeError("ConcurrentModificationException")
        if len(calls) < 4:
            return []  # still busy
        finished.set()
        return list(modules)

    monkeypatch.setattr(session, "release_planners", release)
    monkeypatch.setattr(session, "planner_activity", lambda spark: {})
    query = SimpleNamespace(isActive=False, lastProgress=None)
    runner._release_planners_when_planned("t", object(), query, True, poll_s=0.01,
                                          settle_s=2.0)
    assert finished.wait(5)
    assert calls[-1] == (LOOKUP_PLANNER, *QUERY_PLANNERS)


def test_the_driver_jvm_compiles_with_c1_only_unless_the_user_says_otherwise() -> None:
    """C2 compiling Spark's code took over half the JVM's CPU of a short run (session.py)."""
    key = "spark.driver.extraJavaOptions"
    options = spark_options(TopologyConfig.from_conf({}))[key].split()
    assert "-XX:TieredStopAtLevel=1" in options and "-XX:+UseSerialGC" in options
    mine = {"kstorm.spark.conf": {key: "-XX:+UseSerialGC"}}
    assert spark_options(TopologyConfig.from_conf(mine))[key] == "-XX:+UseSerialGC"
