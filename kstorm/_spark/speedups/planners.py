"""The ``planners`` speed-up: Spark's Python data-source planners released, and pre-started.

Spark plans a query's Python data sources (kstorm's spouts) in helper processes, one daemon
and one worker per planner module, and keeps them idle for the life of the JVM. Here, all
through Spark's private members (``SparkEnv.pythonWorkers`` and
``PythonWorkerFactory.daemonWorkers`` read by reflection, ``setAccessible``;
``SparkEnv``'s worker-factory methods through method handles; the test hook
``DataSourceManager.dataSourceBuilders_$eq``):

* :func:`release_planners` stops the idle ones once the query is done with them, and never
  while a start of this process is planning (:func:`planning`);
* :func:`start_read_planner` starts the read planner alongside the first, off the path to
  the first result;
* :func:`skip_installed_data_source_lookup` spares a session kstorm started Spark's lookup
  of pip-installed data sources (:func:`lookup_skipped`).

Each is guarded by its caller or by itself (``kstorm/_spark/runner.py``, ``session.py``):
an error there is an INFO or DEBUG line and Spark plans as it would, never a failed batch.
``KSTORM_SPEEDUPS_OFF=planners`` turns the release and the start ahead off.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from kstorm._spark import speedups

log = logging.getLogger("kstorm")

# Spark's Python data-source planners: each a daemon and a forked worker, used while a query
# is planned and then kept idle for the life of the JVM. The lookup runs once per JVM.
LOOKUP_PLANNER = "pyspark.sql.worker.lookup_data_sources"
CREATE_SOURCE = "pyspark.sql.worker.create_data_source"  # when the query is compiled
PLAN_READ = "pyspark.sql.worker.plan_data_source_read"  # at the query's first batch
QUERY_PLANNERS = (CREATE_SOURCE, PLAN_READ)
_LAST_ACTIVITY = "org$apache$spark$api$python$PythonWorkerFactory$$lastActivityNs"


# The starts of this process whose query has not planned yet (:func:`planning`). Taken also
# while planners are stopped, so that no start plans with a planner being stopped.
_starts_lock = threading.Lock()
_starting: set[int] = set()
_tokens = itertools.count()


def planning() -> Callable[[], None]:
    """Hold back :func:`release_planners` while a start of this process plans its query.

    A query's Python data sources (every spout, the tick source) are planned one after the
    other, each by a planner worker taken from Spark's idle pool and given back: between two
    sources the planner is idle, and stopping it then kills the worker the next source is
    about to take ("Python worker exited unexpectedly"). Spark gives no atomic way to take
    an idle planner out of use, so no planner is stopped while any start is registered here.

    Returns the call that ends the registration (once the query has planned: its first
    batch finished or the query ended; or the start failed). Calling it again does nothing.
    """
    with _starts_lock:
        token = next(_tokens)
        _starting.add(token)

    def done() -> None:
        with _starts_lock:
            _starting.discard(token)

    return done


def starts_planning() -> int:
    """How many starts of this process are planning their query (:func:`planning`)."""
    with _starts_lock:
        return len(_starting)


def release_planners(spark: SparkSession, modules: tuple[str, ...], query: Any = None
                     ) -> list[str]:
    """Stop Spark's idle Python data-source planner processes of ``modules``; returns those.

    Spark plans a query's Python data sources (kstorm's spouts) in helper processes, one
    daemon and one worker per planner module, and keeps them for the life of the JVM
    (~200-350 MiB of resident memory together). The lookup planner runs once per JVM; the
    others again when a query starts, and Spark starts them anew if they are gone (~1 s).
    Only a planner that exists with all its workers idle is stopped, and none while a start
    of this process is planning (:func:`planning`) or another query of this session than
    ``query`` has not finished its first batch (it may be planning).
    """
    own = None if query is None else query.id
    with _starts_lock:  # (a start now waits until these are stopped, then plans anew)
        if _starting:
            return []
        if any(q.id != own and q.lastProgress is None for q in spark.streams.active):
            return []
        factories, found = _planner_factories(spark, modules)
        workers = _daemon_workers(spark)
        stopped = []
        for key, factory in found:
            idle = factory.idleWorkers().size()
            if idle == 0 or workers.get(factory).size() > idle:
                continue  # in use, or not yet
            factories.remove(key)  # a planner started from now on gets a new factory
            factory.stop()
            stopped.append(key.workerModule())
        return stopped


def start_read_planner(spark: SparkSession, wait_s: float = 60.0, poll_s: float = 0.02,
                       cancel: threading.Event | None = None) -> threading.Thread | None:
    """Start Spark's read planner in the background while the query starts; None: not needed.

    A new query's Python data sources go through Spark's planner processes one after the
    other: ``create_data_source`` when the query analyses its plan, the streaming source
    runner, then ``plan_data_source_read`` when its first batch is planned, each a new
    Python process (~0.5 s on 2 cores, on the path to the first result). The read planner's
    worker is keyed by the same interpreter and environment as the first: as soon as that
    one appears (within ``wait_s``), the read planner's is started alongside and handed to
    Spark's idle pool, where Spark takes it for the first batch. Nothing is started when
    the session already has a read planner (a later query of the process), nor once
    ``cancel`` is set (the query did not start), nor where Spark's map of planners cannot
    be read (said at INFO: Spark starts the read planner itself).
    """
    cancel = cancel or threading.Event()
    if not speedups.enabled("planners"):
        return None
    try:
        if _planner_factories(spark, (PLAN_READ,))[1]:
            return None
    except Exception as exc:  # noqa: BLE001 - start-up time only: Spark starts it later
        log.info("Spark's read planner was not started ahead (%s: %s)",
                 type(exc).__name__, exc)
        return None

    def start() -> None:
        deadline = time.monotonic() + wait_s
        try:
            create, release = _worker_calls(spark)
            factories, seen = _python_workers(spark), -1
            while time.monotonic() < deadline and not cancel.is_set():
                size = factories.size()  # (one round trip; the entries only when it changed)
                if size != seen:
                    seen = size
                    found = {key.workerModule(): key for key, _ in _planner_factories(
                        spark, (CREATE_SOURCE, PLAN_READ), factories)[1]}
                    if PLAN_READ in found:
                        return  # Spark got there first
                    if CREATE_SOURCE in found:
                        key = found[CREATE_SOURCE]
                        args = [key.pythonExec(), PLAN_READ, key.daemonModule(),
                                key.envVars()]
                        worker = create(*args, True)._1()
                        release(*args, worker)
                        return
                cancel.wait(poll_s)
        except Exception as exc:  # noqa: BLE001 - start-up time only: Spark starts it later
            log.info("Spark's read planner was not started ahead (%s: %s)",
                     type(exc).__name__, exc)

    thread = threading.Thread(target=start, name="kstorm-read-planner", daemon=True)
    thread.start()
    return thread


def _worker_calls(spark: SparkSession) -> tuple[Any, Any]:
    """``SparkEnv.createPythonWorker`` and ``releasePythonWorker``, callable from Python.

    Through method handles: py4j finds a method by listing all of its class's methods, and
    listing SparkEnv's fails in a pip-installed pyspark (a signature names a protobuf class
    the driver's class path does not have).
    """
    sc = spark.sparkContext
    jvm, gateway = sc._jvm, sc._gateway
    env = sc._jsc.sc().env()
    lookup = jvm.java.lang.invoke.MethodHandles.publicLookup()
    spark_env = jvm.java.lang.Class.forName("org.apache.spark.SparkEnv")

    def handle(name: str, returns: Any, *params: str) -> Any:
        types = gateway.new_array(jvm.java.lang.Class, len(params))
        for i, param in enumerate(params):
            types[i] = (jvm.java.lang.Boolean.TYPE if param == "boolean"
                        else jvm.java.lang.Class.forName(param))
        method_type = jvm.java.lang.invoke.MethodType.methodType(returns, types)
        found = lookup.findVirtual(spark_env, name, method_type)

        def call(*args: Any) -> Any:
            values = gateway.new_array(jvm.java.lang.Object, len(args) + 1)
            for i, value in enumerate((env, *args)):
                values[i] = value
            return found.invokeWithArguments(values)
        return call

    key = ("java.lang.String", "java.lang.String", "java.lang.String",
           "scala.collection.immutable.Map")
    create = handle("createPythonWorker", jvm.java.lang.Class.forName("scala.Tuple2"),
                    *key, "boolean")
    release = handle("releasePythonWorker", jvm.java.lang.Void.TYPE, *key,
                     "org.apache.spark.api.python.PythonWorker")
    return create, release


def planner_activity(spark: SparkSession) -> dict[str, int]:
    """When each of Spark's planners last took or gave back a worker (JVM nanoseconds)."""
    _, found = _planner_factories(spark, (LOOKUP_PLANNER, *QUERY_PLANNERS))
    return {key.workerModule(): getattr(factory, _LAST_ACTIVITY)() for key, factory in found}


def _python_workers(spark: SparkSession) -> Any:
    """Spark's map of Python worker factories (``SparkEnv.pythonWorkers``, one map per JVM)."""
    env = spark.sparkContext._jsc.sc().env()
    return _private_field(spark.sparkContext._jvm, "org.apache.spark.SparkEnv",
                          "pythonWorkers").get(env)


def _daemon_workers(spark: SparkSession) -> Any:
    """``PythonWorkerFactory.daemonWorkers``: each factory's workers, idle or busy."""
    return _private_field(spark.sparkContext._jvm,
                          "org.apache.spark.api.python.PythonWorkerFactory", "daemonWorkers")


def _planner_factories(spark: SparkSession, modules: tuple[str, ...],
                       factories: Any = None) -> tuple[Any, list[Any]]:
    """Spark's map of Python worker factories, and its (key, factory) pairs of ``modules``.

    ``factories``: the map (:func:`_python_workers`) when the caller has it.
    """
    if factories is None:
        factories = _python_workers(spark)
    found = []
    entries = factories.iterator()
    while entries.hasNext():
        entry = entries.next()
        if entry._1().workerModule() in modules:
            found.append((entry._1(), entry._2()))
    return factories, found


_FIELDS: dict[tuple[str, str], tuple[Any, Any]] = {}  # (class, field) -> (jvm, its handle)


def _private_field(jvm: Any, class_name: str, field: str) -> Any:
    """A private JVM field made readable (py4j itself refuses ``getClass``).

    Made once per JVM view and kept: the planners' threads read these fields every 0.1 s
    while a query starts, and making one takes six round trips to the JVM (py4j resolves
    ``java``, ``java.lang`` and ``java.lang.Class`` one by one), 5-10 ms on 2 busy cores.
    """
    kept = _FIELDS.get((class_name, field))
    if kept is not None and kept[0] is jvm:
        return kept[1]
    handle = jvm.java.lang.Class.forName(class_name).getDeclaredField(field)
    handle.setAccessible(True)
    _FIELDS[(class_name, field)] = (jvm, handle)
    return handle


_lookup_skipped = False  # this process's JVM will not run Spark's lookup planner


def lookup_skipped() -> bool:
    """Whether a session kstorm started skipped Spark's lookup of installed data sources."""
    return _lookup_skipped


def skip_installed_data_source_lookup(spark: SparkSession) -> None:
    """Spare a session kstorm starts Spark's lookup of pip-installed Python data sources.

    On the first data source it resolves, Spark looks for installed packages named
    ``pyspark_*`` that hold Python data sources, in a planner process of its own (~0.5 s
    on 2 cores, on the path to the first result). kstorm reads only through its own data
    sources, registered at run time, so its sessions record that lookup as done with nothing
    found (``DataSourceManager.dataSourceBuilders``, the hook Spark keeps for its tests). A
    session the user started is never touched (``session.get_session`` returns it as it is).
    Such a session does not find installed ``pyspark_*`` data sources by name;
    ``spark.dataSource.register`` still adds any.
    """
    try:
        jvm = spark.sparkContext._jvm
        manager = _scala_object(jvm, "org.apache.spark.sql.execution.datasources."
                                     "DataSourceManager$")
        if manager.dataSourceBuilders().isEmpty():
            empty = _scala_object(jvm, "scala.collection.immutable.Map$").empty()
            getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(empty))
            global _lookup_skipped  # noqa: PLW0603 - one JVM per process
            _lookup_skipped = True
    except Exception as exc:  # noqa: BLE001 - start-up time only: Spark then looks them up
        log.info("Spark's lookup of installed Python data sources stays on (%s: %s)",
                 type(exc).__name__, exc)


def _scala_object(jvm: Any, class_name: str) -> Any:
    """A Scala ``object`` (its ``MODULE$``)."""
    return jvm.java.lang.Class.forName(class_name).getField("MODULE$").get(None)
