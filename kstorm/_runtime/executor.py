"""Run the bolts of one stage over one task's tuples: Storm's executor, minus the threads.

Pure Python (no Spark): the Spark layer (``kstorm/_spark/stage.py``) turns Arrow batches into
``(task, Tuple)`` pairs, calls :meth:`StageExecutor.process`, and packs what comes back into
envelope rows. A tuple emitted to a bolt fused into the same stage is executed at once,
depth first; a tuple for another stage, a sink or the dead-letter path becomes an
:class:`Outgoing` record.

A bolt instance is created and prepared on its task's first tuple, and ``finish_batch``
runs after the task's last tuple of the batch. Given ``instances`` (the Spark layer passes one
per stage and Python worker process), instances live as long as that process: the next
batch's executor reuses them (their collector re-bound to it, ``prepare`` not called again,
``init_state`` again with the batch's state), and ``cleanup`` runs when the process lets them
go (:class:`BoltInstances`). Batch bolts (seed 002) get a new instance per batch, as in
Storm. Without ``instances`` (the commit stage, tests), an instance lives for one batch and
``cleanup`` runs after it.
"""

from __future__ import annotations

import copy
import logging
import pickle
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from kstorm._runtime import bolt_fields
from kstorm._runtime.envelope import (
    ACKER,
    CAPTURE,
    DEAD_LETTER,
    Outgoing,
    Packed,
    dumps,
    emit_seq,
    pack,
    unpacked,
)
from kstorm._runtime.plan import COMMIT, DRIVER, AckingPlan, Plan, is_batch_bolt
from kstorm.acking.anchoring import AnchorTracker, TrackedTuple
from kstorm.acking.emits import SpoutEmit
from kstorm.acking.ids import TupleIdGenerator, root_id_for
from kstorm.acking.messages import MessageId
from kstorm.acking.offsets import list_position
from kstorm.acking.outbox import AckerOutbox
from kstorm.bolt import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseStatefulBolt,
    BasicOutputCollector,
    OutputCollector,
    run_basic,
)
from kstorm.component import TopologyContext
from kstorm.config import BoltErrorPolicy, Guarantee, TopologyConfig
from kstorm.errors import BoltError, FailedException, SinkError, TopologyError
from kstorm.grouping import GroupingKind, stable_hash, stable_hash_one, task_for
from kstorm.sink import BaseSink
from kstorm.state import KeyValueState
from kstorm.state.rescale import why_not_keyed
from kstorm.topology import StormTopology
from kstorm.transactional.bolt import BatchOutputCollector
from kstorm.tuple import Fields, Tuple

ROW_TUPLES = 16_384      # a stage sends its queued tuples once it holds this many...
ROW_BYTES = 8 << 20      # ... or this many bytes of values pickled at emit

# Values of these types cannot change after an emit, so a packed row may pickle them later
# (with the rest of its row); other values are pickled at once, as a bolt may reuse them.
_IMMUTABLE = frozenset({str, int, float, bool, bytes, type(None)})
_NO_PLANS: dict[str, Any] = {}
_TASK_MEMO = 1 << 16  # string grouping values whose task a route remembers per batch
_window_log = logging.getLogger("kstorm.windowing")
_log = logging.getLogger("kstorm")
STORM_MIN = 3  # dead letters of one type in a batch before the share is looked at


def _entry(values: list[Any]) -> list[Any] | bytes:
    """What a packed row holds for one tuple: its values, or their pickle if any may mutate."""
    for v in values:
        if type(v) not in _IMMUTABLE:
            return dumps(values)
    return values


class _Route(NamedTuple):
    consumer: str
    grouping: Any
    fused: bool           # the consumer runs in this stage: deliver at once
    parallelism: int      # the consumer's tasks
    positions: list[int] | None  # grouping fields' positions (fields grouping only)
    to_driver: bool = False  # a sink: processed in the batch's commit phase, never anchored
    one: int = -1         # fields grouping on one field: its position (a faster hash)
    spread: bool = False  # a shuffle-like grouping: round robin over the consumer's tasks


class _FastRoute(NamedTuple):
    """A route of the plain emit path (:meth:`StageExecutor._emit_plain`)."""

    route: _Route
    tasks: dict[str, int]        # grouping value (str) -> task, for a one-field grouping
    slots: dict[int, list[Any]]  # task -> the entries of its packed row (until the drain)


class _EmitPlan(NamedTuple):
    fields: Fields
    routes: list[_Route]
    counter: str          # "<component>.emitted"
    n_fields: int
    plain: list[_FastRoute] | None  # the routes, when every emit may take the plain path


@dataclass
class _Task:
    bolt: Any
    collector: OutputCollector
    basic: BasicOutputCollector | None
    context: TopologyContext
    executed: str  # its counter: "<component>.executed"
    #: a state recording key groups (``kstorm/state/rescale.py``), and each input's
    #: grouping fields ("source", "stream") -> their positions in its tuples
    keyed: Any = None
    group_fields: dict[tuple[str, str], Any] | None = None
    state: Any = None  # the state ``init_state`` was given (a stateful bolt)


class StageExecutor:
    """Executes one stage's fused bolts for one Spark partition of one batch."""

    def __init__(self, topology: StormTopology, plan: Plan, stage_index: int, *,
                 topology_name: str, conf: dict[str, Any], batch_id: int, partition: int,
                 settings: TopologyConfig | None = None,
                 state_for: Callable[[str, int], KeyValueState] | None = None,
                 acking: AckingPlan | None = None, attempt: Any = None,
                 instances: dict[tuple[str, int], Any] | None = None) -> None:
        """One stage's executor for one task of one batch.

        Args:
            topology: the topology.
            plan: its compiled plan.
            stage_index: the stage to run.
            topology_name: for the bolts' :class:`TopologyContext`.
            conf: the user's configuration, as bolts' ``prepare`` gets it.
            batch_id: the batch (Storm's txid without the base).
            partition: the Spark partition (a shuffle grouping keeps tuples in it).
            settings: the validated configuration (default: validated from ``conf``).
            state_for: ``(component, task) -> KeyValueState`` for stateful bolts.
            acking: at least once, what anchoring and the acker messages need.
            attempt: the batch's :class:`TransactionAttempt` (batch bolts' ``prepare`` gets
                it; default: the batch id).
            instances: ``(component, task) -> instance`` kept across batches (module doc).
        """
        self.topology = topology
        self.plan = plan
        self.stage = (plan.commit_stage if stage_index == COMMIT  # type: ignore[assignment]
                      else plan.stages[stage_index])
        self.topology_name = topology_name
        self.conf = conf
        self.settings = settings if settings is not None else TopologyConfig.from_conf(conf)
        self.batch_id = batch_id
        self.partition = partition
        self._state_for = state_for
        self.attempt = attempt if attempt is not None else batch_id
        self._fail_on_error = self.settings.bolt_error_policy is BoltErrorPolicy.FAIL
        self._dead_by_type: Counter[tuple[str, str]] = Counter()  # (bolt, error): this batch
        # exactly once, a failed tuple fails its batch (it is re-run; seed 002)
        self._fail_fails_batch = self.settings.guarantee is Guarantee.EXACTLY_ONCE
        self._capture = self.settings.captures
        self._tasks: dict[tuple[str, int], _Task] = {}
        self._instances = instances
        self._out: list[Outgoing] = []   # rows that are not tuples for a bolt/sink
        self._groups: dict[tuple[str, int, str, str], list[Any]] = {}  # -> [entries, metas]
        self._queued = 0        # tuples in _groups
        self._queued_bytes = 0  # bytes of the values pickled at emit in _groups
        # the emit position of the next tuple to leave (envelope.emit_seq): numbered per
        # (dest, task, src, stream) row in drain order, so each row's tuples in emit order
        self._seq = emit_seq(max(partition, 0), 0)
        self._plans: dict[str, dict[str, _EmitPlan]] = {}  # component -> stream -> plan
        self._spread: dict[str, int] = {}  # consumer -> tuples sent round robin
        self._order: list[tuple[str, int, str, str]] | None = None  # per-tuple view: emits
        self._slots: list[dict[int, list[Any]]] = []  # the plain routes' slots (_emit_plain)
        # a defaultdict: Counter's item access is ~2x slower, three times per tuple
        self.counters: defaultdict[str, int] = defaultdict(int)
        members = self.stage.bolts or [self.stage.head]
        self._routes = {c: self._routes_of(c) for c in members}
        # sinks that fold a task's tuples before they leave (BaseSink.combine)
        self._combiners = {
            r.consumer: self.topology.components[r.consumer].component
            for streams in self._routes.values() for routes in streams.values() for r in routes
            if r.to_driver and _combines(self.topology.components[r.consumer].component)}
        # Reliability (at-least-once): anchoring of this partition's tuples, and the acker
        # messages it sends at the end of the batch (see kstorm/acking/).
        self._acking = acking
        self._spout_task: int | None = None
        if acking is not None:
            self._idgen = TupleIdGenerator.for_task(batch_id, partition, f"stage{stage_index}")
            self._anchors = AnchorTracker(self._idgen)
            self._outbox = AckerOutbox(acking.n_ackers)
            if self.stage.raw_spout is not None:
                self._spout_task = acking.spout_tasks.get(self.stage.raw_spout)

    # ---- routing -------------------------------------------------------------------
    def _routes_of(self, component: str) -> dict[str, list[_Route]]:
        """Stream -> its subscriptions, with what each emit needs computed once."""
        routes: dict[str, list[_Route]] = {}
        streams = self.topology.components[component].streams
        for stream, fields in streams.items():
            for consumer, grouping in self.topology.consumers(component, stream):
                where = self.plan.stage_of[consumer]
                if where >= 0 and self.plan.stages[where].raw_spout == component:
                    continue  # that stage reads this spout's raw rows itself
                positions = ([fields.index(f) for f in grouping.fields]
                             if grouping.fields is not None else None)
                one = (positions[0] if grouping.kind is GroupingKind.FIELDS
                       and positions is not None and len(positions) == 1 else -1)
                fused = where == self.stage.index
                # shuffle-like groupings spread tuples round robin over the bolt's N
                # tasks (from this partition's own start, so replays agree): every task
                # runs whatever the number of Spark partitions upstream
                spread = (positions is None
                          and grouping.kind in (GroupingKind.SHUFFLE, GroupingKind.NONE,
                                                GroupingKind.LOCAL_OR_SHUFFLE)
                          and self.topology.components[consumer].parallelism > 1)
                routes.setdefault(stream, []).append(_Route(
                    consumer, grouping, fused,
                    self.topology.components[consumer].parallelism, positions,
                    not fused and where in (DRIVER, COMMIT), one, spread))
        return routes

    def _emit_plan(self, component: str, stream: str) -> _EmitPlan:
        """What every emit of ``component`` on ``stream`` needs, computed on its first emit."""
        spec = self.topology.components[component]
        fields = spec.streams.get(stream)
        if fields is None:
            msg = (
                f"bolt {component!r} emitted on undeclared stream {stream!r}; "
                                f"it declares {sorted(spec.streams)}"
            )
            raise TopologyError(msg)
        routes = self._routes[component].get(stream, [])
        plain = None
        if (not self._capture and self._acking is None and self._order is None
                and not any(r.fused for r in routes)):
            plain = [_FastRoute(r, {}, {}) for r in routes]
            self._slots.extend(f.slots for f in plain)
        found = _EmitPlan(fields, routes, f"{component}.emitted", len(fields), plain)
        self._plans.setdefault(component, {})[stream] = found
        return found

    def _add(self, dest: str, task: int, src: str, stream: str, entry: list[Any] | bytes,
             meta: bytes | None) -> None:
        """Queue one tuple for the packed row of ``(dest, task, src, stream)``."""
        key = (dest, task, src, stream)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = [[], None]
        entries = group[0]
        if meta is not None and group[1] is None:
            group[1] = [None] * len(entries)
            self._forget_slots()  # the plain path appends no meta to this group any more
        entries.append(entry)
        if group[1] is not None:
            group[1].append(meta)
        self._queued += 1
        if self._order is not None:
            self._order.append(key)
        if type(entry) is bytes:
            self._queued_bytes += len(entry)

    def _forget_slots(self) -> None:
        for slots in self._slots:
            slots.clear()

    def _emit(self, component: str, task: int, stream: str, values: list[Any],
              anchors: Sequence[Tuple]) -> None:
        plan = self._plans.get(component, _NO_PLANS).get(stream)
        fields, routes, counter, n_fields, plain = plan or self._emit_plan(component, stream)
        if plain is not None and len(values) == n_fields:
            for a in anchors:
                if a._ids is not None:
                    break
            else:  # untracked, to other stages and sinks: the per-tuple hot path
                self.counters[counter] += 1
                self._emit_plain(stream, component, task, values, plain)
                return
        if len(values) != n_fields:
            msg = (
                f"bolt {component!r} emitted {len(values)} values on stream "
                                f"{stream!r}, which declares {len(fields)} fields "
                                f"{fields.to_list()}: {values!r}"
            )
            raise TopologyError(msg)
        self.counters[counter] += 1
        if self._capture:
            self._out.append(Outgoing(CAPTURE, 0, component, stream, dumps(values), None))
        if self._acking is not None:
            self._emit_tracked(component, task, stream, values, fields, anchors, routes)
            return
        meta = None
        for a in anchors:
            if a._ids is not None:
                meta = _meta_of(anchors)
                break
        entry: list[Any] | bytes | None = None
        for route in routes:
            if route.fused:
                tup = Tuple(values, fields, component, stream, source_task=task)
                tup._ids = meta
                for t in self._targets(route, values, self.partition):
                    self._deliver(route.consumer, t, tup)
                continue
            if entry is None:
                entry = values
                for v in values:
                    if type(v) not in _IMMUTABLE:
                        entry = dumps(values)
                        break
            if route.one >= 0:  # fields grouping on one field, the usual case
                self._add(route.consumer,
                          stable_hash_one(values[route.one]) % route.parallelism,
                          component, stream, entry, meta)
            else:
                for t in self._targets(route, values, task):
                    self._add(route.consumer, t, component, stream, entry, meta)

    def _emit_plain(self, stream: str, component: str, task: int, values: list[Any],
                    plain: list[_FastRoute]) -> None:
        """``_emit`` of an untracked tuple to other stages and sinks: the per-tuple hot path.

        What ``_add`` does, with the packed row's entry list of each ``(route, task)`` kept
        until the next drain, and a one-field grouping's task remembered per string value.
        """
        entry: list[Any] | bytes = values
        for v in values:
            if type(v) not in _IMMUTABLE:
                entry = dumps(values)
                break
        for route, memo, slots in plain:
            one = route.one
            if one < 0:
                for t in self._targets(route, values, task):
                    self._add(route.consumer, t, component, stream, entry, None)
                continue
            v = values[one]
            if type(v) is str:
                t = memo.get(v)
                if t is None:
                    t = stable_hash_one(v) % route.parallelism
                    if len(memo) < _TASK_MEMO:
                        memo[v] = t
            else:
                t = stable_hash_one(v) % route.parallelism
            entries = slots.get(t)
            if entries is None:
                group = self._groups.get((route.consumer, t, component, stream))
                if group is not None and group[1] is not None:  # it carries metas
                    self._add(route.consumer, t, component, stream, entry, None)
                    continue
                if group is None:
                    group = self._groups[(route.consumer, t, component, stream)] = [[], None]
                entries = slots[t] = group[0]
            entries.append(entry)
            self._queued += 1
            if type(entry) is bytes:
                self._queued_bytes += len(entry)

    def _targets(self, route: _Route, values: list[Any], partition: int) -> list[int]:
        """The consumer's tasks for one tuple (``partition``: where a shuffle keeps it)."""
        if route.one >= 0:
            return [stable_hash_one(values[route.one]) % route.parallelism]
        if route.spread:  # round robin, from this partition's own start: replays agree
            sent = self._spread.get(route.consumer, self.partition)
            self._spread[route.consumer] = sent + 1
            return [sent % route.parallelism]
        h = (stable_hash([values[i] for i in route.positions])
             if route.positions is not None else None)
        return task_for(route.grouping, route.parallelism, h, partition)

    def _emit_tracked(self, component: str, task: int, stream: str, values: list[Any],
                      fields: Fields, anchors: Sequence[Tuple], routes: list[_Route]) -> None:
        """``_emit`` with anchoring: each copy sent to a task is a new tuple of the trees."""
        tracked = [a._ids for a in anchors if isinstance(a._ids, TrackedTuple)]
        entry: list[Any] | bytes | None = None
        for route in routes:
            targets = self._targets(route, values, self.partition if route.fused else task)
            if route.fused:
                for t in targets:
                    tup = Tuple(values, fields, component, stream, source_task=task)
                    if tracked:
                        tup._ids = self._anchors.receive(self._anchors.emit(tracked))
                    self._deliver(route.consumer, t, tup)
                continue
            if entry is None:
                entry = _entry(values)
            for t in targets:
                meta = None
                if tracked and not route.to_driver:  # sinks commit with the batch: no edge
                    ids = self._anchors.emit(tracked)
                    if ids.is_anchored:
                        meta = pickle.dumps(dict(ids.anchors_to_ids), protocol=5)
                self._add(route.consumer, t, component, stream, entry, meta)

    def _track_input(self, tup: Tuple) -> None:
        """Give an arriving tuple its place in its trees (a spout tuple starts one)."""
        if self._spout_task is not None:
            if isinstance(tup._ids, SpoutEmit):  # a free-form spout's tracked emit
                emit = tup._ids
                tuple_id = self._idgen.next_id()
                self._outbox.init(emit.root, self._spout_task, tuple_id, tuple(emit.msg),
                                  emit.now_ms)
                tup._ids = self._anchors.receive(MessageId({emit.root: tuple_id}))
                return
            if tup.message_id is None:  # emitted without a message id: untracked
                tup._ids = None
                return
            attempt, now = tup._ids if tup._ids is not None else (0, None)
            where = tup.message_id  # (topic, partition, offset), or a list row's "b:i"
            topic, part, offset = list_position(where) if isinstance(where, str) else where
            root = root_id_for(self._spout_task, topic, part, offset, attempt)
            tuple_id = self._idgen.next_id()
            self._outbox.init(root, self._spout_task, tuple_id, (topic, part, offset, attempt),
                              now)
            tup._ids = self._anchors.receive(MessageId({root: tuple_id}))
        elif isinstance(tup._ids, bytes):
            tup._ids = self._anchors.receive(MessageId(pickle.loads(tup._ids)))
        else:
            tup._ids = None

    def hold(self, component: str, tuples: Sequence[Tuple]) -> None:
        """``tuples`` enter a stateful windowed bolt's state, which commits with this batch.

        At least once, their trees are acked now, as Storm's stateful windowing acks tuples
        once the window state holding them is checkpointed: a replay would only duplicate
        them in the window. What the window later emits starts new, untracked tuples.
        """
        if self._acking is None:
            return
        for tup in tuples:
            self._track_input(tup)
            if isinstance(tup._ids, TrackedTuple):
                self._acked(component, tup)
            tup._ids = None

    def run_windows(self, component: str, task: int, windowed: Any, tuples: list[Tuple],
                    now_ms: int, late_stream: str | None, acks_on_arrival: bool) -> None:
        """One batch of a windowed bolt task (a :class:`~kstorm._runtime.window_task.WindowedTask`).

        A stateful or persistent window acks its tuples as they arrive (:meth:`hold`).
        Otherwise, at least once, each tuple keeps its place in its trees while a window may
        need it (the window state carries it from batch to batch), the windows' emits are
        anchored to it (:class:`kstorm.windowing.bolt.WindowedOutputCollector`), and it is
        acked once no later window holds it (``settle``): a failure downstream fails its
        tree and the spout replays it (seed 004).

        The bolt instance's own fields travel with the windows (``bolt_fields.py``).
        """
        running = self._task(component, task)
        bolt = running.bolt  # its fields as the windows left them
        bolt_fields.restore(bolt, windowed.bolt_fields)
        out = WindowOutput(self, component, task, late_stream)
        if acks_on_arrival or self._acking is None:
            self.hold(component, tuples)
            windowed.process(tuples, now_ms, out)
        else:
            for tup in tuples:
                self._track_input(tup)
            windowed.process(tuples, now_ms, out)
            for tup in windowed.settle(tuples):
                if isinstance(tup._ids, TrackedTuple) and not tup._ids.settled:
                    self._acked(component, tup)
        windowed.bolt_fields = bolt_fields.save(bolt, component, (
            running.collector, running.basic, running.context, running.state))

    def _acked(self, component: str, tup: Tuple) -> None:
        self.counters[f"{component}.acked"] += 1
        if isinstance(tup._ids, TrackedTuple):
            self._outbox.extend(self._anchors.ack(tup._ids))

    def _failed(self, component: str, tup: Tuple) -> None:
        self.counters[f"{component}.failed"] += 1
        if isinstance(tup._ids, TrackedTuple):
            self._outbox.extend(self._anchors.fail(tup._ids))

    def _acker_rows(self) -> list[Outgoing]:
        """One row per acker task: this partition's acker messages, combined per root."""
        return [Outgoing(ACKER, acker, self.stage.head, "",
                         pickle.dumps(payload, protocol=5), None)
                for acker, payload in sorted(self._outbox.payloads().items())]

    # ---- execution -----------------------------------------------------------------
    def bolt(self, component: str, task: int) -> Any:
        """The bolt instance running ``component``'s task ``task`` in this executor."""
        return self._tasks[(component, task)].bolt

    def _task(self, component: str, task: int) -> _Task:
        key = (component, task)
        found = self._tasks.get(key)
        if found is not None:
            return found
        spec = self.topology.components[component]
        kept = None if self._instances is None else self._instances.get(key)
        if kept is not None:
            bolt, collector, basic, context = kept
            # the runtime's own context object, kept by the bolt since prepare: the batch moves
            object.__setattr__(context, "batch_id", self.batch_id)
            collector._emit, collector._ack, collector._fail = self._collector_fns(component,
                                                                                   task)
            self.counters[f"{component}.reused"] += 1
            return self._with_state(key, _Task(bolt, collector, basic, context,
                                               f"{component}.executed"))
        bolt = copy.deepcopy(spec.component)
        context = TopologyContext(self.topology_name, component, task, spec.parallelism,
                                  self.batch_id, dict(spec.streams), self.topology)
        windowed = bool(getattr(bolt, "is_windowed_bolt", False))
        collector_type = _windowed_collector() if windowed else OutputCollector
        collector = collector_type(*self._collector_fns(component, task))
        conf = self.settings.component_conf(self.conf, spec.conf)  # Storm's defaults first
        basic = None
        if is_batch_bolt(bolt):
            bolt.prepare(conf, context, BatchOutputCollector(collector._emit), self.attempt)
        elif isinstance(bolt, BaseBasicBolt):
            basic = BasicOutputCollector(collector)
            bolt.prepare(conf, context)
        elif isinstance(bolt, BaseRichBolt) or windowed:
            bolt.prepare(conf, context, collector)
        else:
            msg = (
                f"bolt {component!r} is a {type(bolt).__name__}: expected a "
                                "BaseRichBolt, BaseBasicBolt or BaseStatefulBolt"
            )
            raise TopologyError(msg)
        self.counters[f"{component}.prepared"] += 1
        if self._instances is not None and not is_batch_bolt(bolt):
            self._instances[key] = (bolt, collector, basic, context)
        return self._with_state(key, _Task(bolt, collector, basic, context,
                                           f"{component}.executed"))

    def _with_state(self, key: tuple[str, int], found: _Task) -> _Task:
        """Give a stateful bolt the batch's state; register the task for this batch."""
        component, task = key
        bolt = found.bolt
        if isinstance(bolt, BaseStatefulBolt) or getattr(bolt, "is_stateful_windowed_bolt",
                                                         False):
            if self._state_for is None:
                msg = f"stateful bolt {component!r} has no state provider"
                raise TopologyError(msg)
            state: Any = self._state_for(component, task)
            if (hasattr(state, "key_group") and not getattr(bolt, "is_windowed_bolt", False)
                    and why_not_keyed(self.topology, component) is None):
                state.tagging = True
                found.keyed = state
                found.group_fields = {(g.component, g.stream): list(g.fields or ())
                                      for g in self.topology.components[component].inputs}
            bolt.init_state(state)
            found.state = state
        self._tasks[key] = found
        return found

    def _collector_fns(self, component: str, task: int) -> tuple[Any, Any, Any]:
        """(emit, ack, fail) of ``component``'s task ``task`` in this batch's executor."""
        if self._acking is None:
            counters, acked, failed = self.counters, f"{component}.acked", f"{component}.failed"
            fails_batch = self._fail_fails_batch

            def on_ack(t: Tuple) -> None:
                counters[acked] += 1

            def on_fail(t: Tuple) -> None:
                counters[failed] += 1
                if fails_batch:
                    msg = (f"bolt {component!r} failed a tuple of batch {self.batch_id}: "
                           f"{t.values!r} (exactly once, a failed tuple fails its batch, "
                           "which is re-run)")
                    raise FailedException(msg)
        else:
            def on_ack(t: Tuple) -> None:
                self._acked(component, t)

            def on_fail(t: Tuple) -> None:
                self._failed(component, t)
        return partial(self._emit, component, task), on_ack, on_fail

    def _deliver(self, component: str, task: int, tup: Tuple) -> None:
        t = self._tasks.get((component, task)) or self._task(component, task)
        self.counters[t.executed] += 1
        if t.keyed is not None:
            t.keyed.key_group = _key_group(t, tup)
        try:
            if t.basic is not None:
                run_basic(t.bolt, t.basic, t.collector, tup)
            else:
                t.bolt.execute(tup)
        except (TopologyError, FailedException):
            raise
        except Exception as exc:
            if self._fail_on_error:
                raise bolt_failed(component, exc) from exc
            if is_batch_bolt(t.bolt):
                raise batch_bolt_failed(component, exc) from exc
            self._dead_letter(component, tup, exc)
            if isinstance(tup._ids, TrackedTuple) and not tup._ids.settled:
                # the dead-letter record now holds the tuple: nothing to replay
                self._outbox.extend(self._anchors.ack(tup._ids))
        finally:
            if t.keyed is not None:
                t.keyed.key_group = None

    def execute_window(self, component: str, task: int, window: Any) -> None:
        """Run a windowed bolt's ``execute(window)``; its unanchored emits anchor to the window."""
        t = self._task(component, task)
        self.counters[f"{component}.windows"] += 1
        t.collector.window = window  # type: ignore[attr-defined]
        try:
            t.bolt.execute(window)
        except (TopologyError, FailedException):
            raise
        except Exception as exc:
            if self._fail_on_error:
                raise bolt_failed(component, exc) from exc
            where = Tuple([repr(window)], Fields("window"), component, "window")
            self._dead_letter(component, where, exc)
        finally:
            t.collector.window = None  # type: ignore[attr-defined]

    def bolt_error(self, component: str, tup: Tuple, exc: Exception) -> None:
        """``tup`` could not be processed by ``component``: dead letter, or raise (policy)."""
        if self._fail_on_error:
            raise bolt_failed(component, exc) from exc
        self._dead_letter(component, tup, exc)

    def emit_from(self, component: str, task: int, stream: str, values: list[Any],
                  anchors: Sequence[Tuple] = ()) -> None:
        """Emit on behalf of ``component`` (the runtime's own emits, e.g. late tuples)."""
        self._emit(component, task, stream, values, anchors)

    def _dead_letter(self, component: str, tup: Tuple, exc: BaseException) -> None:
        self.counters[f"{component}.dead_lettered"] += 1
        self._dead_by_type[(component, type(exc).__name__)] += 1
        where = tup.message_id if isinstance(tup.message_id, tuple) else (None, None, None)
        topic, part, offset = (list(where) + [None, None, None])[:3]
        values = [component, tup.source_stream, type(exc).__name__,
                  f"{exc}\n{traceback.format_exc(limit=5)}", repr(tup.values)[:10_000],
                  topic, part, offset, None]
        self._out.append(Outgoing(DEAD_LETTER, 0, component, tup.source_stream,
                                  dumps(values), None))

    def dead_letter_record(self, component: str, values: list[Any]) -> None:
        """Send a record that never became a tuple (e.g. undecodable bytes) to dead letters."""
        self.counters[f"{component}.dead_lettered"] += 1
        self._out.append(Outgoing(DEAD_LETTER, 0, component, "default",
                                  dumps(values), None))

    def process(self, tuples: Iterable[tuple[int, Tuple]]) -> Iterator[Outgoing]:
        """Execute the stage's head bolt on ``(task, tuple)`` pairs; yields what leaves.

        One :class:`Outgoing` per tuple, in emit order (:meth:`process_rows` packs them).
        """
        if self._order is None:
            self._order = []
            self._plans = {}  # plans made before take the path that records the order
        return self._in_emit_order(self.process_rows(tuples))

    def finish(self) -> Iterator[Outgoing]:
        """:meth:`finish_rows`, one :class:`Outgoing` per tuple, in emit order."""
        if self._order is None:
            self._order = []
            self._plans = {}  # plans made before take the path that records the order
        return self._in_emit_order(self.finish_rows())

    def _in_emit_order(self, rows: Iterable[Outgoing | Packed]) -> Iterator[Outgoing]:
        """Packed rows as one :class:`Outgoing` per tuple, in the order they were emitted."""
        tuples: dict[tuple[str, int, str, str], list[Outgoing]] = {}
        for row in rows:
            if isinstance(row, Packed):
                tuples.setdefault((row.dest, row.task, row.src, row.stream), []).extend(
                    unpacked([row]))
            else:
                yield row
        order, self._order = self._order or [], []
        recorded = Counter(order)
        sent: Counter[tuple[str, int, str, str]] = Counter()
        for key, rows_of_key in tuples.items():  # emitted before the view was asked for
            sent[key] = len(rows_of_key) - recorded[key]
            yield from rows_of_key[:sent[key]]
        for key in order:
            yield tuples[key][sent[key]]
            sent[key] += 1

    def process_rows(self, tuples: Iterable[tuple[int, Tuple]]
                     ) -> Iterator[Outgoing | Packed]:
        """Execute the stage's head bolt on ``(task, tuple)`` pairs; yields envelope rows.

        Tuples for bolts and sinks leave as :class:`Packed` rows (many tuples per task and
        destination); dead letters, captures and acker messages as :class:`Outgoing` rows.
        """
        head = self.stage.head
        source = self.stage.is_source
        tracking = self._acking is not None
        deliver = self._deliver
        for task, tup in tuples:
            if tracking:
                self._track_input(tup)
            if source:  # a spout's raw rows becoming envelope rows for sinks / joins
                self._emit(head, task, tup.source_stream, tup.values, (tup,))
                if tracking and isinstance(tup._ids, TrackedTuple):
                    self._outbox.extend(self._anchors.ack(tup._ids))
            else:
                deliver(head, task, tup)
            if (self._queued >= ROW_TUPLES or self._queued_bytes >= ROW_BYTES
                    or len(self._out) >= 4096):
                yield from self._drain(carry=True)
        yield from self._drain()

    def deliver_rows(self, tuples: Iterable[tuple[str, int, Tuple]]
                     ) -> Iterator[Outgoing | Packed]:
        """Execute ``(component, task, tuple)`` triples; yields envelope rows.

        The commit stage's input: several of its bolts get tuples from the processing phase.
        """
        deliver = self._deliver
        for component, task, tup in tuples:
            tup._ids = None  # the commit phase tracks nothing: the batch is the unit
            deliver(component, task, tup)
        yield from self._drain()

    def start_tasks(self, components: Iterable[str]) -> None:
        """Create (and prepare) every task of ``components`` now.

        A committer finishes every batch, with or without tuples.
        """
        for component in components:
            for task in range(self.topology.components[component].parallelism):
                self._tasks.get((component, task)) or self._task(component, task)

    def finish_rows(self) -> Iterator[Outgoing | Packed]:
        """End of this partition's batch: ``finish_batch``, then ``cleanup``; upstream first."""
        for component in self.stage.bolts:
            for (c, _), t in list(self._tasks.items()):
                if c != component:
                    continue
                if t.basic is not None:
                    t.basic.input = None
                    t.bolt.finish_batch(t.basic)
                else:
                    t.bolt.finish_batch()
                yield from self._drain()
        for key, t in self._tasks.items():
            if self._instances is not None and key in self._instances:
                continue  # kept for the next batch: cleanup when the process lets it go
            cleanup = getattr(t.bolt, "cleanup", None)
            if cleanup is not None:
                cleanup()
        if self._acking is not None:
            self._out.extend(self._acker_rows())
        self._warn_dead_letter_storms()
        yield from self._drain()

    def _warn_dead_letter_storms(self) -> None:
        """A WARNING per bolt that sent most of this batch's tuples to dead letters.

        With one exception type: a programming error (a literal port's ``AttributeError``),
        not bad data, would otherwise only show as a growing dead-letter topic.
        """
        for (component, error), count in sorted(self._dead_by_type.items()):
            executed = self.counters.get(f"{component}.executed", 0)
            if count >= STORM_MIN and count * 2 > executed:
                _log.warning(
                    "bolt %r sent %d of the %d tuples it executed in batch %s to dead letters "
                    "with %s: a programming error rather than bad input? "
                    "kstorm.bolt.error.policy = 'fail' makes such errors stop the topology",
                    component, count, executed, self.batch_id, error)
        self._dead_by_type.clear()

    def pending_rows(self) -> Iterator[Outgoing | Packed]:
        """What is waiting to leave (dead letters...) without finishing any bolt."""
        yield from self._drain()

    def _drain(self, *, carry: bool = False) -> Iterator[Outgoing | Packed]:
        """What is queued, as rows; ``carry``: keep combined rows for a sink to combine again.

        With ``carry`` (a drain in the middle of the input), a sink's rows that its
        ``combine`` folded to at most half of :data:`ROW_TUPLES` stay queued, to be folded
        with the next tuples: a task then sends a running count's sink about one row per key.
        """
        # (the per-tuple view, process(), gives every emitted tuple: nothing combined there)
        combiners = self._combiners if self._order is None else {}
        out: list[Outgoing | Packed] = []
        kept: dict[tuple[str, int, str, str], list[Any]] = {}
        for (dest, task, src, stream), (entries, metas) in self._groups.items():
            if metas is None and dest in combiners:
                entries, combined = self._combined(dest, src, stream, entries)
                if carry and combined and len(entries) <= ROW_TUPLES // 2:
                    kept[(dest, task, src, stream)] = [entries, None]
                    continue
            out.append(Packed(dest, task, src, stream, pack(entries),
                              None if metas is None else pickle.dumps(metas, protocol=5),
                              self._seq))
            self._seq += len(entries)
        out.extend(self._out)
        self._out, self._groups, self._queued_bytes = [], kept, 0
        self._queued = sum(len(entries) for entries, _ in kept.values())
        self._forget_slots()
        return iter(out)

    def _combined(self, sink: str, src: str, stream: str,
                  entries: list[Any]) -> tuple[list[Any], bool]:
        """A task's tuples for ``sink``, folded by the sink's ``combine`` if it can.

        Also says whether ``combine`` saw them (no pickled values among them): only such
        rows may wait to be combined again.
        """
        if bytes in map(type, entries):
            return entries, False  # mutable values (pickled at emit): sent as they are
        fields = self.topology.components[src].streams[stream]
        try:
            combined = self._combiners[sink].combine(fields, entries)
        except Exception as exc:
            msg = f"sink {sink!r}: combine raised {type(exc).__name__}: {exc}"
            raise SinkError(msg) from exc
        if combined is None:
            return entries, True
        if not isinstance(combined, list) or any(
                not isinstance(row, list) or len(row) != len(fields) for row in combined):
            msg = (f"sink {sink!r}: combine must return None or a list of lists of "
                   f"{len(fields)} values (fields {fields.to_list()})")
            raise SinkError(msg)
        self.counters[f"{sink}.combined"] += len(entries) - len(combined)
        return combined, True


class WindowOutput:
    """Routes a windowed bolt task's results through its stage's executor.

    Windows go to ``execute(window)``, late tuples to the late stream (or are counted and
    logged), errors to the bolt error policy (:class:`kstorm._runtime.window_task.WindowedTask`).
    """

    def __init__(self, executor: StageExecutor, component: str, task: int,
                 late_stream: str | None) -> None:
        self.executor, self.component, self.task = executor, component, task
        self.late_stream = late_stream

    def window(self, window: Any) -> None:
        self.executor.execute_window(self.component, self.task, window)

    def late(self, tuple_: Tuple) -> None:
        self.executor.counters[f"{self.component}.late"] += 1
        if self.late_stream is not None:
            self.executor.emit_from(self.component, self.task, self.late_stream, [tuple_],
                                    (tuple_,))
        else:
            _window_log.info("windowed bolt %r task %d: late tuple %r (message id %r) dropped",
                             self.component, self.task, tuple_, tuple_.message_id)

    def error(self, tuple_: Tuple, exc: Exception) -> None:
        self.executor.bolt_error(self.component, tuple_, exc)


def _key_group(t: _Task, tup: Tuple) -> int | None:
    """The routing hash of ``tup``'s grouping values: the key group its fields grouping used.

    None for a tuple of no fields grouping (a tick tuple): what it writes has no key group.
    """
    where = (tup.source_component, tup.source_stream)
    positions = t.group_fields.get(where)  # type: ignore[union-attr]
    if positions is None:
        return None
    if positions and isinstance(positions[0], str):  # field names, first seen: positions
        positions = t.group_fields[where] = [tup.fields.index(f) for f in positions]  # type: ignore[index]
    values = tup.values
    if len(positions) == 1:
        return stable_hash_one(values[positions[0]])
    return stable_hash([values[i] for i in positions])


def bolt_failed(component: str, exc: BaseException) -> BoltError:
    """The error that stops the topology when a bolt raises under the ``fail`` policy."""
    return BoltError(f"bolt {component!r} raised {type(exc).__name__}: {exc} "
                     "(kstorm.bolt.error.policy = 'fail')")


def batch_bolt_failed(component: str, exc: BaseException) -> BoltError:
    """A batch bolt's ``execute`` raised: its transaction fails and is replayed.

    As Storm's *Transactional topologies* says, whatever ``kstorm.bolt.error.policy`` says.
    """
    return BoltError(f"batch bolt {component!r} raised {type(exc).__name__}: {exc} (a batch "
                     "bolt's error fails its transaction, which is replayed with the same txid)")


def _windowed_collector() -> type[OutputCollector]:
    from kstorm.windowing.bolt import WindowedOutputCollector

    return WindowedOutputCollector


def _combines(component: Any) -> bool:
    """Whether ``component`` is a sink that overrides :meth:`BaseSink.combine`."""
    return isinstance(component, BaseSink) and type(component).combine is not BaseSink.combine


def _meta_of(anchors: Sequence[Tuple]) -> bytes | None:
    """Anchor bookkeeping carried with an emitted tuple (reliability; None when untracked)."""
    ids = [a._ids for a in anchors if a._ids is not None]
    return pickle.dumps(ids, protocol=5) if ids else None
