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
from kstorm._spark.speedups import jvm_tmp, launch, planners, spark_context, zygote
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
        spark_context.quiet_accumulator_server(spark)
        zygote_after_launch(spark, forked)
        log.info("Spark %s started (%s); JVM and Python worker output in %s", spark.version,
                 spark.sparkContext.master, log_path())
        report = speedups.report()
        log.info("pyspark %s; data path on the %s route; speed-ups off: %s (%s)",
                 speedups.pyspark_version(),
                 "private" if report["batch-rows"].startswith("on") else "public",
                 ", ".join(n for n, v in report.items() if v.startswith("off")) or "none",
                 speedups.ENV)
        planners.skip_installed_data_source_lookup(spark)
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
        return spark_context.context_stopped(spark)
    except Exception as exc:  # noqa: BLE001 - a JVM that cannot answer has stopped too
        return lost_jvm(exc)


def _spark_context(conf: Any) -> Any:
    """``SparkContext.getOrCreate(conf)``, whose JVM, if it starts one, writes to Spark's log.

    The JVM (and the Python processes it starts) get the log file as their stdout and
    stderr; this process's own output stays where it is, also while the JVM starts
    (``KSTORM_SPARK_LOG=-``: the JVM's output on the console too).
    """
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if (spark_context.active_context() is not None or spark_context.gateway_started()
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
    with spark_context.extensions_deferred(sc) as deferred:
        spark = builder.getOrCreate()
    if deferred:
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
        if spark_context.context_gone(spark):
            return []  # stopped
        active = spark.streams.active
        if any(q.lastProgress is not None for q in active) or (seen and not active):
            break
        seen = seen or bool(active)
        time.sleep(poll_s)
    applied = []
    for name in DEFERRED_EXTENSIONS:
        if not spark_context.class_loadable(spark, name):
            continue  # e.g. a Spark without MLlib
        try:
            spark_context.apply_scala_object(spark, name)
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
    return spark_context.gateway_started() or "PYSPARK_GATEWAY_PORT" in os.environ


def zygote_after_launch(spark: SparkSession, forked: bool) -> None:
    """After: the session's Python processes start through the zygote's launcher, or not."""
    if forked:
        spark.sparkContext.pythonExec = zygote.launcher()
    else:
        zygote.stop()


def start_zygote(settings: TopologyConfig) -> None:
    """Start the zygote as a query starts, if its session forks from it (or will)."""
    sc = spark_context.active_context()
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


def stop_jvm(timeout: float = 180.0) -> None:
    """Stop Spark and wait for its JVM process to exit (it writes the class cache then)."""
    session = SparkSession.getActiveSession()
    proc = spark_context.jvm_process()
    if session is not None:
        session.stop()
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
