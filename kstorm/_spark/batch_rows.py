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

Both use pyspark's private members: a speed-up (``speedups.py``, ``batch-rows``), taken
only on a pyspark release it was tested on and where those members are there. Otherwise,
and when a private call fails for a reason of its own (not the batch's), the public
``foreachBatch`` and ``DataFrame.toArrow`` carry the batch; the integration tests compare
the two routes batch for batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from kstorm._spark import speedups

log = logging.getLogger("kstorm")
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


def _private_members() -> dict[str, Any] | None:
    """The private members of pyspark the fast route needs, or None where one is missing."""
    try:
        from py4j.java_gateway import java_import
        from pyspark.errors.exceptions.captured import unwrap_spark_exception
        from pyspark.java_gateway import ensure_callback_server_started
        from pyspark.sql.pandas.serializers import ArrowCollectSerializer
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.util import _load_from_socket
    except ImportError as exc:
        speedups.say_off("batch-rows", f"pyspark has no {exc.name or exc}")
        return None
    return {"java_import": java_import, "unwrap": unwrap_spark_exception,
            "callback": ensure_callback_server_started, "serializer": ArrowCollectSerializer,
            "to_arrow_schema": to_arrow_schema, "load": _load_from_socket}


def fast_route() -> bool:
    """Whether batches take the private route here (``speedups.py``: ``batch-rows``)."""
    return speedups.enabled("batch-rows", private_pyspark=True) and (
        _private_members() is not None)


def foreach_batch(writer: Any, session: SparkSession,
                  func: Callable[[DataFrame, int], None], *, fast: bool | None = None) -> Any:
    """``writer.foreachBatch(func)``, through :class:`BatchFunction` on the fast route.

    ``fast``: None decides by :func:`fast_route`; False is pyspark's own ``foreachBatch``.
    """
    members = _private_members() if (fast_route() if fast is None else fast) else None
    if members is None:
        return writer.foreachBatch(func)
    gateway = session.sparkContext._gateway
    try:
        assert gateway is not None
        members["java_import"](gateway.jvm,
                               "org.apache.spark.sql.execution.streaming.sources.*")
        gateway.jvm.PythonForeachBatchHelper.callForeachBatch(writer._jwrite,
                                                              BatchFunction(session, func))
    except Exception as exc:  # noqa: BLE001 - a private member that moved: the public route
        speedups.say_off("batch-rows", f"PythonForeachBatchHelper failed: {exc}")
        return writer.foreachBatch(func)
    members["callback"](gateway)
    return writer


class ArrowRows:
    """A batch frame's rows as one Arrow table, as ``DataFrame.toArrow`` gives them.

    ``fast``: None decides by :func:`fast_route`; False is ``DataFrame.toArrow`` itself.
    The fast route that fails for a reason other than the batch's own Spark error turns
    itself off for good and the batch is read again through ``toArrow``.
    """

    def __init__(self, *, fast: bool | None = None) -> None:
        self.schema: pa.Schema | None = None  # the frames' schema (one query: one schema)
        self._members = _private_members() if (fast_route() if fast is None else fast) else None

    @property
    def fast(self) -> bool:
        """Whether the next batch takes the private route."""
        return self._members is not None

    def __call__(self, frame: DataFrame) -> pa.Table:
        if self._members is None:
            return frame.toArrow()
        try:
            return self._collect(frame, self._members)
        except Exception as exc:
            from py4j.protocol import Py4JJavaError
            from pyspark.errors import PySparkException

            if isinstance(exc, PySparkException | Py4JJavaError):
                raise  # the batch's own failure: the public route would fail it too
            speedups.say_off("batch-rows", f"collectAsArrowToPython failed: "
                                           f"{type(exc).__name__}: {exc}")
            self._members = None
            return frame.toArrow()

    def _collect(self, frame: DataFrame, members: dict[str, Any]) -> pa.Table:
        if self.schema is None:
            # (no default given: conf.get(key, default) returns that default when the key is
            # unset, whatever Spark's own default is)
            large = frame.sparkSession.conf.get(LARGE_VAR_TYPES) == "true"
            self.schema = members["to_arrow_schema"](
                frame.schema, error_on_duplicated_field_names_in_struct=True,
                timezone="UTC", prefers_large_types=large)
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
            return self.schema.empty_table()
        table = pa.Table.from_batches(batches)
        return table if table.schema.equals(self.schema) else table.cast(self.schema)
