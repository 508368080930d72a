"""How each micro-batch's rows reach the commit phase: the public route, or the switch's.

The public route is pyspark's ``foreachBatch`` and ``DataFrame.toArrow``. The private one
(``speedups/arrow_collect.py``, the ``batch-rows`` speed-up) does the same with less fixed
cost per batch; it is taken only on a pyspark release it was tested on and where its
private members are there. Otherwise, and when a private call fails for a reason of its own
(not the batch's), the public route carries the batch; the integration tests compare the
two routes batch for batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from kstorm._spark import speedups
from kstorm._spark.speedups import arrow_collect

log = logging.getLogger("kstorm")


def _private_members() -> dict[str, Any] | None:
    """The private members of pyspark the fast route needs, or None where one is missing."""
    try:
        return arrow_collect.private_members()
    except ImportError as exc:
        speedups.say_off("batch-rows", f"pyspark has no {exc.name or exc}")
        return None


def fast_route() -> bool:
    """Whether batches take the private route here (``speedups``: ``batch-rows``)."""
    return speedups.enabled("batch-rows", private_pyspark=True) and (
        _private_members() is not None)


def foreach_batch(writer: Any, session: SparkSession,
                  func: Callable[[DataFrame, int], None], *, fast: bool | None = None) -> Any:
    """``writer.foreachBatch(func)``, or the private route's equivalent where it is taken.

    ``fast``: None decides by :func:`fast_route`; False is pyspark's own ``foreachBatch``.
    """
    members = _private_members() if (fast_route() if fast is None else fast) else None
    if members is None:
        return writer.foreachBatch(func)
    try:
        gateway = arrow_collect.call_foreach_batch(writer, session, func, members)
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
            if self.schema is None:
                self.schema = arrow_collect.arrow_schema(frame, self._members)
            return arrow_collect.collect(frame, self.schema, self._members)
        except Exception as exc:
            from py4j.protocol import Py4JJavaError
            from pyspark.errors import PySparkException

            if isinstance(exc, PySparkException | Py4JJavaError):
                raise  # the batch's own failure: the public route would fail it too
            speedups.say_off("batch-rows", f"collectAsArrowToPython failed: "
                                           f"{type(exc).__name__}: {exc}")
            self._members = None
            return frame.toArrow()
