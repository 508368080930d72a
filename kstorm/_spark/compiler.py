"""Turn a :class:`kstorm._runtime.plan.Plan` into Spark streaming DataFrames.

Per stage (see ``kstorm/_runtime/plan.py`` for how bolts are grouped into stages):

1. Its input: the raw rows of one spout, or the union of its upstream stages' envelope
   rows. Of each upstream, the *carrier* consumer (the lowest stage index) also takes the
   rows addressed to nobody downstream (sinks, dead letters, metrics) and passes them on,
   so a linear topology computes every stage exactly once per batch.
2. Its partitioning: fields -> ``__task = pmod(hash, n)`` and a hash partitioning that
   gives each task its own partition (:func:`task_partition_keys`); global -> one
   partition; all -> one row per task; shuffle -> unchanged.
   A bolt with tick tuples also reads its rows of the tick source (``tick_source.py``).
3. Its operator: ``mapInArrow`` (stateless) or ``groupBy(task key)
   .transformWithStateInPandas`` (stateful or windowed head bolt; the task keys spread
   the tasks over Spark's partitions: :func:`tws_task_keys`).

The union of the leaf stages is what the commit phase (``foreachBatch``) receives; at
least once, it first goes through the acker tasks (``kstorm/_spark/acker.py``), which turn
the stages' ``__acker`` rows into events for the spouts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from kstorm._ids import ACKER_COMPONENT
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.envelope import (
    ATTEMPT_COLUMN,
    ENVELOPE_DDL,
    NOW_COLUMN,
    PLANNED_COLUMN,
    TASK_KEY_COLUMN,
)
from kstorm._runtime.plan import AckingPlan, PartitionKind, Plan, Stage, source_kind
from kstorm._spark.acker import add_ackers, keys_at
from kstorm._spark.offset_log import next_batch_id
from kstorm._spark.sources import read_spout
from kstorm._spark.stage import StageContext, StageRunner, stateful_processor, task_of_key
from kstorm._spark.tick_source import read_ticks
from kstorm._spark.windowed import WindowStageRunner
from kstorm._spark.windowed_bolt import windowed_processor, windowed_spec
from kstorm.config import TopologyConfig
from kstorm.errors import StateError, TopologyError
from kstorm.topology import StormTopology


@dataclass
class CompiledQuery:
    """The DataFrames of a compiled topology."""

    output: DataFrame                # union of leaf stages: envelope rows for the driver
    stage_frames: dict[int, DataFrame]
    run: str = ""                    # this submit's id: its stages' run ids start with it


def compile_query(spark: SparkSession, topology: StormTopology, plan: Plan, name: str,
                  conf: dict[str, Any], settings: TopologyConfig, layout: CheckpointLayout,
                  window_seeds: dict[str, bytes] | None = None,
                  acking: AckingPlan | None = None, txid_base: int = 0,
                  initial_state: dict[str, list[dict[bytes, bytes]]] | None = None
                  ) -> CompiledQuery:
    """Build the streaming DataFrames of ``plan``.

    ``conf`` is the user's configuration (bolts' ``prepare`` gets it), ``settings`` the
    validated one. ``layout`` is kstorm's part of the checkpoint; ``window_seeds`` are the
    windowed bolt snapshots a sink stored, used after a lost checkpoint. ``acking``
    (at-least-once): the tracked spouts; their sources read the commit phase's books and
    the ackers run at the end of the plan. ``txid_base``: txid = base + batch id.
    ``initial_state``: a rescaling start's stateful bolts' state, per bolt and new task
    (encoded key -> stored value), which their first batch begins with
    (``kstorm/_spark/state_rescale.py``).
    """
    run = uuid.uuid4().hex  # the stages' run ids: "<run>.<stage>" (bolt instances, affinity)
    task_keys = recorded_task_keys(layout, plan, topology,
                                   int(spark.conf.get("spark.sql.shuffle.partitions") or 1),
                                   spark_state=settings.state_provider == "spark",
                                   ackers=acking.n_ackers if acking is not None else 0)
    raw: dict[int, DataFrame] = {}
    env: dict[int, DataFrame] = {}
    readers = _envelope_readers(plan, topology)
    heads = {s.head for s in plan.stages if not s.is_source}
    periods = {s.head: s.tick_secs for s in plan.stages if s.tick_secs is not None}
    ticks = read_ticks(spark, topology, periods) if periods else None  # one source for all

    for stage in plan.stages:
        if stage.is_source and stage.envelope_source:
            # a free-form spout: its source stage runs in the read of its logged batches
            ctx = StageContext(topology, plan, stage.index, name, settings, conf, True,
                               acking=acking, txid_base=txid_base,
                               run_id=f"{run}.{stage.index}")
            env[stage.index] = read_spout(spark, topology.components[stage.head], settings,
                                          fused=StageRunner(ctx), topology_name=name,
                                          conf=conf, layout=layout, txid_base=txid_base,
                                          seeds=window_seeds or {},
                                          spout_task=(acking.spout_tasks.get(stage.head)
                                                      if acking is not None else None))
            continue
        if stage.is_source:
            window = next((s for s in plan.stages
                           if s.native_window and s.raw_spout == stage.head), None)
            pmax_file = str(layout.clocks_path(window.head)) if window else None
            if window is not None and _fusable(stage, window, topology):
                # the window's partials are computed in the spout's read tasks
                ctx = StageContext(topology, plan, window.index, name, settings, conf, True,
                               acking=None, txid_base=txid_base,
                               run_id=f"{run}.{window.index}")
                spec = topology.components[window.head].component.spec()
                env[window.index] = read_spout(
                    spark, topology.components[stage.head], settings, pmax_file,
                    fused=WindowStageRunner(ctx, spec))
                continue
            raw[stage.index] = read_spout(spark, topology.components[stage.head], settings,
                                          pmax_file, acking=_source_acking(
                                              topology.components[stage.head], acking,
                                              settings, layout))
            if readers[stage.index] or _feeds_sink(stage, topology, plan):
                ctx = StageContext(topology, plan, stage.index, name, settings, conf, True,
                               acking=acking, txid_base=txid_base,
                               run_id=f"{run}.{stage.index}")
                env[stage.index] = raw[stage.index].mapInArrow(StageRunner(ctx), ENVELOPE_DDL)
            continue
        carrier = _is_raw_carrier(stage, plan, readers, topology)
        ctx = StageContext(topology, plan, stage.index, name, settings, conf, carrier,
                               acking=acking, txid_base=txid_base,
                               run_id=f"{run}.{stage.index}")
        if stage.native_window and stage.index in env:
            continue  # fused into its spout's read
        if stage.native_window:
            # offset order within each partition decides lateness: no exchange before it
            spec = topology.components[stage.head].component.spec()
            env[stage.index] = raw[stage.inputs[0][1]].mapInArrow(
                WindowStageRunner(ctx, spec), ENVELOPE_DDL)
            continue
        if stage.raw_spout is not None:
            frame = _partition_raw(raw[stage.inputs[0][1]], stage, topology)
        else:
            frame = _union_inputs(stage, env, readers, heads)
            if ticks is not None and stage.tick_secs is not None:
                frame = frame.unionByName(ticks.where(F.col("__dest") == stage.head))
            frame = _partition_envelope(frame, stage, topology)
        if stage.windowed:
            frame = frame.withColumn(NOW_COLUMN, F.unix_millis(F.current_timestamp()))
            frame, key = _keyed(frame, task_keys[stage.head])
            ctx.input_columns = list(frame.columns)
            ctx.input_schema = to_arrow_schema(frame.schema)
            spec = windowed_spec(topology, plan, stage, settings, window_seeds or {})
            out = frame.groupBy(key).transformWithStateInPandas(
                windowed_processor(ctx, spec), ENVELOPE_DDL, "Append", spec.time_mode)
        elif stage.stateful:
            frame, key = _keyed(frame, task_keys[stage.head])
            ctx.input_columns = [c for c in frame.columns]
            ctx.input_schema = to_arrow_schema(frame.schema)
            seed = None
            if initial_state is not None and stage.head in initial_state:
                seed = _initial_state(spark, frame, key, task_keys[stage.head],
                                      initial_state[stage.head])
            out = frame.groupBy(key).transformWithStateInPandas(
                stateful_processor(ctx), ENVELOPE_DDL, "Append", "None", initialState=seed)
        else:
            out = frame.mapInArrow(StageRunner(ctx), ENVELOPE_DDL)
        env[stage.index] = out

    leaves = [env[i] for i in sorted(env) if not readers.get(i)]
    if not leaves:
        msg = "the topology has no bolt or sink: nothing consumes its spouts"
        raise TopologyError(msg)
    output = leaves[0]
    for frame in leaves[1:]:
        output = output.unionByName(frame)
    if acking is not None:
        output = add_ackers(output, acking, task_keys[ACKER_COMPONENT],
                            task_keys[PASS_THROUGH])
    return CompiledQuery(output, env, run)


def _initial_state(spark: SparkSession, frame: DataFrame, key: str, keys: list[int],
                   tasks: list[dict[bytes, bytes]]) -> Any:
    """A stateful stage's TWS ``initialState``: each task's entries under its grouping key."""
    kind = frame.schema[key].dataType.simpleString()
    rows = [(keys[t], k, v) for t, entries in enumerate(tasks) for k, v in entries.items()]
    return spark.createDataFrame(rows, f"`{key}` {kind}, k binary, v binary").groupBy(key)


def _source_acking(spec: Any, acking: AckingPlan | None, settings: TopologyConfig,
                   layout: CheckpointLayout) -> dict[str, Any] | None:
    if acking is None or spec.id not in acking.spout_tasks:
        return None
    return {"book": str(layout.book_path(spec.id)),
            "max_pending": settings.spout_max_pending(spec.conf)}


def _fusable(source: Stage, window: Stage, topology: StormTopology) -> bool:
    """Whether a windowed aggregate can run inside its spout's read tasks (its only reader)."""
    spout = topology.components[source.head].component
    return source_kind(spout) == "kafka" and [
        c for c, _ in topology.consumers(source.head)] == [window.head]


def _feeds_sink(stage: Stage, topology: StormTopology, plan: Plan) -> bool:
    """Whether a consumer of ``stage``'s component runs on the driver (sink or committer)."""
    return any(plan.on_driver(c) for c, _ in topology.consumers(stage.head))


def _envelope_readers(plan: Plan, topology: StormTopology) -> dict[int, list[int]]:
    """For each stage, the stages that read its envelope rows (sorted)."""
    readers: dict[int, list[int]] = {s.index: [] for s in plan.stages}
    for stage in plan.stages:
        if stage.is_source or stage.raw_spout is not None:
            continue
        for _, src in stage.inputs:
            if src >= 0 and stage.index not in readers[src]:
                readers[src].append(stage.index)
    return {k: sorted(v) for k, v in readers.items()}


def _is_raw_carrier(stage: Stage, plan: Plan, readers: dict[int, list[int]],
                    topology: StormTopology) -> bool:
    """Whether ``stage`` dead-letters its spout's undecodable rows (exactly one stage does)."""
    if stage.raw_spout is None:
        return True
    src = stage.inputs[0][1]
    source = plan.stages[src]
    if readers[src] or _feeds_sink(source, topology, plan):
        return False  # the spout's envelope stage does it
    raw_readers = [s.index for s in plan.stages if s.raw_spout == source.raw_spout
                   and not s.is_source]
    return stage.index == min(raw_readers)


def _union_inputs(stage: Stage, env: dict[int, DataFrame], readers: dict[int, list[int]],
                  heads: set[str]) -> DataFrame:
    frames = []
    for src in sorted({src for _, src in stage.inputs}):
        frame = env[src]
        if readers[src] and readers[src][0] == stage.index:
            others = sorted(heads - {stage.head})
            keep: Column = (F.col("__dest") == stage.head) | ~F.col("__dest").isin(others)
        else:
            keep = F.col("__dest") == stage.head
        frames.append(frame.where(keep))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _keyed(frame: DataFrame, keys: list[int]) -> tuple[DataFrame, str]:
    """``frame`` with a stateful stage's grouping key (:func:`recorded_task_keys`), and its name.

    Keys equal to the task indexes (a checkpoint from before they were recorded) group on
    ``__task`` itself; others are a column of their own, which the processor's rows drop
    again (``stage.typed_rows``).
    """
    if keys == list(range(len(keys))):
        return frame, "__task"
    return frame.withColumn(TASK_KEY_COLUMN, keys_at(keys, F.col("__task"))), TASK_KEY_COLUMN


def _partition_raw(frame: DataFrame, stage: Stage, topology: StormTopology) -> DataFrame:
    p = stage.partitioning
    n = topology.components[stage.head].parallelism
    if p.kind is PartitionKind.HASH and not p.fields:
        # a batch bolt's shuffle: spread over its tasks, the same on every replay (a
        # record's position when the spout has one, else its content)
        where = [c for c in ("partition", "offset") if c in frame.columns] or [
            c for c in frame.columns if c not in (ATTEMPT_COLUMN, PLANNED_COLUMN)]
        task = F.pmod(F.xxhash64(*[F.col(c) for c in where]), F.lit(n)).cast("int")
    elif p.kind is PartitionKind.HASH:
        task = F.pmod(F.xxhash64(*[F.col(f) for f in p.fields]), F.lit(n)).cast("int")
    elif p.kind is PartitionKind.SINGLE:
        task = F.lit(0)
    elif p.kind is PartitionKind.BROADCAST:  # one row per task (a generator: no cast around it)
        task = F.explode(F.sequence(F.lit(0), F.lit(n - 1)).cast("array<int>"))
    elif stage.keyed:
        task = F.pmod(F.spark_partition_id(), F.lit(n)).cast("int")
    else:
        return frame
    frame = frame.withColumn("__task", task if p.kind is PartitionKind.BROADCAST
                             else task.cast("int"))
    return frame if stage.keyed else _exchange(frame, stage, n)


def _partition_envelope(frame: DataFrame, stage: Stage, topology: StormTopology) -> DataFrame:
    if stage.keyed or stage.partitioning.kind is PartitionKind.KEEP:
        return frame
    return _exchange(frame, stage, topology.components[stage.head].parallelism)


def _exchange(frame: DataFrame, stage: Stage, n: int) -> DataFrame:
    if stage.partitioning.kind is PartitionKind.SINGLE:
        return frame.repartition(1)
    keys = F.array(*[F.lit(k) for k in task_partition_keys(n)])
    return frame.repartition(n, F.element_at(keys, F.col("__task") + 1))


def task_partition_keys(n: int) -> list[int]:
    """For each task ``t < n``, an int that Spark's hash partitioning puts in partition ``t``.

    Spark places a row in partition ``pmod(murmur3(key, 42), n)``; on the task index itself
    that sends tasks 0 and 1 of a 2-task bolt both to partition 1 (one Spark task ran both,
    one core idle) and 3 of 4 tasks to partition 3. Partitioning on these keys instead gives
    each task a partition of its own.
    """
    keys: list[int | None] = [None] * n
    missing, k = n, 0
    while missing:
        t = _murmur3_int(k) % n
        if keys[t] is None:
            keys[t], missing = k, missing - 1
        k += 1
    return [int(key) for key in keys if key is not None]


def tws_task_keys(n: int, partitions: int, avoid: frozenset[int] = frozenset()) -> list[int]:
    """Grouping keys of a stateful stage's ``n`` tasks: task ``t`` in partition ``t % partitions``.

    A stateful or windowed stage runs as ``groupBy(key).transformWithState``, which Spark
    hash-partitions into ``spark.sql.shuffle.partitions`` partitions. Grouped on the task
    index itself, tasks 0 and 1 of a 2-task bolt both went to partition 1 of 2: one Spark
    task ran the whole stage and the other core idled. Task ``t``'s key is the smallest
    ``t + n * j`` (``j >= 0``) that Spark puts in partition ``t % partitions``, so the tasks
    spread evenly and ``key % n`` gives the task back (:func:`task_of_key`). Keys in
    ``avoid`` (another stateful bolt's) are skipped, so Spark's state reader, which numbers
    state operators rather than bolts, can tell the bolts' state apart by their keys
    (``state_rescale.py``).

    Example:
        >>> tws_task_keys(2, 2)
        [2, 1]
        >>> [task_of_key(k, 2) for k in tws_task_keys(2, 2)]
        [0, 1]
    """
    keys = []
    for t in range(n):
        k = t
        while _murmur3_int(k) % partitions != t % partitions or k in avoid:
            k += n
        keys.append(k)
    return keys


def pass_through_keys(partitions: int) -> list[int]:
    """Negative grouping keys, one in each of Spark's ``partitions``, for passing rows.

    The acker stage's rows that only pass through hold no state, so their keys need no record.

    Example:
        >>> [_murmur3_int(k) % 2 for k in pass_through_keys(2)]
        [0, 1]
    """
    keys = []
    k = -1
    for p in range(partitions):
        while _murmur3_int(k) % partitions != p:
            k -= 1
        keys.append(k)
        k -= 1
    return keys


def recorded_task_keys(layout: CheckpointLayout, plan: Plan, topology: StormTopology,
                       partitions: int, *, spark_state: bool = True,
                       ackers: int = 0) -> dict[str, list[int]]:
    """Each stateful or windowed stage's task keys, kept in the checkpoint from its first run.

    Spark keeps a stage's state under its grouping key, so a checkpoint keeps the keys it
    started with (``kstorm/task_keys.json``), whatever ``spark.sql.shuffle.partitions`` says
    later. A checkpoint that ran before kstorm recorded them grouped on the task index
    itself: it keeps those keys (its state is stored under them).

    With ``spark_state`` (the ``spark`` provider: Spark's state store holds the tasks' state
    and windows), a bolt whose task count differs from the one recorded for a checkpoint that
    has planned batches is a :class:`StateError`: state is per task, so a fields grouping over
    the new count would send keys to tasks without their state. Otherwise (another provider,
    which checks its own state, or no batch yet) the bolt gets keys of the same kind for its
    new task count.

    ``ackers`` (at least once: ``topology.acker.executors``) adds the acker tasks' keys under
    ``__acker`` (their pending trees are state too), and ``__pass_through``: keys, one per
    partition, for the rows that pass the acker stage untouched. A checkpoint that ran
    without a record of acker keys grouped its ackers on the task index and keeps it. A
    changed acker count gets new keys: trees pending in the old ackers time out and are
    replayed, as at-least-once allows.
    """
    kinds = {s.head: "stateful" if s.stateful else "windowed" for s in plan.stages
             if s.stateful or (s.windowed and not s.native_window)}
    heads = list(kinds)
    found = _read_task_keys(layout)
    recorded = dict(found or {})
    ran = next_batch_id(layout.checkpoint) > 0
    legacy = found is None and ran
    if legacy and _state_grouped_on_task_keys(layout.checkpoint):
        msg = (f"{layout.task_keys_path} is missing, but Spark's state in the checkpoint "
               f"{layout.checkpoint} is kept under kstorm's recorded task keys (its state "
               f"schema groups on {TASK_KEY_COLUMN}): without the record each task would "
               "read its state under another key, as if it were empty")
        raise StateError(msg, hint=_KEYS_HINT)
    kind = "task" if legacy or {e.get("kind") for e in recorded.values()} == {"task"} \
        else "balanced"
    if found is not None and ran:
        _check_same_state_operators(layout, set(found) - {ACKER_COMPONENT}, kinds)
    # the checkpoint's partitions: Spark keeps those of its first run
    partitions = next((int(e["partitions"]) for e in recorded.values()), partitions)
    changed = found is None
    for head in heads:
        n = topology.components[head].parallelism
        entry = recorded.get(head)
        routes = _keyed_inputs(topology, head)
        if entry is not None and ran:
            if spark_state:
                _check_same_parallelism(layout, f"{kinds[head]} bolt {head!r}", n, entry)
            _check_same_routes(layout, head, entry.get("inputs", {}), routes)
        if entry is None or len(entry["keys"]) != n:
            others = frozenset(k for h, e in recorded.items() if h != head
                               and h != ACKER_COMPONENT for k in e["keys"])
            entry = recorded[head] = _new_entry(kind, n, partitions, others)
            changed = True
        if entry.get("inputs") != routes:
            entry["inputs"] = routes
            changed = True
    if ackers:
        entry = recorded.get(ACKER_COMPONENT)
        if entry is None or len(entry["keys"]) != ackers:
            old_kind = entry["kind"] if entry else ("task" if ran else kind)
            recorded[ACKER_COMPONENT] = _new_entry(old_kind, ackers, partitions)
            changed = True
        heads.append(ACKER_COMPONENT)
    if changed:
        layout.set_task_keys(recorded)
    for head in heads:
        keys = recorded[head]["keys"]
        n = ackers if head == ACKER_COMPONENT else topology.components[head].parallelism
        if [task_of_key(k, n) for k in keys] != list(range(n)):
            msg = (f"{layout.task_keys_path} gives bolt {head!r} the keys {keys}, which are "
                   f"not one per task of its {n}")
            raise StateError(msg, hint=_KEYS_HINT)
    found_keys = {head: recorded[head]["keys"] for head in heads}
    if ackers:
        found_keys[PASS_THROUGH] = pass_through_keys(partitions)
    return found_keys


#: :func:`recorded_task_keys`' entry for the acker stage's pass-through groups
PASS_THROUGH = "__pass_through"


def _state_grouped_on_task_keys(checkpoint: Path) -> bool:
    """Whether a state operator of the checkpoint groups on recorded keys (not ``__task``).

    Spark writes each state operator's key schema under ``state/<op>/_stateSchema``; a
    checkpoint from before kstorm recorded keys grouped on the task index, named ``__task``.
    """
    needle = f'"name":"{TASK_KEY_COLUMN}"'.encode()
    return any(needle in path.read_bytes()
               for path in (checkpoint / "state").glob("*/_stateSchema/**/*") if path.is_file())


def _new_entry(kind: str, n: int, partitions: int,
               avoid: frozenset[int] = frozenset()) -> dict[str, Any]:
    """A record of ``n`` tasks' keys: the task index, or spread (none in ``avoid``)."""
    keys = list(range(n)) if kind == "task" else tws_task_keys(n, partitions, avoid)
    return {"kind": kind, "partitions": partitions, "keys": keys}


def _check_same_parallelism(layout: CheckpointLayout, bolt: str, n: int,
                            entry: dict[str, Any]) -> None:
    """A bolt whose state the checkpoint holds per task keeps its task count."""
    was = len(entry["keys"])
    if was == n:
        return
    msg = (f"{bolt} now runs {n} task(s), but the checkpoint {layout.checkpoint} holds its "
           f"state (spark provider) for {was} task(s): state is per task, so its keys would "
           "move to tasks without their state")
    raise StateError(msg, hint=(f"keep the bolt's parallelism at {was}, or start over with a "
                                "new checkpoint directory (its state starts empty); a stateful "
                                "bolt fed by fields groupings from bolts rescales (spark or "
                                "redis provider), a windowed bolt does not (docs/state.md, "
                                "Rescaling)"))


def _check_same_state_operators(layout: CheckpointLayout, recorded: set[str],
                                kinds: dict[str, str]) -> None:
    """A checkpoint that ran keeps its stateful and windowed bolts.

    Each is one Spark state operator; Spark refuses a query that ran with operators added or
    removed, and would hand a renamed bolt the state of the one it replaces.
    """
    added, gone = sorted(set(kinds) - recorded), sorted(recorded - set(kinds))
    if not added and not gone:
        return
    change = "; ".join(part for part in (
        f"{added} not in the checkpoint" if added else "",
        f"{gone} in the checkpoint but not in the topology" if gone else "") if part)
    msg = (f"the stateful and windowed bolts changed since the checkpoint {layout.checkpoint} "
           f"ran ({change}): Spark keeps one state operator per such bolt, in the order of "
           "the plan, and refuses a query whose state operators were added or removed; a "
           "renamed bolt would be handed the state of the bolt it replaces")
    raise StateError(msg, hint=(
        "keep those bolts as the checkpoint has them, or start over with a new checkpoint "
        "directory; with topology.state.provider = spark its state starts empty, with "
        "redis the state outlives the checkpoint (a new stateful bolt may start empty with "
        "kstorm.state.init.empty = [component])"))


def _keyed_inputs(topology: StormTopology, head: str) -> dict[str, str]:
    """How ``head``'s inputs pick its task: ``"source:stream"`` -> its grouping, spelled out."""
    return {f"{g.component}:{g.stream}": str(g) for g in topology.components[head].inputs}


def _check_same_routes(layout: CheckpointLayout, head: str, recorded: dict[str, str],
                       routes: dict[str, str]) -> None:
    """A stateful bolt's fields or global groupings keep sending each key to its state."""
    for source, was in recorded.items():
        now = routes.get(source)
        if now is None or now == was or not was.startswith(("fields", "global")):
            continue  # an input gone, unchanged, or one whose tuples went to any task
        msg = (f"bolt {head!r} keeps its state per task, and the checkpoint "
               f"{layout.checkpoint} ran with its input {source} as a {was}; it is now a "
               f"{now}, so keys would move to tasks that do not hold their state")
        raise StateError(msg, hint=(
            "keep the grouping as the checkpoint has it, or start over with a new checkpoint "
            "directory (with topology.state.provider = spark its state starts empty; with "
            "redis, delete its state too)"))


_KEYS_HINT = ("restore the file from a copy of the checkpoint, or start over with a new "
              "checkpoint directory (its state starts empty)")


def _read_task_keys(layout: CheckpointLayout) -> dict[str, dict[str, Any]] | None:
    """The checkpoint's recorded task keys; a file that cannot be read is an error."""
    try:
        found = layout.task_keys()
        for entry in (found or {}).values():
            entry["keys"] = [int(k) for k in entry["keys"]]
            entry["partitions"] = int(entry["partitions"])
            if "inputs" in entry:  # recorded since 2026-11-29
                entry["inputs"] = {str(k): str(v) for k, v in entry["inputs"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        msg = (f"{layout.task_keys_path} cannot be read ({type(exc).__name__}: {exc}); it "
               "says under which key Spark's state store keeps each stateful bolt task's state")
        raise StateError(msg, hint=_KEYS_HINT) from exc
    return found


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (the ``hash`` function on an int), signed."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = rotl((value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1
