"""Compile a :class:`StormTopology` into stages: the plan the Spark runtime executes.

Pure Python: no Spark here, so the plan can be tested without a JVM.

A *stage* is one Python operator over Arrow batches inside a Spark task. Bolts fuse into
their upstream's stage when nothing needs to move between tasks (shuffle, local-or-shuffle
and none groupings keep a tuple in the partition it arrived in, spreading tuples round robin
over the bolt's tasks: every one of its N tasks runs). A new stage starts where
Storm would move tuples between tasks or keep task state:

- a fields grouping: ``__task = hash(fields) mod parallelism`` then a hash partitioning on
  ``__task`` (on raw spout columns the hash is Spark's own ``xxhash64`` over the fields);
- a global grouping: ``__task = 0``, one partition;
- an all grouping: one copy of each tuple per task (``__task`` = 0..n-1);
- a stateful bolt: a ``transformWithStateInPandas`` operator grouped by ``__task``, so each
  task's :class:`KeyValueState` lives in Spark's state store, versioned by batch id;
- a windowed bolt: the same, keeping each task's windows, watermark and message-id ledger;
- a bolt with several inputs: the union of its inputs;
- a bolt that gets tick tuples (``kstorm/_runtime/ticks.py``): its input is envelope rows
  and each of its tasks a partition of its own, so its ticks reach the instance its tuples
  do.

Each stage's input is either the *raw* rows of one spout (typed Arrow columns) or
*envelope* rows (``ENVELOPE_FIELDS``): the tuple's destination stage and task, its source
component and stream, its values pickled into one binary column, and its emit position.

A windowed bolt takes its input in arrival order (``kstorm/_runtime/window_task.py``): each
upstream task's tuples in the order that task emitted them. A stage upstream of a windowed
bolt is *ordered*: it takes its input interleaved by where each tuple came from (a Kafka
partition, an upstream task; ``window_task.interleaved``), not one partition after another
nor in the order a shuffle happened to deliver it -- so its emits interleave its inputs as
a Storm bolt's would, and a replayed batch emits in the same order.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kstorm.bolt import BaseStatefulBolt
from kstorm.config import Guarantee, TopologyConfig
from kstorm.errors import ConfigError, TopologyError
from kstorm.grouping import Grouping, GroupingKind
from kstorm.spout import BaseRichSpout
from kstorm.topology import StormTopology

ENVELOPE_FIELDS = ("__dest", "__task", "__src", "__stream", "__vals", "__meta", "__seq")
DRIVER = -1  # ``__dest`` of tuples delivered to the driver (sinks and captures)
COMMIT = -2  # committers and the bolts downstream of them: the commit phase, on the driver


class PartitionKind(enum.Enum):
    """How a stage's input rows are spread over Spark partitions."""

    KEEP = "keep"        # stay where they are (fused shuffle / spout partitions)
    HASH = "hash"        # hash partitioning on __task (fields grouping)
    SINGLE = "single"    # one partition (global grouping)
    BROADCAST = "broadcast"  # one copy per task (all grouping)


@dataclass(frozen=True)
class Partitioning:
    """The partitioning a stage's input needs."""

    kind: PartitionKind
    tasks: int = 1
    fields: tuple[str, ...] = ()


@dataclass
class Stage:
    """One Python operator in the Spark plan."""

    index: int
    head: str                          # the first bolt (or the spout of a source stage)
    bolts: list[str] = field(default_factory=list)  # fused bolts, upstream first
    inputs: list[tuple[Grouping, int]] = field(default_factory=list)  # (grouping, from stage)
    partitioning: Partitioning = Partitioning(PartitionKind.KEEP)
    stateful: bool = False
    raw_spout: str | None = None       # input is the raw rows of this spout
    native_window: bool = False        # a built-in windowed aggregate (Arrow, commit phase)
    windowed: bool = False             # a user windowed bolt: TWS keeps its windows per task
    envelope_source: bool = False      # a free-form or transactional spout: envelope rows
    batch: bool = False                # a batch bolt (seed 002): one task is one partition
    tick_secs: float | None = None     # the head bolt's tick period (its tick tuples)
    ordered: bool = False              # takes its input in arrival order (module docstring)

    @property
    def keyed(self) -> bool:
        """Whether the stage runs per task in ``transformWithStateInPandas`` (task state)."""
        return self.stateful or self.windowed

    @property
    def is_source(self) -> bool:
        """Whether this stage is a spout's raw rows (no Python runs in it)."""
        return not self.bolts


@dataclass
class Plan:
    """Stages in dependency order, and where each component runs."""

    stages: list[Stage]
    stage_of: dict[str, int]
    sinks: list[str] = field(default_factory=list)  # components run on the driver at commit
    commit_stage: Stage | None = None  # committers and what they feed (index COMMIT)

    def stage(self, component: str) -> Stage:
        """The stage a component runs in."""
        where = self.stage_of[component]
        if where == COMMIT and self.commit_stage is not None:
            return self.commit_stage
        return self.stages[where]

    def on_driver(self, component: str) -> bool:
        """Whether ``component`` runs on the driver in the commit phase (sink or committer)."""
        return self.stage_of[component] in (DRIVER, COMMIT)

    def consumers_of_stage(self, index: int) -> list[int]:
        """Stages reading ``index``'s output."""
        return [s.index for s in self.stages if any(src == index for _, src in s.inputs)]


@dataclass(frozen=True)
class AckingPlan:
    """Reliability of a topology run at-least-once (seed 001): what the executors need.

    Attributes:
        n_ackers: ``topology.acker.executors``; root ``r`` is tracked by acker ``r mod n``.
        spout_tasks: tracked spout id -> its spout task (its index among the spouts).
        report_acks: spout tasks whose spout overrides ``ack``: every completed tree is
            reported to the driver one by one (otherwise first-attempt completions are
            only counted).
        timeout_ms: ``topology.message.timeout.secs`` in milliseconds.
    """

    n_ackers: int
    spout_tasks: dict[str, int]
    report_acks: frozenset[int] = frozenset()
    timeout_ms: int = 30_000


def acking_plan(topology: StormTopology, plan: Plan, *, n_ackers: int,
                timeout_ms: int) -> AckingPlan | None:
    """Which spouts are tracked (at-least-once), and how.

    Tracked: Kafka, list and free-form (``next_tuple``) spouts read by at least one bolt
    that is not a built-in windowed aggregate (those, and sinks, run in the commit phase,
    where the batch itself covers them). A Kafka spout's failed tuples are replayed from
    their offsets, a list spout's from its rows (row ``i`` of batch ``b`` as offset ``i`` of
    partition ``b``); a free-form spout's ``fail`` is called and it re-emits them itself
    (seed 001).

    Returns None when no spout is tracked.
    """
    tasks: dict[str, int] = {}
    report: set[int] = set()
    for index, spec in enumerate(topology.spouts()):
        spout = spec.component
        if source_kind(spout) not in ("kafka", "list", "next_tuple"):
            continue
        readers = [c for c, _ in topology.consumers(spec.id)
                   if not plan.on_driver(c) and not plan.stage(c).native_window]
        if not readers:
            continue
        tasks[spec.id] = index
        if type(spout).ack is not BaseRichSpout.ack:
            report.add(index)
    if not tasks:
        return None
    return AckingPlan(n_ackers, tasks, frozenset(report), timeout_ms)


def reliability_plan(topology: StormTopology, plan: Plan, settings: TopologyConfig
                     ) -> AckingPlan | None:
    """The acking plan the settings ask for, its windows checked; None without ackers.

    At least once with ackers (``topology.acker.executors`` not 0): :func:`acking_plan`
    with the settings' ackers and ``topology.message.timeout.secs``, then
    :func:`check_window_timeouts` against each spout's ``topology.max.spout.pending``.
    The Spark runner and the test driver both start from it.
    """
    if not (settings.guarantee is Guarantee.AT_LEAST_ONCE and settings.ackers_enabled):
        return None
    acking = acking_plan(topology, plan, n_ackers=settings.acker_executors or 1,
                         timeout_ms=settings.message_timeout_secs * 1000)
    if acking is not None:
        check_window_timeouts(topology, acking, lambda spout: settings.spout_max_pending(
            topology.components[spout].conf))
    return acking


def check_window_timeouts(topology: StormTopology, acking: AckingPlan,
                          max_pending: Any = None) -> None:
    """At least once, a windowed bolt holds its tuples' trees open until they expire.

    So, as Storm's ``WindowedBoltExecutor`` checks, a time window (its length plus its
    sliding interval, plus the watermark lag) must fit in ``topology.message.timeout.secs``,
    or every tree would time out and be replayed while its window is still open; and a
    count window (its length plus its sliding interval, in tuples) must fit in
    ``topology.max.spout.pending`` of each tracked spout upstream (``max_pending``: spout
    id -> its cap, None for none), or the spout stops emitting before the window can fill.
    Stateful and persistent windows ack tuples as they arrive: no limit.
    """
    from kstorm.windowing.bolt import acks_on_arrival
    from kstorm.windowing.durations import Count, Duration

    caps = max_pending or (lambda _spout: None)

    for spec in topology.bolts():
        bolt = spec.component
        if not is_windowed_bolt(bolt) or acks_on_arrival(bolt):
            continue
        if not _upstream_spouts(topology, spec.id) & set(acking.spout_tasks):
            continue
        config = bolt.window_config
        parts = [config.window_length, config.sliding_interval or config.window_length]
        counts = sum(p.n for p in parts if isinstance(p, Count))
        for spout in sorted(_upstream_spouts(topology, spec.id) & set(acking.spout_tasks)):
            cap = caps(spout)
            if counts and cap is not None and counts > cap:
                msg = (f"windowed bolt {spec.id!r}: window length + sliding interval count "
                       f"({counts}) is more than topology.max.spout.pending ({cap}) of spout "
                       f"{spout!r}: the spout would stop emitting before the window fills")
                raise ConfigError(msg, hint=f"set topology.max.spout.pending to at least "
                                  f"{counts}, or shorten the count window")
        if not all(isinstance(p, Duration) for p in parts):
            continue
        span = sum(p.ms for p in parts) + (config.lag.ms if config.is_event_time else 0)
        if span >= acking.timeout_ms:
            msg = (f"windowed bolt {spec.id!r}: its tuples stay in their trees until they "
                   f"expire, {span} ms (window length + sliding interval + lag), but "
                   f"topology.message.timeout.secs is {acking.timeout_ms // 1000} s: every "
                   "tree would time out and replay while its window is open")
            raise ConfigError(msg, hint=f"set topology.message.timeout.secs above "
                              f"{span // 1000 + 1}, or make the bolt a "
                              "BaseStatefulWindowedBolt (acks tuples as its state holds them)")


def _upstream_spouts(topology: StormTopology, component: str) -> set[str]:
    seen: set[str] = set()
    todo = [component]
    spouts: set[str] = set()
    while todo:
        spec = topology.components[todo.pop()]
        for g in spec.inputs:
            if g.component in seen:
                continue
            seen.add(g.component)
            if topology.components[g.component].is_spout:
                spouts.add(g.component)
            else:
                todo.append(g.component)
    return spouts


def compile_plan(topology: StormTopology, ticks: Mapping[str, float] | None = None) -> Plan:
    """Group the topology's components into stages (see the module docstring).

    ``ticks``: the bolts that get tick tuples and their periods
    (:func:`kstorm._runtime.ticks.tick_periods`).
    """
    ticks = ticks or {}
    stages: list[Stage] = []
    stage_of: dict[str, int] = {}
    sinks: list[str] = []
    committed: list[str] = []  # the commit stage's bolts, upstream first
    for spec in topology.spouts():
        stage = Stage(index=len(stages), head=spec.id, raw_spout=spec.id,
                      envelope_source=emits_envelopes(spec.component))
        stages.append(stage)
        stage_of[spec.id] = stage.index
    for spec in topology.bolts():
        if getattr(spec.component, "is_sink", False):
            sinks.append(spec.id)
            stage_of[spec.id] = DRIVER
            continue
        if topology.is_committer(spec.id) or any(
                stage_of[g.component] == COMMIT for g in spec.inputs):
            _check_commit_bolt(spec.id, spec.component)
            committed.append(spec.id)
            stage_of[spec.id] = COMMIT
            continue
        fuse_into = (None if spec.id in ticks else
                     _fusable_stage(spec.inputs, spec.component, stage_of, stages))
        if fuse_into is not None:
            stages[fuse_into].bolts.append(spec.id)
            stage_of[spec.id] = fuse_into
            continue
        inputs = [(g, stage_of[g.component]) for g in spec.inputs]
        for g, src in inputs:
            if src == DRIVER:
                msg = (
                    f"bolt {spec.id!r} subscribes to sink {g.component!r}; "
                                    "sinks run in the commit phase and emit nothing"
                )
                raise TopologyError(msg)
        raw = None if spec.id in ticks else _raw_spout_input(inputs, stages)
        native = bool(getattr(spec.component, "is_native_window", False))
        if native:
            _check_native_window(spec.id, inputs, raw, topology, stages)
        stage = Stage(
            index=len(stages),
            head=spec.id,
            bolts=[spec.id],
            inputs=inputs,
            partitioning=_partitioning(spec.inputs, spec.parallelism,
                                       batch=is_batch_bolt(spec.component) or spec.id in ticks),
            stateful=isinstance(spec.component, BaseStatefulBolt),
            raw_spout=raw,
            native_window=native,
            windowed=is_windowed_bolt(spec.component),
            batch=is_batch_bolt(spec.component),
            tick_secs=ticks.get(spec.id),
        )
        stages.append(stage)
        stage_of[spec.id] = stage.index
    commit_stage = (Stage(index=COMMIT, head=committed[0], bolts=committed)
                    if committed else None)
    _mark_ordered(stages)
    return Plan(stages, stage_of, sinks, commit_stage)


def _mark_ordered(stages: list[Stage]) -> None:
    """Mark the shuffled stages upstream of a windowed bolt ``ordered`` (module docstring)."""
    todo = [s for s in stages if s.windowed]
    seen: set[int] = set()
    while todo:
        for _, src in todo.pop().inputs:
            if src < 0 or src in seen:
                continue
            seen.add(src)
            up = stages[src]
            if not up.windowed and not up.native_window:
                up.ordered = True
            todo.append(up)


def _check_commit_bolt(cid: str, component: object) -> None:
    """Only plain bolts run in the commit phase: no Spark state store there."""
    if isinstance(component, BaseStatefulBolt) or is_windowed_bolt(component) or getattr(
            component, "is_native_window", False):
        msg = (f"bolt {cid!r} runs in the commit phase (it is a committer or downstream of "
               "one), where stateful and windowed bolts cannot run: move it before the "
               "committer")
        raise TopologyError(msg)


def _check_native_window(cid: str, inputs: list[tuple[Grouping, int]], raw: str | None,
                         topology: StormTopology, stages: list[Stage]) -> None:
    if raw is None and len(inputs) == 1 and stages[inputs[0][1]].envelope_source:
        msg = (f"windowed aggregate {cid!r} reads spout {stages[inputs[0][1]].head!r}, which "
               "runs next_tuple(): built-in aggregates read a KafkaSpout or ListSpout's typed "
               "columns; use a BaseWindowedBolt for a free-form spout")
        raise TopologyError(msg)
    if raw is None:
        msg = (
            f"windowed aggregate {cid!r} must subscribe to exactly one spout: it reads the "
            "spout's partitions in offset order to decide which tuples are late"
        )
        raise TopologyError(
            msg)
    for other in stages:
        if other.native_window and other.raw_spout == raw:
            msg = (
                f"spout {raw!r} feeds two windowed aggregates ({other.head!r} "
                                f"and {cid!r}); one per spout is supported"
            )
            raise TopologyError(msg)
    for consumer, _ in topology.consumers(cid):
        if not getattr(topology.components[consumer].component, "is_sink", False):
            msg = (
                f"windowed aggregate {cid!r} feeds bolt {consumer!r}: its results are "
                "produced in the commit phase, so only sinks can consume them"
            )
            raise TopologyError(
                msg)


def _fusable_stage(inputs: tuple[Grouping, ...], component: object, stage_of: dict[str, int],
                   stages: list[Stage]) -> int | None:
    if len(inputs) != 1 or inputs[0].kind.repartitions:
        return None
    if (isinstance(component, BaseStatefulBolt) or getattr(component, "is_native_window", False)
            or is_windowed_bolt(component) or is_batch_bolt(component)):
        return None  # (a batch bolt's task must see its whole batch: an exchange on __task)
    upstream = stage_of[inputs[0].component]
    if upstream < 0 or stages[upstream].is_source:
        return None  # the first bolt after a spout opens its own stage over the raw rows
    return upstream


def is_batch_bolt(component: object) -> bool:
    """Whether ``component`` is a batch bolt (``BaseBatchBolt``, seed 002)."""
    return bool(getattr(component, "is_batch_bolt", False))


def is_windowed_bolt(component: object) -> bool:
    """Whether ``component`` is a user windowed bolt (``BaseWindowedBolt``)."""
    return bool(getattr(component, "is_windowed_bolt", False))


def source_kind(spout: object) -> str:
    """What a spout says it produces (``BaseRichSpout.source_kind``).

    ``"kafka"`` and ``"list"``: typed raw columns, read by a Spark source of its own, which
    its first bolts read directly. ``"next_tuple"``: a free-form spout whose ``next_tuple``
    the runtime calls; its emits (any stream, any values) leave its source stage as
    envelope rows, which its consumers read as they read a bolt's output.
    """
    return str(getattr(spout, "source_kind", "next_tuple"))


def runs_next_tuple(spout: object) -> bool:
    """Whether ``spout`` is a free-form spout whose ``next_tuple`` the runtime calls."""
    return source_kind(spout) == "next_tuple"


def emits_envelopes(spout: object) -> bool:
    """Whether a spout's source yields its tuples as envelope rows (any stream, any values).

    Free-form (``next_tuple``) and transactional spouts do; Kafka and list spouts give
    typed columns their first bolts read directly.
    """
    return source_kind(spout) in ("next_tuple", "transactional")


def _raw_spout_input(inputs: list[tuple[Grouping, int]], stages: list[Stage]) -> str | None:
    if len(inputs) == 1 and stages[inputs[0][1]].is_source:
        source = stages[inputs[0][1]]
        return None if source.envelope_source else source.raw_spout
    return None


def _partitioning(inputs: tuple[Grouping, ...], parallelism: int, *,
                  batch: bool = False) -> Partitioning:
    kinds = {g.kind for g in inputs}
    if GroupingKind.ALL in kinds:
        return Partitioning(PartitionKind.BROADCAST, parallelism)
    if GroupingKind.GLOBAL in kinds and len(kinds) == 1:
        return Partitioning(PartitionKind.SINGLE, 1)
    fields = tuple(f for g in inputs if g.fields is not None for f in g.fields)
    if GroupingKind.FIELDS in kinds or GroupingKind.GLOBAL in kinds or batch:
        # (a batch bolt's shuffle: tuples carry their task, each task's rows in one partition)
        return Partitioning(PartitionKind.HASH, parallelism, fields)
    return Partitioning(PartitionKind.KEEP, parallelism)
