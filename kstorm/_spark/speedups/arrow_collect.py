"""The ``batch-rows`` speed-up's private route: a batch's rows with less fixed cost per batch.

pyspark's ``foreachBatch`` and ``DataFrame.toArrow`` do per batch what a topology needs
once per query: a new ``SparkSession`` wrapper for the batch's frame (six JVM round
trips), the frame's schema as JSON and two settings (about a dozen more), and a call site
set and then cleared around the collect -- cleared, the query's thread walks its stack for
every RDD and job it makes afterwards (``Utils.getCallSite``) instead of using the one the
query set when it started. On a one-offset batch of the standard topology that was ~30
round trips from the driver and ~20 proxy deletes.

* :class:`BatchFunction` is the ``PythonForeachBatchFunction`` the JVM calls: the batch's
  frame with the session that started the query (the commit phase uses only its
  ``SparkContext``, the same for both); :func:`call_foreach_batch` installs it.
* :func:`collect` collects a batch's rows as an Arrow table like ``toArrow`` (the same cast
  to the frame's schema, :func:`arrow_schema`, read at the first batch), and leaves the call
  site alone.

The public route, and the choice between the two, stay in ``kstorm/_spark/batch_rows.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

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


def private_members() -> dict[str, Any]:
    """The private members of pyspark this route needs (an ImportError names a missing one)."""
    from py4j.java_gateway import java_import
    from pyspark.errors.exceptions.captured import unwrap_spark_exception
    from pyspark.java_gateway import ensure_callback_server_started
    from pyspark.sql.pandas.serializers import ArrowCollectSerializer
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.util import _load_from_socket

    return {"java_import": java_import, "unwrap": unwrap_spark_exception,
            "callback": ensure_callback_server_started, "serializer": ArrowCollectSerializer,
            "to_arrow_schema": to_arrow_schema, "load": _load_from_socket}


def call_foreach_batch(writer: Any, session: SparkSession,
                       func: Callable[[DataFrame, int], None], members: dict[str, Any]) -> Any:
    """``writer.foreachBatch(func)`` through :class:`BatchFunction` (raises where it fails).

    Returns the py4j gateway, whose callback server must then run (``members["callback"]``).
    """
    gateway = session.sparkContext._gateway
    if gateway is None:
        msg = "no py4j gateway"
        raise RuntimeError(msg)
    members["java_import"](gateway.jvm, "org.apache.spark.sql.execution.streaming.sources.*")
    gateway.jvm.PythonForeachBatchHelper.callForeachBatch(writer._jwrite,
                                                          BatchFunction(session, func))
    return gateway


def arrow_schema(frame: DataFrame, members: dict[str, Any]) -> pa.Schema:
    """The Arrow schema ``toArrow`` casts ``frame``'s rows to."""
    # (no default given: conf.get(key, default) returns that default when the key is
    # unset, whatever Spark's own default is)
    large = frame.sparkSession.conf.get(LARGE_VAR_TYPES) == "true"
    return members["to_arrow_schema"](frame.schema, error_on_duplicated_field_names_in_struct=True,
                                      timezone="UTC", prefers_large_types=large)


def collect(frame: DataFrame, schema: pa.Schema, members: dict[str, Any]) -> pa.Table:
    """``frame``'s rows as one Arrow table of ``schema``, as ``toArrow`` gives them."""
    port, secret, server = frame._jdf.collectAsArrowToPython()
    try:
        with members["load"]((port, secret), members["serializer"]()) as stream:
            results = list(stream)
    finally:
        with members["unwrap"]():
            server.getResult()  # the collect's own failure, raised here
    batches = [r for r in results if isinstance(r, pa.RecordBatch)]
    order = [r for r in results if isinstance(r, list)]
    if order:  # releases that send the partitions' order after their batches
        batches = [batches[i] for i in order[-1]]
    if not batches:
        return schema.empty_table()
    table = pa.Table.from_batches(batches)
    return table if table.schema.equals(schema) else table.cast(schema)
