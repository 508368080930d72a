"""The SparkSession: built from :func:`spark_options` (``spark_options.py``), and its life."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from kstorm._spark import speedups
from kstorm._spark.java import check_java
from kstorm._spark.spark_options import spark_options, unix_socket_options, with_kstorm_jar
from kstorm._spark.speedups import jvm_tmp, launch, zygote
from kstorm._spark.speedups.launch import log_path
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError

_lock = threading.Lock()
log = logging.getLogger("kstorm")


def launch_options(settings: TopologyConfig, *, record_class_cache: bool = False,
                   app_name: str = "kstorm") -> dict[str, str]:
    """:func:`spark_options` plus the fast-start environment (``_spark/speedups/launch.py``).

    Call it right before creating the session: it sets ``SPARK_HOME`` (unless the user
    did) and the Python executables in this process's environment, which the JVM inherits.
    """
    import pyspark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    options = spark_options(settings, app_name)
    os.environ["SPARK_DIST_CLASSPATH"] = with_kstorm_jar(os.environ.get("SPARK_DIST_CLASSPATH"))
    key = "spark.driver.extraJavaOptions"  # a killed JVM's temporary files: jvm_tmp.py
    if speedups.enabled("jvm-tmpdir"):
        options[key] = jvm_tmp.java_option(options.get(key, ""))
    options.update(unix_socket_options(options, settings.spark_conf))
    cache = launch.cache_dir()
    if "SPARK_HOME" not in os.environ:
        try:
            home = launch.compiled_spark_home(Path(pyspark.__file__).parent, cache)
        except OSError as exc:  # a read-only cache: start as Spark would
            log.debug("no compiled Spark home (%s)", exc)
            home = None
        if home is not None:
            os.environ["SPARK_HOME"] = str(home)
    if (settings.spark_class_cache and "SPARK_HOME" in os.environ
            and speedups.enabled("class-cache")):
        why = launch.class_cache_proof(Path(os.environ["SPARK_HOME"]), cache)
        if why is not None:
            speedups.say_off("class-cache", why)
            return options
        try:
            extra = launch.class_archive_options(Path(os.environ["SPARK_HOME"]), cache,
                                                 record=record_class_cache)
        except OSError as exc:
            log.debug("no JVM class cache (%s)", exc)
            extra = ""
        if extra:
            key = "spark.driver.extraJavaOptions"
            options[key] = f"{options.get(key, '')} {extra}".strip()
        else:
            log.info("no JVM class cache in %s: run `kstorm warm-up` once to start Spark "
                     "faster", cache)
    return options


def get_session(settings: TopologyConfig, *, record_class_cache: bool = False,
                app_name: str = "kstorm") -> SparkSession:
    """The process's SparkSession, created on first use with :func:`launch_options`.

    ``record_class_cache`` (``kstorm warm-up``): record the JVM class cache when this
    session's JVM exits, if there is none yet.
    """
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        check_java()  # a missing or wrong Java is named here, not as JAVA_GATEWAY_EXITED
        builder = SparkSession.builder
        options = launch_options(settings, record_class_cache=record_class_cache,
                                 app_name=app_name)
        for key, value in options.items():
            builder = builder.config(key, value)
        _in_background(_import_numpy_check)
        forked = zygote_before_launch(settings)
        with _own_sigint_handler_kept() as keep_sigint:
            spark = _build_session(builder, options, keep_sigint)
        spark.sparkContext.setLogLevel("ERROR")
        _quiet_accumulator_server(spark)
        zygote_after_launch(spark, forked)
        log.info("Spark %s started (%s); JVM and Python worker output in %s", spark.version,
                 spark.sparkContext.master, log_path())
        report = speedups.report()
        log.info("pyspark %s; data path on the %s route; speed-ups off: %s (%s)",
                 speedups.pyspark_version(),
                 "private" if report["batch-rows"].startswith("on") else "public",
                 ", ".join(n for n, v in report.items() if v.startswith("off")) or "none",
                 speedups.ENV)
        _skip_installed_data_source_lookup(spark)
        _warm_workers(spark)
        return spark


_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def session_for(settings: TopologyConfig, app_name: str) -> tuple[SparkSession, Callable[[], None]]:
    """The SparkSession a topology runs in, and what puts the session back once it started.

    A new session is started with the topology's settings (:func:`get_session`); a running
    one gets them as far as Spark allows (:func:`adopt_session_settings`).
    """
    with _lock:
        active = SparkSession.getActiveSession()
    if active is None:
        return get_session(settings, app_name=app_name), lambda: None
    return active, adopt_session_settings(active, settings)


def adopt_session_settings(spark: SparkSession, settings: TopologyConfig) -> Callable[[], None]:
    """The Spark settings a topology chose, on the process's running SparkSession.

    A process has one SparkSession: the first topology (or your code) started it, with its
    settings. A later topology's ``kstorm.shuffle.partitions`` and ``spark.sql.*`` entries of
    ``kstorm.spark.conf`` that Spark can change at run time are set for its query (a query
    copies the session's settings when it starts) and put back by the returned function; a
    setting Spark fixes when it starts (``kstorm.spark.master``, executor and driver
    options) that differs is a :class:`ConfigError`, never ignored. Settings left unset take
    the session's.
    """
    changed: dict[str, str | None] = {}

    def restore() -> None:
        for key, before in changed.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)

    for key, (setting, value) in sorted(settings.chosen_spark_settings().items()):
        current = spark.conf.get(key, None)
        if current is not None and (current.strip() == value.strip() or (
                key == _JAVA_OPTIONS and current.startswith(value.strip())) or (
                key == "spark.master" and _local_cores(current) == _local_cores(value))):
            continue  # (kstorm adds its own options after yours: launch_options)
        if key.startswith("spark.sql.") and spark.conf.isModifiable(key):
            changed[key] = current
            spark.conf.set(key, value)
            continue
        restore()
        msg = (f"{setting} = {value!r}, but this process's SparkSession already runs with "
               f"{key} = {current!r}, and Spark cannot change it once started (a process has "
               "one SparkSession: the first topology's settings, or yours)")
        raise ConfigError(msg, hint="give the topologies of one process the same value, or "
                                    "run this one in a process of its own")
    return restore


def _local_cores(master: str) -> str | None:
    """A local master's threads, spelt one way (``local[*]`` is this machine's cores).

    Example:
        >>> _local_cores("local"), _local_cores(" local[1] "), _local_cores("spark://h:7077")
        ('1', '1', None)
    """
    master = master.strip()
    if master == "local":
        return "1"
    if not (master.startswith("local[") and master.endswith("]")):
        return None
    threads = master[len("local["):-1]
    return str(os.cpu_count() or 1) if threads == "*" else threads


def lost_jvm(exc: BaseException) -> bool:
    """Whether ``exc`` says the driver's JVM is gone (its gateway refuses or drops calls)."""
    from py4j.protocol import Py4JNetworkError

    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        if isinstance(at, (ConnectionError, Py4JNetworkError)):
            return True
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return False


def spark_stopped(spark: SparkSession) -> bool:
    """Whether the session's SparkContext is stopped or stopping, or its JVM gone.

    A signal sent to the whole process group reaches Spark's JVM too, whose shutdown hook
    stops the SparkContext while the driver still stops the topology: a job started then
    fails inside Spark (a ``NullPointerException`` from a stopped ``DAGScheduler``).
    """
    try:
        return bool(spark.sparkContext._jsc.sc().isStopped())
    except Exception as exc:  # noqa: BLE001 - a JVM that cannot answer has stopped too
        return lost_jvm(exc)


def _quiet_accumulator_server(spark: SparkSession) -> None:
    """The accumulator server of pyspark logs a lost JVM connection at debug, not as a traceback.

    When a signal sent to the whole process group (systemd's default ``KillMode``, ``kill --
    -PGID``) stops the JVM beside the driver, the server's connection ends mid-read and
    ``socketserver`` printed an ``EOFError`` traceback on stderr. kstorm uses no
    accumulators; the JVM's end is reported where it matters (the query, ``kstorm run``).
    """
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(request: Any, client_address: Any) -> None:
        log.debug("pyspark's accumulator server: a connection ended: %r", sys.exc_info()[1])

    server.handle_error = handle_error


def _spark_context(conf: Any) -> Any:
    """``SparkContext.getOrCreate(conf)``, whose JVM, if it starts one, writes to Spark's log.

    The JVM (and the Python processes it starts) get the log file as their stdout and
    stderr; this process's own output stays where it is, also while the JVM starts
    (``KSTORM_SPARK_LOG=-``: the JVM's output on the console too).
    """
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if (SparkContext._active_spark_context is not None or SparkContext._gateway is not None
            or os.environ.get("KSTORM_SPARK_LOG") == "-"):
        return SparkContext.getOrCreate(conf)
    with open(log_path(), "ab") as out:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
    return SparkContext(conf=conf, gateway=gateway)


# Session extensions applied after the first batch, not as the session is built
# (speedups/jvm/src/kstorm/spark/DeferredSessionExtensions.java): MLlib's registers two SQL
# functions (vector_to_array, array_to_vector) with Scala reflection, ~1 s of CPU on the way to the
# first result, for functions a topology does not use.
DEFERRED_EXTENSIONS = ("org.apache.spark.sql.ml.InternalFunctionRegistration",)
DEFERRED_WAIT_S = 60.0  # applied then at the latest, whether or not a query has run


@contextlib.contextmanager
def _own_sigint_handler_kept() -> Iterator[Callable[[], None]]:
    """A SIGINT handler the application installed stays in place when Spark starts.

    pyspark's SparkContext replaces the main thread's SIGINT handler with its own, which
    cancels every Spark job and raises ``KeyboardInterrupt`` wherever the main thread is,
    often inside a py4j call, whose connection it then breaks. An application that handles
    Ctrl-C itself (``kstorm run``, ``kstorm demo``: stop the topology, then exit) or ignores
    it keeps its handler; where Python's default was in place, pyspark's stays. Yields the
    restoring function, to call as soon as the SparkContext exists (and called on exit).
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    before = signal.getsignal(signal.SIGINT)

    def restore() -> None:
        if before is not signal.default_int_handler and before is not None:
            signal.signal(signal.SIGINT, before)

    try:
        yield restore
    finally:
        restore()


def _build_session(builder: SparkSession.Builder, options: dict[str, str],
                   context_made: Callable[[], None] = lambda: None) -> SparkSession:
    """``builder.getOrCreate()`` with :data:`DEFERRED_EXTENSIONS` applied in the background.

    The SparkSession is built with the JVM thread's context class loader set to kstorm's
    ``DeferredSessionExtensions``, which hides those providers from Spark's service
    loader; :func:`apply_deferred_extensions` applies them once the session's first query
    has made progress. Only where Python threads are pinned to JVM threads (pyspark's
    default): the loader is set and reset on the thread that builds the session.
    """
    from pyspark import SparkConf

    if os.environ.get("PYSPARK_PIN_THREAD", "true").lower() != "true":
        with _jvm_output_to(log_path()):
            return builder.getOrCreate()
    sc = _spark_context(SparkConf().setAll(list(options.items())))
    context_made()
    jvm = sc._jvm
    thread = jvm.java.lang.Thread.currentThread()
    previous = thread.getContextClassLoader()
    try:
        loader = jvm.kstorm.spark.DeferredSessionExtensions(
            previous if previous is not None else jvm.java.lang.ClassLoader.getSystemClassLoader())
    except Exception as exc:  # noqa: BLE001 - not kstorm's jar on the class path: as Spark does
        log.debug("session extensions not deferred: %s", exc)
        return builder.getOrCreate()
    thread.setContextClassLoader(loader)
    try:
        spark = builder.getOrCreate()
    finally:
        thread.setContextClassLoader(previous)
    _in_background(apply_deferred_extensions, spark)
    return spark


def apply_deferred_extensions(spark: SparkSession, wait_s: float = DEFERRED_WAIT_S,
                               poll_s: float = 0.5) -> list[str]:
    """Apply :data:`DEFERRED_EXTENSIONS` once a query has finished a batch; returns them.

    Those on the class path, after a batch of a query of ``spark`` (or its end), or after
    ``wait_s`` without one. Each is a Scala object whose first use registers its functions
    in Spark's global registry (later sessions of the JVM have them too).
    """
    deadline = time.monotonic() + wait_s
    seen = False  # a query was active: its end (run to completion) ends the wait too
    while time.monotonic() < deadline:
        if spark.sparkContext._jsc is None:
            return []  # stopped
        active = spark.streams.active
        if any(q.lastProgress is not None for q in active) or (seen and not active):
            break
        seen = seen or bool(active)
        time.sleep(poll_s)
    jvm = spark.sparkContext._jvm
    applied = []
    for name in DEFERRED_EXTENSIONS:
        if not jvm.org.apache.spark.util.Utils.classIsLoadable(name):
            continue  # e.g. a Spark without MLlib
        try:
            getattr(getattr(jvm, name + "$"), "MODULE$").apply()
            applied.append(name)
        except Exception as exc:  # noqa: BLE001 - named, so the missing functions are explained
            if lost_jvm(exc):
                log.debug("Spark session extension %s not applied: the JVM stopped", name)
                return applied
            log.warning("Spark session extension %s could not be applied (%s); its SQL "
                        "functions are not registered in this session", name, exc)
    return applied


def zygote_wanted(settings: TopologyConfig) -> bool:
    """Whether a session kstorm starts now forks Spark's Python processes (zygote.py).

    ``kstorm.spark.python.zygote`` on, Linux, a local master (a cluster's executors start
    their own Python), and ``PYSPARK_PYTHON`` unset or this interpreter.
    """
    if not settings.python_zygote or not (settings.spark_master or "").startswith("local"):
        return False
    if not speedups.enabled("zygote"):
        return False
    if other_spark_python() is not None:
        return False
    if zygote.launcher() is None:
        return False
    why = zygote.proof()
    if why is not None:
        speedups.say_off("zygote", why)
        return False
    return True


def other_spark_python() -> str | None:
    """Where ``PYSPARK_PYTHON`` leads (on ``PATH``) when that is not this interpreter, or None."""
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    where = shutil.which(python) or python
    return None if same_interpreter(where, sys.executable) else where


def same_interpreter(a: str, b: str) -> bool:
    """Whether the Python executables ``a`` and ``b`` run the same interpreter and packages.

    The same binary in the same directory: a virtual environment's ``bin/python`` is a
    symlink to its base interpreter, but the environment comes from where it is invoked.

    Example:
        >>> import sys
        >>> same_interpreter(sys.executable, sys.executable)
        True
    """
    def where(path: str) -> tuple[str, str]:
        path = os.path.abspath(path)
        return os.path.realpath(path), os.path.realpath(os.path.dirname(path))

    return where(a) == where(b)


def zygote_before_launch(settings: TopologyConfig) -> bool:
    """Before a session starts: whether it forks from the zygote (the JVM gets its address).

    A JVM already running (``spark-submit``, a session stopped earlier in this process)
    has the address only if it was started with it.
    """
    if not _forks_without_session(settings):
        return False
    os.environ[zygote.ENV] = zygote.address()  # the JVM and its children have it
    return True


def _forks_without_session(settings: TopologyConfig) -> bool:
    """Whether a session started now forks: wanted, and the JVM (if running) has the address."""
    return zygote_wanted(settings) and (
        not _jvm_running() or os.environ.get(zygote.ENV) == zygote.address())


def _jvm_running() -> bool:
    """Whether this process's JVM runs already (its environment is fixed)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def zygote_after_launch(spark: SparkSession, forked: bool) -> None:
    """After: the session's Python processes start through the zygote's launcher, or not."""
    if forked:
        spark.sparkContext.pythonExec = zygote.launcher()
    else:
        zygote.stop()


def start_zygote(settings: TopologyConfig) -> None:
    """Start the zygote as a query starts, if its session forks from it (or will)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        wanted = _forks_without_session(settings)
    else:
        wanted = (settings.python_zygote and os.environ.get(zygote.ENV) is not None
                  and sc.pythonExec == zygote.launcher())
    if wanted:
        try:
            zygote.ensure_running()
        except OSError as exc:  # start-up speed only: Spark starts Python as usual
            log.warning("kstorm could not start its Python zygote (%s); Spark's Python "
                        "processes start as usual", exc)


# Spark's Python data-source planners: each a daemon and a forked worker, used while a query
# is planned and then kept idle for the life of the JVM. The lookup runs once per JVM.
LOOKUP_PLANNER = "pyspark.sql.worker.lookup_data_sources"
CREATE_SOURCE = "pyspark.sql.worker.create_data_source"  # when the query is compiled
PLAN_READ = "pyspark.sql.worker.plan_data_source_read"  # at the query's first batch
QUERY_PLANNERS = (CREATE_SOURCE, PLAN_READ)


_LAST_ACTIVITY = "org$apache$spark$api$python$PythonWorkerFactory$$lastActivityNs"


def release_planners(spark: SparkSession, modules: tuple[str, ...], query: Any = None
                     ) -> list[str]:
    """Stop Spark's idle Python data-source planner processes of ``modules``; returns those.

    Spark plans a query's Python data sources (kstorm's spouts) in helper processes, one
    daemon and one worker per planner module, and keeps them for the life of the JVM
    (~200-350 MiB of resident memory together). The lookup planner runs once per JVM; the
    others again when a query starts, and Spark starts them anew if they are gone (~1 s).
    Only a planner that exists with all its workers idle is stopped, and none while another
    query of this session than ``query`` has not finished its first batch (it may be
    planning).
    """
    own = None if query is None else query.id
    if any(q.id != own and q.lastProgress is None for q in spark.streams.active):
        return []
    factories, found = _planner_factories(spark, modules)
    workers = _private_field(spark.sparkContext._jvm,
                             "org.apache.spark.api.python.PythonWorkerFactory", "daemonWorkers")
    stopped = []
    for key, factory in found:
        idle = factory.idleWorkers().size()
        if idle == 0 or workers.get(factory).size() > idle:
            continue  # planning now, or not yet
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
    ``cancel`` is set (the query did not start).
    """
    cancel = cancel or threading.Event()
    if not speedups.enabled("planners") or _planner_factories(spark, (PLAN_READ,))[1]:
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


def stop_jvm(timeout: float = 180.0) -> None:
    """Stop Spark and wait for its JVM process to exit (it writes the class cache then)."""
    from pyspark import SparkContext

    session = SparkSession.getActiveSession()
    gateway = SparkContext._gateway
    if session is not None:
        session.stop()
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        proc.stdin.close()  # the JVM exits when its stdin closes
        proc.wait(timeout)


def _in_background(step: Any, *args: Any) -> None:
    """Run a start-up ``step`` in a daemon thread; it only saves time: failures are logged."""

    def run() -> None:
        try:
            step(*args)
        except Exception as exc:
            log.debug("start-up step %s failed: %s", step.__name__, exc)

    threading.Thread(target=run, name=f"kstorm-{step.__name__}", daemon=True).start()


_lookup_skipped = False  # this process's JVM will not run Spark's lookup planner


def lookup_skipped() -> bool:
    """Whether a session kstorm started skipped Spark's lookup of installed data sources."""
    return _lookup_skipped


def _skip_installed_data_source_lookup(spark: SparkSession) -> None:
    """Spare a session kstorm starts Spark's lookup of pip-installed Python data sources.

    On the first data source it resolves, Spark looks for installed packages named
    ``pyspark_*`` that hold Python data sources, in a planner process of its own (~0.5 s
    on 2 cores, on the path to the first result). kstorm reads only through its own data
    sources, registered at run time, so its sessions record that lookup as done with nothing
    found (``DataSourceManager.dataSourceBuilders``, the hook Spark keeps for its tests). A
    session the user started is never touched (:func:`get_session` returns it as it is).
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


def _import_numpy_check() -> None:
    """Import what pyspark's py4j converters import on the SparkContext's first JVM call.

    pyspark's NumPy array converter imports ``pyspark.testing.utils`` (and with it pandas,
    ~0.25 s) the first time it is asked about an argument, while the SparkContext is being
    built; imported here while the JVM starts, it is ready by then.
    """
    import pyspark.testing.utils  # noqa: F401


def _warm_workers(spark: SparkSession) -> None:
    """Start Spark's Python workers in the background (``_spark/speedups/warmup.py``).

    Not waited for: the topology compiles and its query starts meanwhile (the session state
    is built once, by whichever needs it first). Waiting until the warm-up job ran cost the
    first result ~0.4 s (2026-11-27, the standard run: 6.8 s -> 6.4 s without the wait).
    """
    from kstorm._spark.speedups.warmup import warm_up

    _in_background(warm_up, spark)


@contextlib.contextmanager
def _jvm_output_to(path: Path) -> Iterator[None]:
    """Start the JVM with its stdout/stderr on ``path`` (this process's too, meanwhile).

    Spark's log4j banner and the TWS workers' prints go there instead of the user's
    console (``KSTORM_SPARK_LOG=-`` keeps them on the console).
    """
    if os.environ.get("KSTORM_SPARK_LOG") == "-":
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as target:
        os.dup2(target.fileno(), 1)
        os.dup2(target.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
