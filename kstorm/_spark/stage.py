"""The Python operators of a plan's stages (run inside Spark tasks, on Arrow batches).

``StageRunner`` is what ``mapInArrow`` calls for a stateless stage; ``StatefulStage`` is the
``transformWithStateInPandas`` processor of a stage whose head is a stateful bolt. Both feed
:class:`kstorm._runtime.executor.StageExecutor` and pack what leaves the stage into envelope rows.
Rows addressed to other components (sinks, dead letters, metrics) pass through unchanged,
so a linear topology computes each stage once per batch.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kstorm._runtime.executor import Outgoing, Packed, StageExecutor
from kstorm._runtime.plan import AckingPlan, Plan
from kstorm._runtime.envelope import (
    bad_input,
    envelope_tuples,
    raw_tuples,
    split_for,
    to_arrow,
)
from kstorm._spark.gc_control import freeze_imports
from kstorm.topology import StormTopology

METRICS_DEST = "__metrics"


@dataclass
class StageContext:
    """Everything a stage's operator needs, shipped to executors with the function."""

    topology: StormTopology
    plan: Plan
    stage_index: int
    topology_name: str
    conf: dict[str, Any]
    carrier: bool            # this stage forwards the upstream's driver rows and raw errors
    on_bolt_error: str = "dead-letter"
    input_columns: list[str] | None = None  # names of the stage's input (TWS loses them)
    input_schema: Any = None  # Arrow schema of the input (TWS hands over pandas: nullable
    #                           ints arrive as floats); used by windowed bolt stages
    acking: AckingPlan | None = None  # at-least-once: anchoring and acker messages


def _policy(ctx: StageContext) -> str:
    return str(ctx.conf.get("kstorm.bad.input.policy", "dead-letter"))


def _batch_id() -> int:
    from pyspark import TaskContext

    tc = TaskContext.get()
    value = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
    return int(value) if value is not None else -1


def _partition() -> int:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.partitionId() if tc is not None else 0


def _run(ctx: StageContext, executor: StageExecutor, batches: Iterator[pa.RecordBatch],
         task_of_row: Any) -> Iterator[pa.RecordBatch]:
    stage = ctx.plan.stages[ctx.stage_index]
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if stage.raw_spout is not None:
            if ctx.carrier:
                dead, skipped = bad_input(batch, stage.raw_spout, _policy(ctx))
                for values in dead:
                    executor.dead_letter_record(stage.raw_spout, values)
                if skipped:
                    executor.counters[f"{stage.raw_spout}.skipped"] += skipped
            tuples = raw_tuples(batch, stage.raw_spout, ctx.topology, task_of_row(batch))
        else:
            mine, others = split_for(batch, stage.head)
            if others.num_rows:
                yield others
            tuples = envelope_tuples(mine, ctx.topology)
        yield from _packed(executor.process_rows(tuples))
    yield from _packed(executor.finish_rows())
    if executor.counters:
        counters = {"stage": ctx.stage_index, **executor.counters}
        yield to_arrow([Outgoing(METRICS_DEST, 0, stage.head, "", pickle.dumps(counters), None)])


def _packed(outgoing: Iterator[Outgoing | Packed], size: int = 8192) -> Iterator[pa.RecordBatch]:
    chunk: list[Outgoing | Packed] = []
    for row in outgoing:
        chunk.append(row)
        if len(chunk) >= size:
            yield to_arrow(chunk)
            chunk = []
    if chunk:
        yield to_arrow(chunk)


class StageRunner:
    """``mapInArrow`` function of a stateless stage."""

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        ctx = self.ctx
        partition = _partition()
        stage = ctx.plan.stages[ctx.stage_index]
        par = ctx.topology.components[stage.head].parallelism
        executor = StageExecutor(ctx.topology, ctx.plan, ctx.stage_index,
                                 topology_name=ctx.topology_name, conf=ctx.conf,
                                 batch_id=_batch_id(), partition=partition,
                                 on_bolt_error=ctx.on_bolt_error, acking=ctx.acking)

        def tasks(batch: pa.RecordBatch) -> list[int]:
            if "__task" in batch.schema.names:
                return batch.column("__task").to_pylist()
            return [partition % par] * batch.num_rows

        yield from _run(ctx, executor, batches, tasks)



class _MapStateKeyValue:
    """:class:`kstorm.KeyValueState` over a TWS ``MapState`` (keys and values pickled).

    Reads are cached for the batch; writes are buffered and flushed once at the end, so a
    key costs at most one state-store round trip to read and one to write per batch.
    """

    _MISSING = object()

    def __init__(self, map_state: Any) -> None:
        self._ms = map_state
        self._cache: dict[Any, Any] = {}
        self._dirty: set[Any] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._cache.get(key, self._MISSING)
        if value is self._MISSING:
            row = self._ms.getValue((pickle.dumps(key, protocol=5),))
            value = pickle.loads(row[0]) if row is not None else None
            self._cache[key] = value
        return default if value is None else value

    def put(self, key: Any, value: Any) -> None:
        self._cache[key] = value
        self._dirty.add(key)

    def delete(self, key: Any) -> Any:
        old = self.get(key)
        self._cache[key] = None
        self._dirty.add(key)
        return old

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        self.flush()
        for k, v in self._ms.iterator():
            yield pickle.loads(k[0]), pickle.loads(v[0])

    def flush(self) -> None:
        for key in self._dirty:
            value = self._cache[key]
            bkey = (pickle.dumps(key, protocol=5),)
            if value is None:
                self._ms.removeKey(bkey)
            else:
                self._ms.updateValue(bkey, (pickle.dumps(value, protocol=5),))
        self._dirty.clear()


def stateful_processor(ctx: StageContext) -> Any:
    """A ``StatefulProcessor`` running ``ctx``'s stage for one task (grouping key) at a time.

    Spark unpickles the processor in a new Python process when it plans a query's first
    batch, only to call ``init`` (which declares the state). So the processor is pickled
    without references to kstorm: ``ctx`` travels as bytes and the stage's code is
    imported on the first ``handleInputRows``, on executors, where kstorm is loaded anyway.
    That process then starts without importing kstorm, pyarrow and the topology's modules
    (~0.3 s on the first batch of every query).
    """
    from pyspark import cloudpickle
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    packed_ctx = cloudpickle.dumps(ctx)

    class StatefulStage(StatefulProcessor):
        def init(self, handle: Any) -> None:
            # TWS state variables must be declared in init(); the map is scoped to the
            # grouping key, i.e. to one task of the stage's stateful head bolt.
            self._kv = handle.getMapState("kv", "k binary", "v binary")
            self._ctx = None

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any
                            ) -> Iterator[Any]:
            import pickle

            from kstorm._spark.stage import stateful_task

            if self._ctx is None:
                self._ctx = pickle.loads(packed_ctx)
            return stateful_task(self._ctx, self._kv, int(key[0]), rows)

        def close(self) -> None:
            pass

    return StatefulStage()


def stateful_task(ctx: StageContext, map_state: Any, task: int, rows: Iterator[Any]
                  ) -> Iterator[Any]:
    """The output of task ``task`` of a stateful stage, for its input ``rows`` (pandas)."""
    freeze_imports()
    states: list[_MapStateKeyValue] = []

    def state_for(component: str, _task: int) -> _MapStateKeyValue:
        kv = _MapStateKeyValue(map_state)
        states.append(kv)
        return kv

    executor = StageExecutor(ctx.topology, ctx.plan, ctx.stage_index,
                             topology_name=ctx.topology_name, conf=ctx.conf,
                             batch_id=_batch_id(), partition=task,
                             state_for=state_for, on_bolt_error=ctx.on_bolt_error,
                             acking=ctx.acking)
    batches = (typed_rows(pdf, ctx) for pdf in rows)
    for out in _run(ctx, executor, batches, lambda b: [task] * b.num_rows):
        yield out.to_pandas()
    for kv in states:
        kv.flush()



def _named(pdf: Any, columns: list[str] | None) -> pa.RecordBatch:
    """TWS hands the grouped rows over with positional names (_0, _1, ...): restore them."""
    if columns is not None and len(columns) == len(pdf.columns):
        pdf.columns = columns
    return pa.RecordBatch.from_pandas(pdf, preserve_index=False)


def typed_rows(pdf: Any, ctx: StageContext) -> pa.RecordBatch:
    """A TWS stage's input rows with their Spark types back.

    TWS hands grouped rows over as pandas with positional names, and pandas turns nullable
    integer columns into floats: the input's Arrow schema restores both.
    """
    schema = ctx.input_schema
    if schema is None or len(schema) != len(pdf.columns):
        return _named(pdf, ctx.input_columns)
    pdf.columns = schema.names
    return pa.RecordBatch.from_pandas(pdf, schema=schema, preserve_index=False)
