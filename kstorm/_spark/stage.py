"""The Python operators of a plan's stages (run inside Spark tasks, on Arrow batches).

``StageRunner`` is what ``mapInArrow`` calls for a stateless stage; the processor of
:func:`stateful_processor` is the ``transformWithStateInPandas`` operator of a stage whose
head is a stateful bolt. Both feed :class:`kstorm._runtime.executor.StageExecutor` and pack
what leaves the stage into envelope rows. Every stage reads its input through
:func:`arrivals`: rows addressed to other components (sinks, dead letters, metrics) pass
through unchanged, so a linear topology computes each stage once per batch, and the one
stage that carries a spout's raw rows applies ``kstorm.bad.input.policy`` to its undecodable
records.
"""

from __future__ import annotations

import pickle
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kstorm._runtime.deadletter import given_up_letter
from kstorm._runtime.envelope import (
    DEAD_LETTER,
    ERROR_COLUMN,
    KAFKA_ID_COLUMNS,
    METRICS,
    RAW_COLUMN,
    STREAM_COLUMN,
    TASK_KEY_COLUMN,
    VALS_COLUMN,
    Outgoing,
    Packed,
    bad_input,
    envelope_tuples,
    raw_tuples,
    split_for,
    to_arrow,
    unpack_values,
)
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import AckingPlan, Plan
from kstorm._runtime.transaction import ATTEMPT_PROPERTY, DEAD_LETTER_PROPERTY
from kstorm._runtime.window_task import interleaved
from kstorm._spark.speedups.affinity import (
    AFFINITY,
    Request,
    broadcast_release,
    connect,
    forward,
    forwarded_task,
)
from kstorm._spark.speedups.gc_control import freeze_imports
from kstorm._spark.tws_map import BinaryMap
from kstorm.config import TopologyConfig
from kstorm.grouping import GroupingKind
from kstorm.state import encode_key
from kstorm.state.rescale import TAGGED, new_group, split_value, tag_value
from kstorm.topology import StormTopology
from kstorm.transactional.attempt import TransactionAttempt
from kstorm.tuple import Tuple


@dataclass
class StageContext:
    """Everything a stage's operator needs, shipped to executors with the function."""

    topology: StormTopology
    plan: Plan
    stage_index: int
    topology_name: str
    settings: TopologyConfig
    conf: dict[str, Any]     # the user's configuration, as bolts' prepare() gets it
    carrier: bool            # this stage forwards the upstream's driver rows and raw errors
    input_columns: list[str] | None = None  # names of the stage's input (TWS loses them)
    input_schema: Any = None  # Arrow schema of the input (TWS hands over pandas: nullable
    #                           ints arrive as floats)
    acking: AckingPlan | None = None  # at-least-once: anchoring and acker messages
    txid_base: int = 0       # txid = txid_base + batch id (batch bolts' TransactionAttempt)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # this submit's stage

    @property
    def stage(self) -> Any:
        """The plan's stage this context runs."""
        return self.plan.stages[self.stage_index]

    def executor(self, partition: int, state_for: Callable[..., Any] | None = None
                 ) -> StageExecutor:
        """A :class:`StageExecutor` for one task (``partition``) of this stage's batch."""
        batch = batch_id()
        attempt = TransactionAttempt(self.txid_base + batch, int(_local(ATTEMPT_PROPERTY) or 0))
        return StageExecutor(self.topology, self.plan, self.stage_index,
                             topology_name=self.topology_name, conf=self.conf,
                             settings=self.settings, batch_id=batch,
                             partition=partition, state_for=state_for, acking=self.acking,
                             attempt=attempt, instances=INSTANCES.of(self.run_id))


class BoltInstances:
    """The bolt instances of this Python worker process, per stage run (``run_id``).

    A stage's bolt instances stay for the next micro-batch that runs the same task in this
    process (``prepare`` once per task and process). A stateless stage's partitions come
    back to the process that owns them (:class:`StageRunner`); a stateful stage's task may
    run in another worker process, which prepares its own instance (counted as
    ``<component>.prepared`` in progress). Instances of the stages run least recently are let
    go (``cleanup()``) once more than ``keep`` stages are cached, and at process exit.
    """

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._runs: dict[str, dict[tuple[str, int], Any]] = {}
        self._exit_hook = False
        self._lock = threading.Lock()  # partitions run for other workers run in threads

    def of(self, run_id: str) -> dict[tuple[str, int], Any]:
        """The instances of one stage run (created on first use, most recent last)."""
        with self._lock:
            found = self._runs.pop(run_id, None)
            if found is None:
                found = {}
                AFFINITY.serving()  # reachable when the topology stops (release_instances)
                if not self._exit_hook:
                    import atexit

                    atexit.register(self.clear)
                    self._exit_hook = True
            self._runs[run_id] = found
            gone = []
            while len(self._runs) > self.keep:
                old = next(iter(self._runs))
                gone.append((old, self._runs.pop(old)))
        for old, instances in gone:
            AFFINITY.release(f"{old}.")
            _STAGE_LOCKS.pop(old, None)
            self._release(instances)
        return found

    def release(self, prefix: str) -> None:
        """Let the instances of the stage runs whose id starts with ``prefix`` go."""
        with self._lock:
            gone = [self._runs.pop(r) for r in [r for r in self._runs if r.startswith(prefix)]]
        AFFINITY.release(prefix)
        for run in [r for r in _STAGE_LOCKS if r.startswith(prefix)]:
            _STAGE_LOCKS.pop(run, None)
        for instances in gone:
            self._release(instances)

    def clear(self) -> None:
        """Let every instance go (``cleanup()``)."""
        AFFINITY.close()
        while self._runs:
            self._release(self._runs.pop(next(iter(self._runs))))

    @staticmethod
    def _release(instances: dict[tuple[str, int], Any]) -> None:
        for bolt, *_ in instances.values():
            cleanup = getattr(bolt, "cleanup", None)
            if cleanup is not None:
                try:
                    cleanup()
                except Exception:  # noqa: BLE001, S110 - a bolt's cleanup must not stop others
                    pass


INSTANCES = BoltInstances()
AFFINITY.on_release = INSTANCES.release


class _ReleaseRun:
    """``mapInArrow`` function of :func:`release_instances`: tells this machine's workers."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        INSTANCES.release(self.prefix)  # this worker, whether it serves or not
        broadcast_release(self.prefix)
        yield from ()


def release_instances(spark: Any, run: str) -> None:
    """Let a stopped topology's bolt instances go in the Python workers (``cleanup()``).

    One small job reaches the workers of the machines its tasks land on (each asks every
    worker serving on its machine); with a local master that is all of them.
    """
    n = max(1, spark.sparkContext.defaultParallelism if not str(
        spark.sparkContext.master).startswith("local") else 1)
    spark.sparkContext.setJobDescription(f"kstorm: let run {run}'s bolt instances go")
    try:
        spark.range(n, numPartitions=n).mapInArrow(_ReleaseRun(f"{run}."), "id long").collect()
    finally:
        spark.sparkContext.setJobDescription(None)


def _local(name: str) -> str | None:
    """A Spark local property of the current task (set by the driver for the job)."""
    forwarded = forwarded_task()
    if forwarded is not None:
        return forwarded[1].get(name)
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.getLocalProperty(name) if tc is not None else None


def batch_id() -> int:
    """The micro-batch the current Spark task belongs to (-1 outside a streaming task)."""
    value = _local("streaming.sql.batchId")
    return int(value) if value is not None else -1


def dead_lettering() -> str | None:
    """Why every spout tuple of this batch is a dead letter (its transaction gave up), if so."""
    return _local(DEAD_LETTER_PROPERTY)


def _partition() -> int:
    forwarded = forwarded_task()
    if forwarded is not None:
        return forwarded[0]
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.partitionId() if tc is not None else 0


# -- the one input loop -----------------------------------------------------------------------


def arrivals(ctx: StageContext, batches: Iterator[pa.RecordBatch],
             dead_letter: Callable[[str, list[Any]], None],
             skipped: Callable[[str, int], None]
             ) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch | None]]:
    """``(rows for the stage, rows passing through)`` for each non-empty input batch.

    A stage reads either a spout's raw rows or envelope rows. Raw rows that failed to
    deserialize are dropped here; the carrier stage (exactly one per spout) first applies
    ``kstorm.bad.input.policy`` to them (``dead_letter(spout, values)`` /
    ``skipped(spout, n)``; ``fail`` raises). Envelope rows addressed to other components
    pass through.
    """
    stage = ctx.stage
    spout = stage.raw_spout
    given_up = dead_lettering()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if given_up is not None:  # the transaction failed for good: its input is dead letters
            if spout is not None:
                if ctx.carrier:
                    for values in batch_dead_letters(batch, spout, given_up):
                        dead_letter(spout, values)
                continue
            # Spark may reuse the spout stage's shuffle output from the failed attempt
            # instead of running it again: the spout's tuples then arrive here
            mine, others = split_for(batch, stage.head)
            for src, values in spout_dead_letters(mine, ctx.topology, given_up):
                dead_letter(src, values)
            letters = others.filter(pc.equal(others.column("__dest"), DEAD_LETTER))
            yield mine.slice(0, 0), (letters if letters.num_rows else None)
            continue
        if spout is None:
            mine, others = split_for(batch, stage.head)
            yield mine, (others if others.num_rows else None)
            continue
        if ERROR_COLUMN in batch.schema.names:
            bad = pc.is_valid(batch.column(ERROR_COLUMN))
            if pc.any(bad).as_py():
                if ctx.carrier:
                    records, n_skipped = bad_input(batch, spout, ctx.settings.bad_input_policy)
                    for values in records:
                        dead_letter(spout, values)
                    if n_skipped:
                        skipped(spout, n_skipped)
                batch = batch.filter(pc.invert(bad))
        yield batch, None


def batch_dead_letters(batch: pa.RecordBatch, spout: str, reason: str) -> Iterator[list[Any]]:
    """Dead-letter values for every row of a spout's batch (:data:`DEAD_LETTER_FIELDS`)."""
    names = batch.schema.names
    kafka = all(c in names for c in KAFKA_ID_COLUMNS)
    if VALS_COLUMN in names:
        for stream, vals in zip(batch.column(STREAM_COLUMN).to_pylist(),
                                batch.column(VALS_COLUMN).to_pylist(), strict=True):
            yield given_up_letter(spout, stream, reason, pickle.loads(vals))
        return
    rows = batch.to_pylist()
    raws = batch.column(RAW_COLUMN).to_pylist() if RAW_COLUMN in names else [None] * len(rows)
    for row, raw in zip(rows, raws, strict=True):
        values = {k: v for k, v in row.items() if not k.startswith("__")}
        where = [row.get(c) if kafka else None for c in KAFKA_ID_COLUMNS]
        yield given_up_letter(spout, "default", reason, values, where, raw)


def spout_dead_letters(batch: pa.RecordBatch, topology: StormTopology, reason: str
                       ) -> Iterator[tuple[str, list[Any]]]:
    """``(spout, dead-letter values)`` for each spout tuple among envelope rows."""
    for src, stream, vals in zip(batch.column("__src").to_pylist(),
                                 batch.column(STREAM_COLUMN).to_pylist(),
                                 batch.column(VALS_COLUMN).to_pylist(), strict=True):
        spec = topology.components[src]
        if not spec.is_spout:
            continue
        fields = list(spec.streams[stream])
        where = [fields.index(f) if f in fields else None for f in KAFKA_ID_COLUMNS]
        for values in unpack_values(vals):
            yield src, given_up_letter(src, stream, reason, values,
                                       [None if i is None else values[i] for i in where])


def tuples_of(ctx: StageContext, batch: pa.RecordBatch, tasks: list[int] | None = None
              ) -> Iterator[tuple[int, Tuple]]:
    """``(task, Tuple)`` for the rows :func:`arrivals` gave the stage."""
    spout = ctx.stage.raw_spout
    if spout is None:
        return envelope_tuples(batch, ctx.topology)
    return raw_tuples(batch, spout, ctx.topology, tasks or [0] * batch.num_rows)


def _run(ctx: StageContext, executor: StageExecutor, batches: Iterator[pa.RecordBatch],
         task_of_row: Callable[[pa.RecordBatch], list[int]]) -> Iterator[pa.RecordBatch]:
    on_skip = _skip_counter(executor)
    given_up = dead_lettering() is not None  # no user code runs: the input is dead letters
    held: list[tuple[int, Tuple]] | None = [] if ctx.stage.ordered else None
    for mine, others in arrivals(ctx, batches, executor.dead_letter_record, on_skip):
        if others is not None:
            yield others
        if given_up:
            continue
        tasks = task_of_row(mine) if ctx.stage.raw_spout is not None else None
        if held is not None:  # an ordered stage: all of its input, then interleaved
            held.extend(tuples_of(ctx, mine, tasks))
            continue
        yield from packed(executor.process_rows(tuples_of(ctx, mine, tasks)))
    if held:
        yield from packed(executor.process_rows(interleaved(held)))
    yield from packed(executor.pending_rows() if given_up else executor.finish_rows())
    metrics = metrics_row(ctx, executor.counters)
    if metrics is not None:
        yield to_arrow([metrics])


def _skip_counter(executor: StageExecutor) -> Callable[[str, int], None]:
    def count(spout: str, n: int) -> None:
        executor.counters[f"{spout}.skipped"] += n
    return count


def metrics_row(ctx: StageContext, counters: dict[str, int]) -> Outgoing | None:
    """The stage task's counters for the driver's progress (None when there are none)."""
    found = {k: v for k, v in counters.items() if v}
    if not found:
        return None
    return Outgoing(METRICS, 0, ctx.stage.head, "",
                    pickle.dumps({"stage": ctx.stage_index, **found}), None)


def packed(outgoing: Iterator[Outgoing | Packed], size: int = 8192
           ) -> Iterator[pa.RecordBatch]:
    """Envelope rows as Arrow batches of at most ``size`` rows."""
    chunk: list[Outgoing | Packed] = []
    for row in outgoing:
        chunk.append(row)
        if len(chunk) >= size:
            yield to_arrow(chunk)
            chunk = []
    if chunk:
        yield to_arrow(chunk)


_STAGE_LOCKS: dict[str, threading.Lock] = {}


def _stage_lock(run_id: str) -> threading.Lock:
    """The lock of one stage run in this process (its bolt instances are shared)."""
    lock = _STAGE_LOCKS.get(run_id)
    if lock is None:
        lock = _STAGE_LOCKS.setdefault(run_id, threading.Lock())
    return lock


#: Spark local properties a stage reads (``_local``); sent along with a forwarded partition.
TASK_PROPERTIES = ("streaming.sql.batchId", ATTEMPT_PROPERTY, DEAD_LETTER_PROPERTY)


class StageRunner:
    """``mapInArrow`` function of a stateless stage.

    Each partition of the stage runs in the Python worker that first ran it, on the bolt
    instances that worker prepared, while that worker lives
    (``kstorm/_spark/speedups/affinity.py``): the worker Spark gives the partition to
    forwards it there.
    """

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imports()
        partition = _partition()
        key = f"{self.ctx.run_id}.{self.ctx.stage_index}.{partition}"
        address = AFFINITY.owner(key, self.run)
        if address:  # another worker owns it
            conn = connect(address)
            if conn is not None:
                request = Request(key, partition, {p: _local(p) for p in TASK_PROPERTIES})
                yield from forward(conn, request, batches)
                return
            address = AFFINITY.owner(key, self.run)  # the owner died: take its place
        if address is None:
            yield from AFFINITY.run_owned(key, batches)
        else:  # affinity off here, or an owner that does not answer: as without affinity
            yield from self.run(batches)

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Run one partition of the stage in this process, one partition at a time.

        A process may run partitions of the stage in two threads (its own Spark task and one
        forwarded by another worker); their tuples can go to the same bolt tasks, and a bolt
        instance runs one tuple at a time, as a Storm executor does.
        """
        with _stage_lock(self.ctx.run_id):
            yield from self._run_partition(batches)

    def _run_partition(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = self.ctx
        partition = _partition()
        par = ctx.topology.components[ctx.stage.head].parallelism
        executor = ctx.executor(partition)
        sent = [partition]  # round robin over the head's tasks, from this partition's start
        kind = raw_grouping_kind(ctx)

        def tasks(batch: pa.RecordBatch) -> list[int]:
            if "__task" in batch.schema.names:
                return batch.column("__task").to_pylist()
            if par == 1 or kind is GroupingKind.GLOBAL:
                return [0] * batch.num_rows
            start, sent[0] = sent[0], sent[0] + batch.num_rows
            return [(start + i) % par for i in range(batch.num_rows)]

        yield from _run(ctx, executor, batches, tasks)


def raw_grouping_kind(ctx: StageContext) -> GroupingKind | None:
    """How the stage's head subscribes to the spout whose raw rows the stage reads."""
    spout = ctx.stage.raw_spout
    if spout is None:
        return None
    for grouping in ctx.topology.components[ctx.stage.head].inputs:
        if grouping.component == spout:
            return grouping.kind
    return None


class MapStateKeyValue:
    """:class:`kstorm.KeyValueState` over a TWS ``MapState`` (canonical keys, pickled values).

    Reads are cached for the batch; writes are buffered and flushed once at the end, so a
    key costs at most one state-store round trip to read and one to write per batch.

    A batch that reads many keys reads them by scanning the map instead: after
    :attr:`SCAN_AFTER` point reads, a read that misses the cache goes on through one
    streamed pass over the task's map (many entries per round trip, values unpickled only
    when asked for), at most :attr:`SCAN_RATIO` entries per point read so far, and falls
    back to a point read when the budget is spent. Once the pass reaches the end, a key it
    did not see is absent without asking. A small map (a word count's vocabulary) is then
    read in a few round trips; a huge one costs at most a bounded share more than point
    reads.
    """

    _MISSING = object()  # not read yet
    _ABSENT = object()   # read (or deleted): not in the store
    SCAN_AFTER = 16      # point reads in a batch before the map is scanned instead
    SCAN_RATIO = 8       # entries the scan may read per point read made so far

    def __init__(self, map_state: Any) -> None:
        self._ms = BinaryMap(map_state)
        #: record each written key's key group in its value (the executor sets it for a
        #: bolt whose inputs are all fields groupings from bolts: ``kstorm/state/rescale.py``)
        self.tagging = False
        #: the key group (routing hash) of the tuple being executed; None outside execute
        self.key_group: int | None = None
        self._groups: dict[Any, bytes] = {}   # key -> its key group, as read or written
        self._cache: dict[Any, Any] = {}
        self._dirty: set[Any] = set()
        self._reads = 0                       # point reads and scan lookups this batch
        self._scan: Iterator[Any] | None = None
        self._scanned: dict[bytes, bytes] = {}  # encoded key -> pickled value, from the scan
        self._scan_len = 0                    # entries the scan has read
        self._scan_done = False               # it reached the end: _scanned is the map

    def _value(self, key: Any) -> Any:
        value = self._cache.get(key, self._MISSING)
        if value is self._MISSING:
            value = self._cache[key] = self._stored(key)
        return value

    def _stored(self, key: Any) -> Any:
        """The store's value of ``key`` (``_ABSENT``: none); its key group is noted."""
        bkey = encode_key(key)
        blob = self._scanned.get(bkey)
        if blob is None and not self._scan_done:
            self._reads += 1
            if self._reads > self.SCAN_AFTER:
                blob = self._scan_for(bkey)
            if blob is None and not self._scan_done:
                blob = self._ms.get(bkey)
        if blob is None:
            return self._ABSENT
        if blob[:1] == TAGGED[:1]:
            group, blob = split_value(blob)
            if group is not None:
                self._groups.setdefault(key, group)
        return pickle.loads(blob)

    def _scan_for(self, bkey: bytes) -> bytes | None:
        """Read on through the map until ``bkey``, its end, or the scan's budget."""
        if self._scan is None:
            self._scan = self._ms.items()
        budget = self.SCAN_RATIO * self._reads - self._scan_len
        scanned = self._scanned
        for k, v in self._scan:
            self._scan_len += 1
            if k == bkey:
                return v
            scanned[k] = v
            budget -= 1
            if budget <= 0:
                return None
        self._scan_done = True
        return None

    def get(self, key: Any, default: Any = None) -> Any:
        value = self._cache.get(key, self._MISSING)  # _value, inline: once per tuple
        if value is self._MISSING:
            value = self._cache[key] = self._stored(key)
        return default if value is self._ABSENT else value

    def put(self, key: Any, value: Any) -> None:
        self._cache[key] = value
        self._dirty.add(key)
        if self.tagging:
            self._groups[key] = new_group(self._groups.get(key), self.key_group)

    def delete(self, key: Any) -> Any:
        old = self._value(key)
        self._cache[key] = self._ABSENT
        self._dirty.add(key)
        return None if old is self._ABSENT else old

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        self.flush()
        for k, v in self._ms.items():
            yield pickle.loads(k), pickle.loads(split_value(v)[1])

    def flush(self) -> None:
        """Write the batch's changes; a scan in progress is dropped (the cache stays right)."""
        updates = []
        for key in self._dirty:
            value = self._cache[key]
            if value is self._ABSENT:
                self._ms.remove(encode_key(key))
            else:
                blob = pickle.dumps(value, protocol=5)
                group = self._groups.get(key) if self.tagging else None
                updates.append((encode_key(key), blob if group is None
                                else tag_value(group, blob)))
        self._ms.update_all(updates)
        self._dirty.clear()
        self._scan, self._scanned, self._scan_len, self._scan_done = None, {}, 0, False


def task_of_key(key: Any, n: int) -> int:
    """The task of a stateful stage's grouping key (``compiler.tws_task_keys``).

    A key is ``t + n * j``; a checkpoint from before keys were recorded groups on ``t`` itself.
    """
    return int(key) % n


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

            from kstorm._spark.stage import stateful_task, task_of_key

            if self._ctx is None:
                self._ctx = pickle.loads(packed_ctx)
            ctx = self._ctx
            n = ctx.topology.components[ctx.stage.head].parallelism
            return stateful_task(ctx, self._kv, task_of_key(key[0], n), rows)

        def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
            # a rescaling start's first batch: the task's share of the moved state
            # (``kstorm/_spark/state_rescale.py``), stored values as they were
            from kstorm._spark.tws_map import BinaryMap

            BinaryMap(self._kv).update_all(
                (bytes(k), bytes(v)) for k, v in zip(initialState["k"], initialState["v"],
                                                     strict=True))

        def close(self) -> None:
            pass

    return StatefulStage()


_PROVIDERS: dict[Any, Any] = {}


def _provider(settings: TopologyConfig) -> Any:
    """The configured state provider's instance in this process (one per configuration)."""
    key = (settings.state_provider, repr(settings.state_provider_config))
    if key not in _PROVIDERS:
        _PROVIDERS[key] = settings.state_provider_instance()
    return _PROVIDERS[key]


def stateful_task(ctx: StageContext, map_state: Any, task: int, rows: Iterator[Any]
                  ) -> Iterator[Any]:
    """The output of task ``task`` of a stateful stage, for its input ``rows`` (pandas).

    With ``topology.state.provider = spark`` the task's ``KeyValueState`` is the TWS map
    state (Spark commits it with the task); with another provider the task reads the
    provider's committed state and prepares its changes under the batch's txid when its
    tuples are done; the driver commits them after the batch's sinks (seed 000,
    ``kstorm/_runtime/state_book.py``).
    """
    freeze_imports()
    states: list[tuple[str, Any]] = []
    external = ctx.settings.state_provider != "spark"

    def state_for(component: str, _task: int) -> Any:
        if external:
            from kstorm.component import TopologyContext
            from kstorm.state import state_namespace

            spec = ctx.topology.components[component]
            state = _provider(ctx.settings).new_state(
                state_namespace(ctx.topology_name, component, task),
                {**ctx.conf, **spec.conf},
                TopologyContext(ctx.topology_name, component, task, spec.parallelism))
        else:
            state = MapStateKeyValue(map_state)
        states.append((component, state))
        return state

    executor = ctx.executor(task, state_for)
    batches = (typed_rows(pdf, ctx) for pdf in rows)
    for out in _run(ctx, executor, batches, lambda b: [task] * b.num_rows):
        yield out.to_pandas()
    txid = executor.attempt.transaction_id
    for component, state in states:
        bolt = executor.bolt(component, task)
        bolt.pre_prepare(txid)
        if external:
            state.prepare_commit(txid)
        else:
            state.flush()
            bolt.pre_commit(txid)  # Spark commits the state store version with the task


def typed_rows(pdf: Any, ctx: StageContext) -> pa.RecordBatch:
    """A TWS stage's input rows with their names and Spark types back.

    TWS hands grouped rows over as pandas with positional names (_0, _1, ...), and pandas
    turns nullable integer columns into floats: the input's Arrow schema restores both.
    """
    schema = ctx.input_schema
    if schema is None or len(schema) != len(pdf.columns):
        if ctx.input_columns is not None and len(ctx.input_columns) == len(pdf.columns):
            pdf.columns = ctx.input_columns
        batch = pa.RecordBatch.from_pandas(pdf, preserve_index=False)
    else:
        pdf.columns = schema.names
        batch = pa.RecordBatch.from_pandas(pdf, schema=schema, preserve_index=False)
    if TASK_KEY_COLUMN in batch.schema.names:  # the grouping key: not a column rows carry on
        batch = batch.drop_columns([TASK_KEY_COLUMN])
    return batch
