"""How each micro-batch's rows reach the commit phase, with less fixed cost per batch.

pyspark's ``foreachBatch`` and ``DataFrame.toArrow`` do per batch what a topology needs
once per query: a new ``SparkSession`` wrapper for the batch's frame (six JVM round
trips), the frame's schema as JSON and two settings (about a dozen more), and a call site
set and then cleared around the collect -- cleared, the query's thread walks its stack for
every RDD and job it makes afterwards (``Utils.getCallSite``) instead of using the one the
query set when it started. On a one-offset batch of the standard topology that was ~30
round trips from the driver and ~20 proxy deletes.

* :class:`BatchFunction` is the ``PythonForeachBatchFunction`` the JVM calls: the batch's
  frame with the session that started the query (the commit phase uses only its
  ``SparkContext``, the same for both).
* :class:`ArrowRows` collects a batch's rows as an Arrow table like ``toArrow`` (the
  same cast to the frame's schema), with the schema and setting read at the first batch,
  and leaves the call site alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from py4j.java_gateway import java_import
from pyspark.errors.exceptions.captured import unwrap_spark_exception
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.serializers import ArrowCollectSerializer
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.util import _load_from_socket

LARGE_VAR_TYPES = "spark.sql.execution.arrow.useLargeVarTypes"


class BatchFunction:
    """The JVM's ``PythonForeachBatchFunction``: ``func(frame, batch_id)`` per batch."""

    def __init__(self, session: SparkSession, func: Callable[[DataFrame, int], None]) -> None:
        self.session = session
        self.func = func

    def call(self, jdf: Any, batch_id: int) -> None:
        self.func(DataFrame(jdf, self.session), batch_id)

    class Java:
        implements = ["org.apache.spark.sql.execution.streaming.sources."
                      "PythonForeachBatchFunction"]


def foreach_batch(writer: Any, session: SparkSession,
                  func: Callable[[DataFrame, int], None]) -> Any:
    """``writer.foreachBatch(func)``, calling ``func`` through :class:`BatchFunction`."""
    gateway = session.sparkContext._gateway
    assert gateway is not None
    java_import(gateway.jvm, "org.apache.spark.sql.execution.streaming.sources.*")
    gateway.jvm.PythonForeachBatchHelper.callForeachBatch(writer._jwrite,
                                                          BatchFunction(session, func))
    ensure_callback_server_started(gateway)
    return writer


class ArrowRows:
    """A batch frame's rows as one Arrow table, as ``DataFrame.toArrow`` gives them."""

    def __init__(self) -> None:
        self.schema: pa.Schema | None = None  # the frames' schema (one query: one schema)

    def __call__(self, frame: DataFrame) -> pa.Table:
        if self.schema is None:
            # (no default given: conf.get(key, default) returns that default when the key is
            # unset, whatever Spark's own default is)
            large = frame.sparkSession.conf.get(LARGE_VAR_TYPES) == "true"
            self.schema = to_arrow_schema(frame.schema,
                                          error_on_duplicated_field_names_in_struct=True,
                                          timezone="UTC", prefers_large_types=large)
        port, secret, server = frame._jdf.collectAsArrowToPython()
        try:
            with _load_from_socket((port, secret), ArrowCollectSerializer()) as stream:
                batches = list(stream)
        finally:
            with unwrap_spark_exception():
                server.getResult()  # the collect's own failure, raised here
        if not batches:
            return self.schema.empty_table()
        table = pa.Table.from_batches(batches)
        return table if table.schema.equals(self.schema) else table.cast(self.schema)
