"""kstorm's speed-ups that reach into Spark, the JVM or CPython: the list, the switch, the gate.

Every one of them has a public route that does the same work slower, and each is used only
where it proved itself: at start (a socket bound and answered, a file read through the jar,
a fork answered once) or, for the private members of pyspark on the data path, on a pyspark
minor release whose private route a test compared with the public one output for output
(:data:`TESTED_PYSPARK`). Anywhere else it stays off, said once at INFO with the reason.

One switch turns any of them off, in the driver and in Spark's Python workers alike (they
inherit the driver's environment): ``KSTORM_SPEEDUPS_OFF`` -- a comma-separated list of the
names below, or ``all``.

=================  ==========================================================================
name               what it is, its public route
=================  ==========================================================================
batch-rows         a micro-batch's rows collected through ``_jdf.collectAsArrowToPython``
                   and ``foreachBatch`` through ``PythonForeachBatchHelper``
                   (``arrow_collect.py``); public: ``DataFrame.toArrow``, ``foreachBatch``
state-map          a stateful bolt's map state spoken to on the state server's socket
                   (``state_map.py``); public: ``MapState`` get/update/iterator
unix-sockets       JVM <-> Python over Unix domain sockets in a proven directory
                   (``jvm_tmp.socket_dir``); public: TCP on localhost (Spark's default)
jvm-tmpdir         the driver JVM's own ``java.io.tmpdir``, swept once its driver is gone
                   (``jvm_tmp.py``); public: the JVM's default
hadoop-fs          local checkpoint files through kstorm's jar (``hadoop_fs.py``);
                   public: Hadoop's ``RawLocalFs``
zygote             Python workers forked from a warm process (``zygote.py``);
                   public: Spark starts each worker
class-cache        the JVM's class-data archive (``launch.py``); public: a plain start
planners           data-source planners released, and pre-started (``planners.py``);
                   public: Spark's own planning
=================  ==========================================================================

Every private Spark, py4j or CPython member kstorm uses is in :data:`PRIVATE_MEMBERS`, by
module, and every one of those modules is in this package (``tests/_spark/test_speedups.py`` greps
all of kstorm and fails on one not listed, or on a JVM handle or reflection outside the
package; ``tests/test_architecture.py`` holds the rest of kstorm to :data:`INTERFACE`),
each with its fallback:

* ``arrow_collect.py`` (batch-rows): ``DataFrame._jdf``, ``DataStreamWriter._jwrite``,
  ``SparkContext._gateway``, ``pyspark.util._load_from_socket``. Fallback: ``foreachBatch``
  and ``DataFrame.toArrow``; compared batch for batch in ``integration_tests/
  test_batch_rows.py``.
* ``state_map.py`` (state-map): ``MapState._mapStateClient`` and ``._stateName``, the
  client's ``_stateful_processor_api_client`` and ``_receive_proto_message*``, and
  ``pyspark.sql.types``' ``_parse_datatype_json_string`` and
  ``_create_row_inbound_converter`` (replaced when a row is unpickled). Fallback: the
  ``MapState`` methods (``kstorm/_spark/tws_map.py`` chooses); the stateful kill tests and
  ``tests/_spark/test_state_map.py`` run both.
* ``planners.py`` (planners): ``SparkContext._jvm``, ``._jsc``, ``._gateway``; Scala fields
  read by reflection (``setAccessible``, ``_private_field``) or by their mangled accessor
  (``...$$lastActivityNs``), ``SparkEnv``'s worker-factory methods (``_worker_calls``), the
  test hook ``dataSourceBuilders_$eq``. Fallback: Spark plans as it would (each guarded: an
  error there is a DEBUG or INFO line, never a failed batch); ``KSTORM_SPEEDUPS_OFF=planners``.
* ``spark_context.py`` (the session's life, ``session.py`` calls it):
  ``SparkContext._active_spark_context``, ``._gateway`` (its ``proc``), ``._jvm``,
  ``._jsc``, ``._accumulatorServer``. Fallback: a call the JVM cannot answer is guarded
  by ``session.py`` (a DEBUG line, or "stopped"); without kstorm's jar the session is built
  as Spark builds it.
* ``zygote.py`` (zygote): ``runpy._run_module_as_main``, ``atexit._run_exitfuncs``.
  Fallback: Spark starts its Python processes itself (``KSTORM_SPEEDUPS_OFF=zygote``).
"""

from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger("kstorm")

ENV = "KSTORM_SPEEDUPS_OFF"
NAMES = ("batch-rows", "state-map", "unix-sockets", "jvm-tmpdir", "hadoop-fs", "zygote",
         "class-cache", "planners")
# pyspark minor releases whose private data-path members kstorm's tests compared with the
# public route (tests/_spark/test_speedups.py, integration_tests/test_batch_rows.py); another
# release gets the public route for batch-rows and state-map.
TESTED_PYSPARK = ("4.2", "4.3")

PRIVATE_MEMBERS = {
    "kstorm/_spark/speedups/arrow_collect.py": ("._gateway", "._jdf", "._jwrite",
                                                "_load_from_socket"),
    "kstorm/_spark/speedups/state_map.py": ("._stateName", "_create_row_inbound_converter",
                                            "_mapStateClient", "_parse_datatype_json_string",
                                            "_receive_proto_message",
                                            "_receive_proto_message_with_map_pairs",
                                            "_stateful_processor_api_client"),
    "kstorm/_spark/speedups/planners.py": ("$$lastActivityNs", "._gateway", "._jsc", "._jvm",
                                           "_private_field", "_worker_calls",
                                           "dataSourceBuilders_$eq", "setAccessible"),
    "kstorm/_spark/speedups/spark_context.py": ("._gateway", "._jsc", "._jvm",
                                                "_accumulatorServer",
                                                "_active_spark_context"),
    "kstorm/_spark/speedups/zygote.py": ("_run_exitfuncs", "_run_module_as_main"),
}

# The narrow interface: what modules outside this package may use of each of its modules
# (tests/test_architecture.py checks every import and attribute against it). The package's
# own ``__init__`` (the switches) is "__init__".
INTERFACE = {
    "__init__": ("ENV", "NAMES", "enabled", "pyspark_version", "report", "say_off"),
    "arrow_collect": ("arrow_schema", "call_foreach_batch", "collect", "private_members"),
    "affinity": ("AFFINITY", "Request", "broadcast_release", "connect", "forward",
                 "forwarded_task"),
    "daemon": ("DAEMON_MODULE",),
    "gc_control": ("freeze_imports", "paused"),
    "hadoop_fs": ("FS_CLASS", "JAR", "proof"),
    "jvm_tmp": ("java_option", "socket_dir"),
    "launch": ("cache_dir", "claim_recorded_archive", "class_archive_options",
               "class_archive_state", "class_cache_proof", "compiled_spark_home", "log_path",
               "spark_submit_command"),
    "planners": ("LOOKUP_PLANNER", "PLAN_READ", "QUERY_PLANNERS", "lookup_skipped",
                 "planner_activity", "planning", "release_planners",
                 "skip_installed_data_source_lookup", "start_read_planner",
                 "starts_planning"),
    "spark_context": ("active_context", "apply_scala_object", "class_loadable",
                      "context_gone", "context_stopped", "extensions_deferred",
                      "gateway_started", "jvm_process", "quiet_accumulator_server"),
    "state_map": ("connect",),
    "warmup": ("warm_up",),
    "zygote": ("ENV", "address", "ensure_running", "launcher", "proof", "stop"),
}

_said: set[str] = set()


def switched_off() -> frozenset[str]:
    """The speed-ups ``KSTORM_SPEEDUPS_OFF`` turns off (every one for ``all``).

    Example:
        >>> import os; os.environ[ENV] = "zygote, unix-sockets"
        >>> sorted(switched_off())
        ['unix-sockets', 'zygote']
        >>> del os.environ[ENV]
    """
    names = {n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()}
    if "all" in names:
        return frozenset(NAMES)
    unknown = names - set(NAMES)
    if unknown:
        from kstorm.errors import ConfigError

        msg = f"{ENV} names {sorted(unknown)}, which kstorm does not have"
        raise ConfigError(msg, hint=f"the speed-ups are {', '.join(NAMES)} (or 'all')")
    return frozenset(names)


@functools.cache
def pyspark_version() -> str:
    """The installed pyspark's version, e.g. ``'4.3.0'``."""
    import pyspark

    return str(pyspark.__version__)


def pyspark_minor() -> str:
    """The installed pyspark's ``major.minor``, e.g. ``'4.3'``."""
    return ".".join(pyspark_version().split(".")[:2])


def private_pyspark_ok() -> bool:
    """Whether the pyspark in use is one whose private members kstorm has been tested on."""
    return pyspark_minor() in TESTED_PYSPARK


def enabled(name: str, *, private_pyspark: bool = False) -> bool:
    """Whether speed-up ``name`` may be tried here.

    Not switched off, and for one that uses pyspark's private members
    (``private_pyspark``), a tested pyspark release.
    """
    if name not in NAMES:
        msg = f"unknown speed-up {name!r}"
        raise ValueError(msg)
    if name in switched_off():
        say_off(name, f"{ENV} says so")
        return False
    if private_pyspark and not private_pyspark_ok():
        say_off(name, f"pyspark {pyspark_minor()} is not one it was tested on "
                      f"({', '.join(TESTED_PYSPARK)})")
        return False
    return True


def say_off(name: str, why: str) -> None:
    """One INFO line per process that speed-up ``name`` is off, and why."""
    if name in _said:
        return
    _said.add(name)
    log.info("speed-up %s off: %s; the public route does its work", name, why)


def report() -> dict[str, str]:
    """Each speed-up and whether it is switched on here (for ``kstorm doctor``)."""
    off = switched_off()
    out = {}
    for name in NAMES:
        if name in off:
            out[name] = f"off ({ENV})"
        elif name in ("batch-rows", "state-map") and not private_pyspark_ok():
            out[name] = f"off (pyspark {pyspark_minor()} untested)"
        else:
            out[name] = "on where it proves itself at start"
    return out
