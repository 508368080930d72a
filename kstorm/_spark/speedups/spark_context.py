"""The SparkContext's private members the session's life needs, each behind a small function.

pyspark has no public way to ask whether the process's JVM is up, whether a session's
``SparkContext`` is stopped, or to call the JVM from the driver; kstorm needs each once or
twice in a session's life (``kstorm/_spark/session.py``): to start Spark's JVM with its
output in Spark's log, to hide the deferred session extensions while the session is built,
to know a stopped context from a failed job, and to wait for the JVM to exit. The members:
``SparkContext._active_spark_context``, ``._gateway`` (and its ``proc``), ``._jvm``,
``._jsc``, ``._accumulatorServer``.

The class attributes are pyspark's since its first release (None until a context starts);
the calls on a running context raise where the JVM cannot answer, and ``session.py`` guards
each: a DEBUG line, or the answer "stopped" (``session.spark_stopped``), never a failed
batch. Where kstorm's jar is missing, the session is built as Spark builds it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from pyspark import SparkContext

log = logging.getLogger("kstorm")


def active_context() -> Any:
    """The process's running ``SparkContext``, or None."""
    return SparkContext._active_spark_context


def gateway_started() -> bool:
    """Whether this process has a py4j gateway to a JVM (a context started, or stopped, here)."""
    return SparkContext._gateway is not None


def jvm_process() -> Any:
    """The JVM process pyspark started for this process (``Popen``), or None (not ours)."""
    return getattr(SparkContext._gateway, "proc", None)


def context_stopped(spark: Any) -> bool:
    """Whether ``spark``'s SparkContext says it is stopped or stopping (raises: no answer)."""
    return bool(spark.sparkContext._jsc.sc().isStopped())


def context_gone(spark: Any) -> bool:
    """Whether ``spark``'s SparkContext was stopped from Python (its JVM half released)."""
    return spark.sparkContext._jsc is None


def class_loadable(spark: Any, class_name: str) -> bool:
    """Whether the JVM of ``spark`` has class ``class_name`` (Spark's ``Utils``)."""
    return bool(spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(class_name))


def apply_scala_object(spark: Any, class_name: str) -> None:
    """Apply the JVM's Scala ``object`` ``class_name`` (its ``MODULE$.apply()``).

    Its first use runs its registrations (e.g. MLlib's SQL functions); raises where that
    fails.
    """
    getattr(getattr(spark.sparkContext._jvm, class_name + "$"), "MODULE$").apply()


@contextlib.contextmanager
def extensions_deferred(sc: Any) -> Iterator[bool]:
    """Inside, this thread's JVM context class loader is kstorm's deferring one; yields whether.

    ``kstorm.spark.DeferredSessionExtensions`` (``speedups/jvm/src/``) hides the deferred
    session extensions' providers from Spark's service loader while a session is built;
    the thread's loader is put back on exit. Where kstorm's jar is not on the class path (no
    such class), nothing changes (a DEBUG line) and False is yielded: the session is built
    as Spark builds it.
    """
    jvm = sc._jvm
    thread = jvm.java.lang.Thread.currentThread()
    previous = thread.getContextClassLoader()
    try:
        loader = jvm.kstorm.spark.DeferredSessionExtensions(
            previous if previous is not None else jvm.java.lang.ClassLoader.getSystemClassLoader())
    except Exception as exc:  # noqa: BLE001 - not kstorm's jar on the class path: as Spark does
        log.debug("session extensions not deferred: %s", exc)
        yield False
        return
    thread.setContextClassLoader(loader)
    try:
        yield True
    finally:
        thread.setContextClassLoader(previous)


def quiet_accumulator_server(spark: Any) -> None:
    """The accumulator server of pyspark logs a lost JVM connection at DEBUG, not as a traceback.

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
