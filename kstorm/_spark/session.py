"""The SparkSession: every translation of kstorm settings into Spark options lives here."""

from __future__ import annotations

import logging
import os
import sys
import threading

from pyspark.sql import SparkSession

from kstorm.config import TopologyConfig

_lock = threading.Lock()
log = logging.getLogger("kstorm")


def spark_options(settings: TopologyConfig) -> dict[str, str]:
    """Spark configuration for a topology (user ``kstorm.spark.conf`` entries win)."""
    cores = os.cpu_count() or 2
    options = {
        "spark.master": settings.master,
        "spark.app.name": "kstorm",
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
        "spark.python.worker.reuse": "true",
        "spark.sql.adaptive.enabled": "false",
        "spark.driver.memory": "2g",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-XX:+UseParallelGC -Xss4m",
    }
    options.update(settings.spark_conf)
    return options


def get_session(settings: TopologyConfig) -> SparkSession:
    """The process's SparkSession, created on first use with :func:`spark_options`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        builder = SparkSession.builder
        for key, value in spark_options(settings).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        return spark
