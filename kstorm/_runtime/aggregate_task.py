"""A built-in windowed aggregate's read task over one batch of its spout's rows, Spark-free.

Run by Spark's read tasks (``kstorm/_spark/windowed.py``, ``WindowStageRunner``) and by the
test driver (``TopologyTestDriver._aggregate_stage``) alike; :func:`read_rows`:

1. Flag the late rows, per input stream (``late_mask``: a row is late when its timestamp is
   behind the stream's latest minus the lag; ``latest`` moves on in place). Processing-time
   sessions have none: their rows' time is the batch's, stamped in the commit phase.
2. Late rows: their values by field, and one envelope row per consumer of the late-tuple
   stream (none without one).
3. On-time rows: reduced to partials per (key, window end), for the commit phase to fold in
   (``batch_loop.fold_partials``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kstorm._runtime.envelope import Packed, pack
from kstorm.windowing.aggregate import AggregateSpec, late_mask, partials


def read_rows(batch: pa.Table | pa.RecordBatch, streams: np.ndarray, latest: dict[Any, int],
              spec: AggregateSpec, component: str, consumers: Sequence[str],
              fields: Sequence[str] | None
              ) -> tuple[list[dict[str, Any]], list[Packed], pa.Table | None]:
    """Steps 1-3: ``(late rows' values, rows for the late stream, partials or None)``.

    Args:
        batch: the spout's rows (``fields``' columns, and maybe runtime ``__`` columns).
        streams: each row's input stream.
        latest: each stream's latest timestamp so far (updated).
        spec: the aggregate's windows, timestamp field, lag and late-tuple stream.
        component: the aggregate's id (the late rows' source).
        consumers: the components reading the late-tuple stream.
        fields: the spout's fields (None: the batch's columns).
    """
    # Step 1: late rows, per stream (none in processing time).
    if spec.processing_time:
        late = np.zeros(batch.num_rows, dtype=bool)
    else:
        ts = batch.column(spec.ts_field).cast(pa.int64()).to_numpy(zero_copy_only=False)
        late = late_mask(ts, streams, latest, spec.lag_ms)
    values: list[dict[str, Any]] = []
    rows: list[Packed] = []
    if late.any():
        # Step 2: the late rows' values, to the late stream's consumers.
        values = _values(batch.filter(pa.array(late)), fields)
        rows = [Packed(c, 0, component, spec.late_stream or "", pack([[v]]), None)
                for v in values for c in consumers]
        batch = batch.filter(pa.array(~late))
    # Step 3: the on-time rows' partials.
    if not batch.num_rows:
        return values, rows, None
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    return values, rows, partials(table, spec)


def _values(batch: pa.Table | pa.RecordBatch, fields: Sequence[str] | None
            ) -> list[dict[str, Any]]:
    names = [f for f in (fields or batch.schema.names) if not f.startswith("__")]
    columns = {n: batch.column(n).to_pylist() for n in names if n in batch.schema.names}
    return [{n: col[i] for n, col in columns.items()} for i in range(batch.num_rows)]
