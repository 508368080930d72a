"""Spark settings kstorm chooses for a session, and that the user's ``kstorm.spark.conf`` wins."""

from __future__ import annotations

import os

from kstorm._spark import session
from kstorm._spark.spark_options import spark_options, with_kstorm_jar
from kstorm._spark.speedups import hadoop_fs
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


def test_every_stage_s_python_workers_come_from_one_pool() -> None:
    """Spark's SQL runners add SPARK_SIMPLIFIED_TRACEBACK to their workers' environment when
    this is on; its transformWithState runner does not, which made a second worker daemon."""
    options = spark_options(TopologyConfig.from_conf({}))
    assert options["spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"] == "false"


def test_no_planner_is_stopped_while_another_query_may_be_planning() -> None:
    """A query of the session before its first batch may be planning: nothing is touched."""
    from types import SimpleNamespace

    from kstorm._spark.speedups.planners import LOOKUP_PLANNER, QUERY_PLANNERS, release_planners

    ours = SimpleNamespace(id="ours", lastProgress=None)
    planning = SimpleNamespace(id="other", lastProgress=None)
    spark = SimpleNamespace(streams=SimpleNamespace(active=[ours, planning]))  # no JVM here
    assert release_planners(spark, (LOOKUP_PLANNER, *QUERY_PLANNERS), ours) == []  # type: ignore[arg-type]


def test_no_planner_is_stopped_while_a_start_of_this_process_is_planning() -> None:
    """Between two of a query's Python data sources (a spout, the tick source) Spark's
    planner is idle and about to be taken again: stopping it then crashed the query."""
    from kstorm._spark.speedups import planners

    done = planners.planning()
    try:
        assert planners.starts_planning() == 1
        no_spark = object()  # nothing of the session is read while a start plans
        assert planners.release_planners(no_spark, planners.QUERY_PLANNERS) == []  # type: ignore[arg-type]
    finally:
        done()
    done()  # (again: nothing)
    assert planners.starts_planning() == 0


def test_the_query_s_planners_are_released_only_once_its_first_batch_finished(
        monkeypatch) -> None:
    import threading
    import time
    from types import SimpleNamespace

    from kstorm._spark import runner
    from kstorm._spark.speedups import planners

    events: list[str] = []
    released = threading.Event()

    def release(spark: object, modules: tuple[str, ...], query: object) -> list[str]:
        events.append("release")
        released.set()
        return list(modules)

    monkeypatch.setattr(planners, "release_planners", release)
    query = SimpleNamespace(isActive=True, lastProgress=None)
    runner._release_planners_when_planned("t", object(), query, True, poll_s=0.01,
                                          planned=lambda: events.append("planned"))
    time.sleep(0.3)
    assert events == []  # planning: its sources may still take a planner
    query.lastProgress = {"batchId": 0}
    assert released.wait(5)
    assert events[:2] == ["planned", "release"]


def test_python_processes_talk_to_the_jvm_over_unix_domain_sockets() -> None:
    key = "spark.python.unix.domain.socket.enabled"
    assert spark_options(TopologyConfig.from_conf({}))[key] == "true"
    cluster = {"kstorm.spark.master": "spark://127.0.0.1:7077"}
    assert key not in spark_options(TopologyConfig.from_conf(cluster))  # unproven there: TCP
    mine = {"kstorm.spark.conf": {key: "false"}}
    assert spark_options(TopologyConfig.from_conf(mine))[key] == "false"


def test_the_socket_directory_is_a_proven_one_or_the_sockets_are_off(monkeypatch) -> None:
    from pathlib import Path

    from kstorm._spark import session
    from kstorm._spark.speedups import jvm_tmp

    on = {"spark.python.unix.domain.socket.enabled": "true"}
    monkeypatch.setattr(jvm_tmp, "socket_dir", lambda: (Path("/tmp/k/1-a"), ""))
    assert session.unix_socket_options(on, {}) == {
        "spark.python.unix.domain.socket.dir": "/tmp/k/1-a"}
    mine = {"spark.python.unix.domain.socket.dir": "/mine"}
    assert session.unix_socket_options({**on, **mine}, mine) == {}  # the user's wins
    assert session.unix_socket_options({}, {}) == {}
    monkeypatch.setattr(jvm_tmp, "socket_dir", lambda: (None, "nothing fits"))
    assert session.unix_socket_options(on, {}) == {
        "spark.python.unix.domain.socket.enabled": "false"}


def test_a_planner_not_yet_idle_when_the_query_ends_is_tried_again(monkeypatch) -> None:
    """The query planned (here: already ended) while a planner's worker was still busy, and
    the JVM's map once changed under the reader: kstorm keeps trying for a few seconds."""
    import threading
    from types import SimpleNamespace

    from kstorm._spark import runner
    from kstorm._spark.speedups import planners
    from kstorm._spark.speedups.planners import LOOKUP_PLANNER, QUERY_PLANNERS

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

    monkeypatch.setattr(planners, "release_planners", release)
    monkeypatch.setattr(planners, "planner_activity", lambda spark: {})
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


class _Key:
    def __init__(self, module: str) -> None:
        self.module = module

    def workerModule(self) -> str:  # noqa: N802 - the JVM's name
        return self.module

    def pythonExec(self) -> str:  # noqa: N802
        return "python3"

    def daemonModule(self) -> str:  # noqa: N802
        return "pyspark.daemon"

    def envVars(self) -> dict:  # noqa: N802
        return {"SPARK_REUSE_WORKER": "1"}


def test_the_read_planner_is_started_once_the_first_planner_appears_unless_cancelled(
        monkeypatch) -> None:
    import threading
    import time

    from kstorm._spark.speedups import planners

    factories: list[str] = []
    created: list[list] = []

    class Worker:
        def _1(self) -> str:
            return "worker"

    walks: list[int] = []

    class Map:  # Spark's map of worker factories: the thread walks it when its size changed
        def size(self) -> int:
            return len(factories)

    def found(spark, modules, workers=None):
        walks.append(len(factories))
        return None, [(_Key(m), None) for m in factories if m in modules]

    monkeypatch.setattr(planners, "_python_workers", lambda spark: Map())
    monkeypatch.setattr(planners, "_planner_factories", found)
    monkeypatch.setattr(planners, "_worker_calls", lambda spark: (
        lambda *args: created.append(["create", *args]) or Worker(),
        lambda *args: created.append(["release", *args])))

    cancel = threading.Event()
    thread = planners.start_read_planner(object(), poll_s=0.005, cancel=cancel)
    assert thread is not None
    cancel.set()  # the query did not start: nothing is started, the thread ends
    thread.join(2)
    assert not thread.is_alive() and created == []

    thread = planners.start_read_planner(object(), poll_s=0.005)
    time.sleep(0.1)  # ~20 polls of the empty map
    factories.append(planners.CREATE_SOURCE)  # Spark created the query's data source
    thread.join(2)
    args = ["python3", planners.PLAN_READ, "pyspark.daemon", {"SPARK_REUSE_WORKER": "1"}]
    assert created == [["create", *args, True], ["release", *args, "worker"]]
    assert walks.count(0) <= 4  # the empty map: walked at each start and once per thread,
    #                             not at every poll

    factories.append(planners.PLAN_READ)  # a later query of the session: nothing to do
    assert planners.start_read_planner(object()) is None


def test_a_read_planner_not_started_ahead_is_an_info_line_not_a_failed_start(
        monkeypatch, caplog) -> None:
    """Spark's map of planners cannot be read (a Spark that renamed a field): the query
    starts as it would, and Spark starts its read planner itself."""
    from kstorm._spark.speedups import planners

    def unreadable(spark, modules, workers=None):
        raise RuntimeError("NoSuchFieldException: pythonWorkers")

    monkeypatch.setattr(planners, "_planner_factories", unreadable)
    with caplog.at_level("INFO", logger="kstorm"):
        assert planners.start_read_planner(object()) is None
    assert "read planner was not started ahead (RuntimeError: NoSuchFieldException" in \
        caplog.text


def _pyspark_like(signum, frame):  # what SparkContext installs: cancel jobs, raise
    raise KeyboardInterrupt


def test_an_application_s_sigint_handler_outlives_spark_s_start() -> None:
    import signal

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGINT, mine)
    try:
        with session._own_sigint_handler_kept() as context_made:
            signal.signal(signal.SIGINT, _pyspark_like)  # the SparkContext is made
            context_made()
            assert signal.getsignal(signal.SIGINT) is mine  # at once, not at the end
            signal.signal(signal.SIGINT, _pyspark_like)
        assert signal.getsignal(signal.SIGINT) is mine
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one that ignores Ctrl-C keeps that
        with session._own_sigint_handler_kept():
            signal.signal(signal.SIGINT, _pyspark_like)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_python_s_default_sigint_handler_gives_way_to_pyspark_s() -> None:
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with session._own_sigint_handler_kept():
            signal.signal(signal.SIGINT, _pyspark_like)
        assert signal.getsignal(signal.SIGINT) is _pyspark_like
    finally:
        signal.signal(signal.SIGINT, before)
