"""Warm-up: start Spark's Python workers while the JVM plans the topology's query.

The first micro-batch otherwise pays for starting the worker daemon and importing pyarrow,
pandas, confluent-kafka and kstorm in each worker (seconds on 2 cores). :func:`warm_up` runs
one tiny Arrow job right after the session starts, in a background thread, while the topology is
compiled and the query initialised (JVM work that needs no task slot). It must be a SQL
Arrow job (``mapInArrow``): Spark keeps one worker daemon per worker environment, and a SQL
Arrow job's (the same as the stages' and the Python data sources' reads) differs from an
RDD job's. Measured in the Spark log under load 5: a warm-up that was instead a batch read
of a Python data source queued behind the data-source lookups and took the task slots just
when the first batch needed them, delaying it by 3 s.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def _import_stage_modules(batches: Iterator[Any]) -> Iterator[Any]:
    # What the first batch's tasks import; workers are reused, so this is paid once.
    import pandas  # noqa: F401  (pyarrow imports it on the first batch's first column)

    import kstorm._kafka.fetch  # noqa: F401
    import kstorm._spark.stage  # noqa: F401
    import kstorm._spark.windowed  # noqa: F401

    yield from batches


def warm_up(spark: Any) -> None:
    """Start one Python worker per core (blocking; call it from a background thread)."""
    n = spark.sparkContext.defaultParallelism
    spark.range(n, numPartitions=n).mapInArrow(_import_stage_modules, "id long").collect()
