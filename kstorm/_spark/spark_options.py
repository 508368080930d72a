"""kstorm settings translated into Spark options: a plain function, no JVM, no session.

:func:`spark_options` is the whole translation of a :class:`~kstorm.config.TopologyConfig`
into a session's Spark settings (unit-tested without a JVM, ``tests/_spark/test_spark_options.py``);
the session itself (``session.py``) adds the process environment a JVM start needs and
builds the session from them. The speed-ups among the options are switched and proven in
``speedups/`` (``hadoop-fs``, ``unix-sockets``).
"""

from __future__ import annotations

import logging
import os

from kstorm._spark import speedups
from kstorm._spark.speedups import hadoop_fs, jvm_tmp
from kstorm._spark.speedups.daemon import DAEMON_MODULE
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError

log = logging.getLogger("kstorm")


def spark_options(settings: TopologyConfig, app_name: str = "kstorm") -> dict[str, str]:
    """Spark configuration for a topology (user ``kstorm.spark.conf`` entries win).

    ``app_name``: ``spark.app.name``, the name of the topology that started the session.
    """
    cores = os.cpu_count() or 2
    master = settings.spark_master or ""
    local = master.startswith("local")
    options = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions or cores),
        # transformWithStateInPandas (stateful bolts) needs the RocksDB state store.
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
        # INT_MAX turns off Spark's per-row byte-size check when it packs rows into Arrow
        # batches for Python (mapInArrow): with the Kafka spout's nested header column that
        # check cost the JVM ~18 us per row (bench/results/standard.md). Batches stay
        # bounded by maxRecordsPerBatch.
        "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
        "spark.python.worker.reuse": "true",
        # One pool of Python workers for every stage. Spark keeps a worker daemon (and its
        # idle workers) per environment, and its SQL runners (mapInArrow, the data sources'
        # reads) add SPARK_SIMPLIFIED_TRACEBACK=1 to theirs while the transformWithState
        # runner (stateful and windowed bolts, ackers) does not: a topology with state ran
        # two daemons, and its first stateful batch waited for new workers to start and import
        # pandas while the warm ones idled. Off, the tracebacks Spark carries keep pyspark's
        # frames (kstorm reads only their last exception lines: handle.failure).
        "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
        # A speed-up with a local master: the JVM talks to its Python processes (workers,
        # data-source planners, the state server of transformWithState) over Unix domain
        # sockets instead of TCP on localhost (bench/results/standard.md). Their directory
        # is proven first (unix_socket_options); a cluster's executors keep Spark's TCP.
        "spark.python.unix.domain.socket.enabled": "true" if local else "",
        # workers import the installed (compiled) pyspark, not pyspark.zip: speedups/daemon.py
        "spark.python.daemon.module": DAEMON_MODULE,
        "spark.sql.adaptive.enabled": "false",
        # Local checkpoints without Hadoop's .crc side files: every micro-batch writes an
        # offset-log and a commit-log file through FileContext (temp file, then rename), and
        # the checksummed local file system doubles each write; without it a 1-row batch
        # costs ~30 ms less (bench/results/latency.md). Writes stay atomic (rename); a
        # checkpoint written either way reads either way. (Only FileContext's "file"
        # implementation: Hadoop's FileSystem.getLocal must stay a LocalFileSystem.) With a
        # local master, also without a chmod/readlink process per file (hadoop_fs.py); the
        # executors of a cluster do not have that class.
        "spark.hadoop.fs.AbstractFileSystem.file.impl":
            hadoop_fs.FS_CLASS if local and _hadoop_fs_proven()
            else "org.apache.hadoop.fs.local.RawLocalFs",
        "spark.driver.memory": "2g",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.sql.session.timeZone": "UTC",
        # The driver JVM's heap is mostly short-lived garbage (Arrow exchange, planning): a
        # serial collector (the parallel one's extra threads buy nothing on 2 cores, and its
        # structures cost ~90 MiB) and a young generation of at most 64 MiB that starts
        # small keep its resident memory at ~400 MiB (was ~570) with the same throughput
        # (README "Memory"; bench/results/standard.md).
        # Only the C1 JIT compiler (-XX:TieredStopAtLevel=1): with C2 as well, compiling
        # Spark's code took 13-14 of the JVM's ~23 CPU-s in a 40 s word-count run (/proc per
        # thread), competing with the Python workers for 2 cores. Interleaved runs of
        # `python -m bench --max-offsets 20000,100000,500000` (2026-11-27): first result 7.2-7.7
        # -> 5.9-6.1 s, steady 71-74k -> 82-84k / 212-217k -> 259-266k / 357-522k -> 547-562k
        # ev/s. Executors of a cluster keep their JVM's default; kstorm.spark.conf may override.
        "spark.driver.extraJavaOptions": ("-XX:+UseSerialGC -Xms64m -XX:MaxNewSize=64m -Xss4m "
                                          "-XX:TieredStopAtLevel=1"),
        "spark.driver.host": "127.0.0.1" if local else "",
        "spark.driver.bindAddress": "127.0.0.1" if local else "",
    }
    if settings.workers is not None and not local:
        options.update(worker_options(settings.workers, settings.spark_conf, master))
    options.update(settings.spark_conf)
    return {k: v for k, v in options.items() if v != ""}


def _hadoop_fs_proven() -> bool:
    """Whether the hadoop-fs speed-up is on and its jar holds its class (hadoop_fs.proof)."""
    if not speedups.enabled("hadoop-fs"):
        return False
    why = hadoop_fs.proof()
    if why is not None:
        speedups.say_off("hadoop-fs", why)
    return why is None


def worker_options(workers: int, spark_conf: dict[str, str], master: str) -> dict[str, str]:
    """``topology.workers`` on a cluster: that many executors (Storm's worker processes).

    ``spark.executor.instances`` = workers (YARN, Kubernetes and standalone), each with
    ``spark.executor.cores`` (the user's, else 1); a standalone master allocates by cores, so
    ``spark.cores.max`` = workers x cores there. A ``kstorm.spark.conf`` entry that says
    otherwise, or dynamic allocation, is a contradiction: refused, never silently preferred.
    """
    cores = spark_conf.get("spark.executor.cores", "1")
    if not str(cores).isdigit() or int(cores) < 1:
        msg = f"kstorm.spark.conf spark.executor.cores = {cores!r} is not a whole number >= 1"
        raise ConfigError(msg, hint="spark.executor.cores counts cores per executor, e.g. '2'")
    wanted = {"spark.executor.instances": str(workers), "spark.executor.cores": cores}
    if master.startswith("spark://") or master == "":
        wanted["spark.cores.max"] = str(workers * int(cores))
    clashes = {k: v for k, v in spark_conf.items() if k in wanted and v != wanted[k]}
    if spark_conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        clashes["spark.dynamicAllocation.enabled"] = "true"
    if clashes:
        msg = (f"topology.workers = {workers} means {wanted}, but kstorm.spark.conf sets "
               f"{clashes}")
        raise ConfigError(msg, hint="keep one of them: topology.workers, or the Spark keys")
    return wanted


def with_kstorm_jar(classpath: str | None) -> str:
    """``classpath`` (``SPARK_DIST_CLASSPATH``) with kstorm's jar last (``hadoop_fs.py``).

    Spark's launcher puts this variable at the end of the driver's class path. Every session
    has the jar there, local or cluster, so the JVM class cache (keyed by the jar too,
    ``launch.py``) fits each of them.

    Example:
        >>> with_kstorm_jar("/opt/extra.jar").split(os.pathsep)[-1].endswith("kstorm-hadoop.jar")
        True
    """
    entries = [e for e in (classpath or "").split(os.pathsep) if e]
    jar = str(hadoop_fs.JAR)
    return os.pathsep.join([*[e for e in entries if e != jar], jar])


def unix_socket_options(options: dict[str, str], user: dict[str, str]) -> dict[str, str]:
    """Where Spark's Unix sockets go, once a directory proved to hold one; else TCP.

    With ``spark.python.unix.domain.socket.enabled`` on and no directory of the user's
    (``user``: ``kstorm.spark.conf``), the socket directory is this driver's own
    (``jvm_tmp.socket_dir``), where a socket of Spark's real path length was bound and
    answered. Where none works (a ``TMPDIR`` too deep and no short temporary directory, a
    file system without sockets) the JVM and Python talk TCP on localhost, said once at INFO.
    """
    enabled = "spark.python.unix.domain.socket.enabled"
    where = "spark.python.unix.domain.socket.dir"
    if options.get(enabled, "false").lower() != "true" or where in user:
        return {}
    if enabled not in user and not speedups.enabled("unix-sockets"):
        return {enabled: "false"}
    directory, why = jvm_tmp.socket_dir()
    if directory is None:
        log.info("speed-up off: Unix domain sockets between Spark's JVM and Python (%s); "
                 "they talk TCP on localhost", why)
        return {enabled: "false"}
    return {where: str(directory)}
