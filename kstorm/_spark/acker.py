"""The acker tasks on Spark (at-least-once): one ``transformWithStateInPandas`` operator.

Every stage sends its acker messages as envelope rows addressed to ``__acker`` with
``__task = acker_for(root, n)`` (one row per acker task per stage partition, the messages
combined per root). Those rows travel with the other rows for the driver to the end of the
plan, where this operator groups them by acker task (on keys that spread the tasks over
Spark's partitions: ``compiler.recorded_task_keys``):

1. Rows for the driver (sink tuples, dead letters, metrics) pass through unchanged; a hash
   spreads them over pass-through groups, one in each partition, never touching state.
2. An acker task runs :func:`kstorm.acking.acker.run_acker_batch` over its payloads. Its
   entries (``root -> spout task, ack val, start time, failed``: constant size per tree)
   live in the task's ``MapState``: Spark's state store, versioned by batch id, so a
   replayed batch starts from the entries as they were before its first attempt.
3. Entries older than ``topology.message.timeout.secs`` (the spout side timed them out) are
   dropped; a ``ValueState`` keeps the count and the oldest start, so the scan runs only
   when something can be due.
4. The task's events (trees that ended, trees left pending, counts) go to the driver in
   one ``__acker_events`` row.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kstorm._runtime.envelope import (
    ACKER,
    ACKER_EVENTS,
    ENVELOPE_DDL,
    ENVELOPE_SCHEMA,
    Outgoing,
    to_arrow,
)
from kstorm._runtime.plan import AckingPlan
from kstorm._spark.speedups.gc_control import freeze_imports
from kstorm._spark.stage import task_of_key
from kstorm.acking.acker import run_acker_batch, stale_roots
from kstorm.acking.ledger import AckerEntry
from kstorm.acking.outbox import NO_TASK

KEY_COLUMN = "__acker_key"
_COLUMNS = ENVELOPE_SCHEMA.names


@dataclass
class AckerContext:
    """What the acker operator needs on executors."""

    plan: AckingPlan
    input_columns: list[str]


def keys_at(keys: list[int], index: Column) -> Column:
    """The column ``keys[index]`` (``index`` from 0): a grouping key picked per row."""
    return F.element_at(F.array(*[F.lit(k) for k in keys]), (index + 1).cast("int"))


def add_ackers(output: DataFrame, acking: AckingPlan, keys: list[int],
               pass_through: list[int]) -> DataFrame:
    """``output`` (the rows for the driver) with its ``__acker`` rows turned into events.

    Acker task ``t`` groups on ``keys[t]`` (``key % n`` gives ``t`` back), the rows that pass
    through on the negative ``pass_through`` keys, by a hash of their values: both from
    ``compiler.recorded_task_keys``, which spreads them over Spark's partitions.
    """
    passing = keys_at(pass_through,
                      F.pmod(F.xxhash64(F.col("__vals")), F.lit(len(pass_through))))
    key = F.when(F.col("__dest") == ACKER, keys_at(keys, F.col("__task"))).otherwise(passing)
    frame = output.withColumn(KEY_COLUMN, key.cast("int"))
    ctx = AckerContext(acking, list(frame.columns))
    return frame.groupBy(KEY_COLUMN).transformWithStateInPandas(
        acker_processor(ctx), ENVELOPE_DDL, "Append", "None")


class _MapStore:
    """:class:`kstorm.acking.acker.AckerStore` over the acker task's ``MapState``."""

    def __init__(self, map_state: Any) -> None:
        self._ms = map_state

    def get(self, root_id: int) -> AckerEntry | None:
        row = self._ms.getValue((root_id,))
        return None if row is None else _entry(row)

    def put(self, root_id: int, entry: AckerEntry) -> None:
        task = NO_TASK if entry.spout_task is None else entry.spout_task
        self._ms.updateValue((root_id,), (task, entry.ack_val, entry.created_at_ms, entry.failed))

    def delete(self, root_id: int) -> None:
        self._ms.removeKey((root_id,))

    def items(self) -> Iterator[tuple[int, AckerEntry]]:
        for key, value in self._ms.iterator():
            yield int(key[0]), _entry(value)


def _entry(row: Any) -> AckerEntry:
    task = int(row[0])
    return AckerEntry(None if task == NO_TASK else task, int(row[1]), int(row[2]), bool(row[3]))


def acker_processor(ctx: AckerContext) -> Any:
    """The ``StatefulProcessor`` of the acker tasks (see the module docstring)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    timeout_ms = ctx.plan.timeout_ms
    n_ackers = ctx.plan.n_ackers

    class AckerProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            freeze_imports()
            self._roots = handle.getMapState(
                "roots", "root long", "task int, ack_val long, created long, failed boolean")
            self._meta = handle.getValueState("meta", "pending long, oldest long")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any
                            ) -> Iterator[Any]:
            acker = int(key[0])
            if acker >= 0:
                acker = task_of_key(acker, n_ackers)
            payloads = []
            for pdf in rows:
                if len(pdf.columns) == len(ctx.input_columns):
                    pdf.columns = ctx.input_columns
                if acker < 0:  # Step 1
                    yield pdf[_COLUMNS]
                    continue
                mine = pdf["__dest"] == ACKER
                payloads.extend(pickle.loads(v) for v in pdf.loc[mine, "__vals"])
                if not mine.all():
                    yield pdf.loc[~mine, _COLUMNS]
            if acker < 0 or not payloads:
                return
            # Step 2
            store = _MapStore(self._roots)
            result = run_acker_batch(payloads, store, report_acks=ctx.plan.report_acks)
            now = max((int(p["now"]) for p in payloads if p.get("now") is not None), default=0)
            meta = self._meta.get() if self._meta.exists() else None
            pending = (int(meta[0]) if meta else 0) + result.added - result.removed
            oldest = int(meta[1]) if meta and int(meta[0]) > 0 else None
            if result.added:
                oldest = now if oldest is None else min(oldest, now)
            # Step 3
            expired = 0
            if pending > 0 and oldest is not None and now and oldest <= now - timeout_ms:
                entries = list(store.items())
                stale = set(stale_roots(entries, now, timeout_ms))
                for root in stale:
                    store.delete(root)
                expired = len(stale)
                pending = len(entries) - expired
                left = [e.created_at_ms for r, e in entries if r not in stale]
                oldest = min(left) if left else None
            if pending > 0:
                self._meta.update((pending, oldest if oldest is not None else now))
            else:
                self._meta.clear()
            # Step 4
            payload = {**result.to_payload(), "entries": pending, "expired": expired}
            row = Outgoing(ACKER_EVENTS, acker, ACKER, "",
                           pickle.dumps(payload, protocol=5), None)
            yield to_arrow([row]).to_pandas()

        def close(self) -> None:
            pass

    return AckerProcessor()
