"""Run a topology in this process, without Spark or a broker.

Storm's ``testing``, Kafka Streams' ``TopologyTestDriver``, Bytewax's ``run_main``:

:class:`TopologyTestDriver` runs the plan the Spark runtime runs (``kstorm/_runtime/plan.py``)
with the same :class:`~kstorm._runtime.executor.StageExecutor`, windowed-bolt task
(:class:`~kstorm._runtime.window_task.WindowedTask`), windowed-aggregate state
(:class:`~kstorm.windowing.aggregate.AggregateWindows`) and commit stage; only moving tuples
between stages is plain Python instead of a Spark exchange. A batch, here as on Spark:

1. Each piped tuple enters as its spout's: through the spout's source stage (to consumers that
   read envelope rows) and straight into the stages that read the spout's rows, with the
   task Spark gives it (round robin from the partition, or ``xxhash64`` of the grouping
   fields as Spark computes it: ``kstorm/_runtime/sparkhash.py``).
2. Stages run in plan order; each stage's bolt instances live across batches (``prepare``
   once per task), stateful bolts get their task's ``KeyValueState`` (seed 000's protocol:
   changes prepared at the end of the task, committed after the sinks), windowed bolts run
   their windows at the driver's clock.
3. The commit phase: windowed aggregates fold the batch in and close the windows the
   watermark passed, committers run, sinks *receive* their tuples (kept for
   :meth:`TopologyTestDriver.output`; nothing is written to Redis or Kafka), dead letters
   are kept.
4. A failed attempt (``FailedException``, a bolt raising under the ``fail`` error policy)
   rolls everything back (state, windows, outputs) and the batch runs again, up to
   ``kstorm.transaction.max.attempts`` (no backoff sleep); then
   ``kstorm.transaction.failure.policy`` applies: ``fail`` raises the runtime's error,
   ``dead-letter`` dead-letters the batch's spout tuples. The attempts are the loop the
   Spark runner's commit phase runs too (``kstorm/_runtime/batch_loop.py``).

At least once, a ``KafkaSpout``'s and a ``ListSpout``'s tuples are tracked as on Spark (a
list row ``"b:i"`` as offset ``i`` of partition ``b``): the executors' acker
messages go through :func:`~kstorm.acking.acker.run_acker_batch` (one in-memory store per
acker task) and the spout side is the runtime's own (:func:`~kstorm._runtime.reliability.
spout_batch`, :class:`~kstorm.acking.spout_tracker.SpoutTracker`): failed and timed-out
tuples are replayed in a later batch per the spout's ``RetryPolicy``, then dead-lettered.

Free-form spouts (``next_tuple``): :meth:`TopologyTestDriver.run` runs them as Spark does,
through the runtime's :class:`~kstorm._runtime.spout_executor.SpoutExecutor` (its batch log
and notices in a temporary directory), batch after batch until they emit nothing and no tree
is pending. At least once their tuples with a message id are tracked as on Spark
(:func:`~kstorm.acking.emits.emits_batch`): the spout's ``ack``/``fail`` run before its next
``next_tuple``, and it re-emits what it wants to. Tuples piped by hand into a free-form
spout (:meth:`TopologyTestDriver.pipe`) are untracked.

Transactional spouts: :meth:`TopologyTestDriver.run` plans and emits their transactions
as Spark does (``kstorm/_runtime/tx_planner.py``: the coordinator's ``is_ready`` and
metadata, a coordinated spout's emitter tasks with ``cleanup_before``, a partitioned or
opaque spout's partitions), one transaction a batch, txids from 1, until the coordinator is
not ready or a transaction emits nothing. Tuples piped by hand (:meth:`pipe`, without the
attempt first) are a batch of their own. Time is the driver's clock (:meth:`advance_time`),
the batch's processing time.

Example:
    >>> driver = TopologyTestDriver(builder.create_topology())  # doctest: +SKIP
    >>> driver.pipe("sentences", [["a b a"]])                   # doctest: +SKIP
    >>> driver.output("count")                                  # doctest: +SKIP
    [['a', 1], ['b', 1], ['a', 2]]
"""

from __future__ import annotations

import copy
import itertools
import pickle
import shutil
import tempfile
import weakref
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from kstorm._kafka.clocks import NEW_STREAM, clock_of
from kstorm._runtime import driver_rows
from kstorm._runtime.aggregate_task import read_rows
from kstorm._runtime.batch_loop import (
    ClosedWindows,
    failure_error,
    fold_partials,
    given_up_reason,
    run_transaction,
)
from kstorm._runtime.commit_phase import (
    BatchCommit,
    CommitStage,
    batch_commit,
    run_commit_phase,
)
from kstorm._runtime.deadletter import as_record, given_up_letter
from kstorm._runtime.envelope import (
    ACKER,
    CAPTURE,
    DEAD_LETTER,
    EMPTY,
    METRICS,
    Outgoing,
    Packed,
    envelope_tuples,
    to_arrow,
)
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.local_acking import LocalAcking
from kstorm._runtime.plan import (
    COMMIT,
    DRIVER,
    PartitionKind,
    Plan,
    Stage,
    compile_plan,
    reliability_plan,
    source_kind,
)
from kstorm._runtime.reconcile import FIRST_TXID
from kstorm._runtime.sparkhash import spark_task
from kstorm._runtime.spout_executor import BatchBounds, SpoutExecutor
from kstorm._runtime.spout_log import SpoutLog
from kstorm._runtime.spout_notices import NoticeBook
from kstorm._runtime.ticks import counts, due, tick_periods, tick_rows
from kstorm._runtime.transaction import Decision, Transactions
from kstorm._runtime.tx_planner import TxPlanner, emit_part
from kstorm._runtime.window_store import PersistentTuples
from kstorm._runtime.window_task import WindowedTask, interleaved
from kstorm.acking.emits import EmitMsg, Notice, SpoutEmit
from kstorm.acking.ids import emit_root_id
from kstorm.acking.offsets import (
    KafkaMessageId,
    list_message_id,
    list_position,
)
from kstorm.bolt import BaseStatefulBolt
from kstorm.component import TopologyContext
from kstorm.config import TopologyConfig
from kstorm.errors import TopologyError
from kstorm.grouping import GroupingKind
from kstorm.sink import UnmadeTuples
from kstorm.spout import BaseRichSpout
from kstorm.state import InMemoryKeyValueState, state_namespace
from kstorm.topology import StormTopology
from kstorm.transactional.attempt import TransactionAttempt
from kstorm.tuple import Fields, Tuple
from kstorm.windowing.aggregate import AggregateWindows, merge
from kstorm.windowing.bolt import acks_on_arrival
from kstorm.windowing.durations import Duration
from kstorm.windowing.sessions import bind_session_keys

__all__ = ["TopologyTestDriver"]

_DRIVER_SERIAL = itertools.count()  # each driver's state namespace: testdriver-<n>/<name>

_KAFKA_META = ("topic", "partition", "offset", "kafka_key", "kafka_timestamp", "kafka_headers")


class _Chunks:
    """A persistent window's chunk backend in memory (copied before each attempt)."""

    def __init__(self) -> None:
        self.data: dict[int, bytes] = {}

    def get(self, key: int) -> bytes | None:
        return self.data.get(key)

    def put(self, key: int, blob: bytes) -> None:
        self.data[key] = blob

    def remove(self, key: int) -> None:
        self.data.pop(key, None)


@dataclass
class _Window:
    """One windowed bolt task: its windows and its persistent window's chunks."""

    task: WindowedTask
    chunks: _Chunks
    timer: int | None = None  # when to run it without input (set after each run)


@dataclass
class _Attempt:
    """What one attempt of a batch produced, applied only once it succeeds."""

    sinks: dict[str, list[Tuple]] = field(default_factory=lambda: defaultdict(list))
    captured: list[tuple[str, str, list[Any]]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    states: list[tuple[Any, Any]] = field(default_factory=list)  # (bolt, state) prepared
    acker: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    notices: dict[str, list[Notice]] = field(default_factory=dict)  # free-form spouts
    rows: list[Outgoing | Packed] = field(default_factory=list)  # for the commit phase
    folded: dict[str, dict[str, Any]] = field(default_factory=dict)  # aggregates' payloads


class TopologyTestDriver:
    """A topology run in this process, fed by hand (see the module docstring).

    Args:
        topology: what ``TopologyBuilder.create_topology()`` returned.
        conf: the topology's configuration (validated as on Spark; ``kstorm.*`` keys about
            Spark, Kafka or checkpoints are accepted and mean nothing here).
        name: the topology's name (its bolts' ``TopologyContext``, state namespaces).
        start_time_ms: the driver clock's start (the first batch's processing time).
    """

    def __init__(self, topology: StormTopology, conf: Mapping[str, Any] | None = None, *,
                 name: str = "test", start_time_ms: int = 0) -> None:
        self.topology = topology
        self.name = name
        self.conf = dict(conf or {})
        # one process: topology.workers (Spark executors on a cluster) means nothing here
        checked = {k: v for k, v in self.conf.items() if k != "topology.workers"}
        self.settings = TopologyConfig.from_conf({**checked, "kstorm.capture.emitted": True})
        self.now_ms = int(start_time_ms)
        self._ticks = tick_periods(topology, self.settings.tick_tuple_freq_secs)
        self._tick_counts = counts(self._ticks, self.now_ms)  # each bolt's last tick
        self.plan: Plan = compile_plan(topology, self._ticks)
        self._stage = CommitStage(topology, self.plan, name, self.conf, self.settings)
        self.batch_id = 0  # the next batch
        self.counters: Counter[str] = Counter()
        self.dead_letters: list[dict[str, Any]] = []
        self._emitted: list[tuple[str, str, list[Any]]] = []
        self._received: dict[str, list[Tuple]] = defaultdict(list)
        self._instances: dict[int, dict[tuple[str, int], Any]] = defaultdict(dict)
        self._states: dict[tuple[str, int], InMemoryKeyValueState] = {}
        self._windows: dict[tuple[str, int], _Window] = {}
        self._aggregates: dict[str, AggregateWindows] = {}
        self._offsets: Counter[tuple[str, str, int]] = Counter()
        # unique in the process: ``id(self)`` is reused once a driver left unclosed is
        # collected, and the next driver read the committed state it left behind
        self._namespace = f"testdriver-{next(_DRIVER_SERIAL)}/{name}"
        weakref.finalize(self, _forget_state, self._namespace)  # not closed: freed too
        self._tx = Transactions(self.settings.transaction_max_attempts, 0,
                                self.settings.transaction_failure_policy, 0)
        self._closed = False
        # at least once: Kafka and list spouts' tuples are tracked as on Spark (ackers, retries)
        self._acking = reliability_plan(topology, self.plan, self.settings)
        self._acks = LocalAcking(topology, self._acking)
        self._runners: dict[str, SpoutExecutor] = {}  # free-form spouts, once run() polls
        self._seqs: Counter[str] = Counter()
        self._scratch: str | None = None  # their logs and notices
        self._polling = False
        self._inputs: set[str] = set()  # the spouts with input in the running batch
        self._planners: dict[str, TxPlanner] = {}  # transactional spouts, once run() plans
        self._tx_ends: dict[str, dict[str, Any]] = {}  # ... the end of their last transaction
        self._committed: int | None = None  # the newest txid committed (cleanup_before)
        self._due_ticks: list[str] = []  # the bolts with a tick in the running batch
        for stage in self.plan.stages:
            if stage.native_window:
                spec = topology.components[stage.head].component.spec()
                self._aggregates[stage.head] = AggregateWindows(spec)

    # -- feeding ---------------------------------------------------------------------------

    def pipe(self, spout: str, rows: Iterable[Sequence[Any] | Mapping[str, Any]], *,
             stream: str = "default") -> None:
        """Run one batch in which ``spout`` emitted ``rows`` on ``stream``.

        A row is a list of values in the stream's field order (or a ``Values``, or a
        ``Tuple``), or a dict by field name (missing fields are None; a ``KafkaSpout``'s
        missing metadata is filled in: its first topic, partition 0, the next offset, the
        clock as ``kafka_timestamp``).
        """
        self.run_batch({spout: list(rows)}, stream=stream)

    def run_batch(self, inputs: Mapping[str, Iterable[Sequence[Any] | Mapping[str, Any]]]
                  | None = None, *, stream: str = "default") -> None:
        """Run one batch with each spout's rows (none: a batch without input)."""
        self._run_batch(inputs, stream=stream)

    def _run_batch(self, inputs: Mapping[str, Iterable[Sequence[Any] | Mapping[str, Any]]]
                   | None = None, *, stream: str = "default", list_batch: int | None = None
                   ) -> None:
        """:meth:`run_batch`; ``list_batch``: the list spouts' batch index (their ids' ``b``)."""
        self._check_open()
        tuples = {spout: self._tuples(spout, list(rows), stream, list_batch)
                  for spout, rows in (inputs or {}).items()}
        if self.settings.acks_on_emit:  # seed 003: at most once, ack right after emit
            for spout, emitted in tuples.items():
                component = self.topology.components[spout].component
                if source_kind(component) in ("kafka", "list") and \
                        type(component).ack is not BaseRichSpout.ack:
                    for t in emitted:
                        component.ack(t.message_id)
        self._batch(tuples)

    def run(self, max_batches: int = 10_000) -> None:
        """Run the topology's spouts to completion.

        Every batch of its ``ListSpout``s (batch ``b`` of each together, rows ``"b:i"``; at
        least once with their due retries, held back at ``topology.max.spout.pending``),
        then its transactional spouts' transactions (until the coordinator is not ready or
        a transaction emits nothing), then its free-form spouts' batches (``next_tuple``,
        as on Spark) until they emit nothing, then :meth:`drain`.
        """
        lists = {s.id: s.component.batches for s in self.topology.spouts()
                 if source_kind(s.component) == "list"}
        for b in range(max((len(v) for v in lists.values()), default=0)):
            self._await_room(lists)
            self._run_batch({s: batches[b] for s, batches in lists.items() if b < len(batches)},
                            list_batch=b)
        for _ in range(max_batches):
            if not self._tx_batch():
                break
        self._polling = any(source_kind(s.component) == "next_tuple"
                            for s in self.topology.spouts())
        for _ in range(max_batches if self._polling else 0):
            if not self._poll_batch():
                break
        self.drain()

    def _await_room(self, lists: Mapping[str, Any], max_batches: int = 1_000) -> None:
        """Hold the next list batch back while ``topology.max.spout.pending`` tuples wait.

        As on Spark, a list batch starts only while fewer of its spout's tuples are
        un-acked; until then batches run the due retries (the clock moves to the next).
        """
        caps = {s: self._spout_cap(s) for s in self._acks.trackers}
        for _ in range(max_batches if any(c is not None for c in caps.values()) else 0):
            full = {s: n for s, n in self._acks.outstanding().items()
                    if s in lists and caps[s] is not None and n >= caps[s]}
            times = self._acks.next_times(full)
            if not times:
                return
            self.now_ms = max(self.now_ms, min(times))
            self.run_batch()

    def drain(self, max_batches: int = 1_000) -> None:
        """At least once: run batches until no spout tuple is pending or waiting to retry.

        The clock moves to the next retry or time-out between batches, as an available-now
        run on Spark goes on until its replays are done.
        """
        for _ in range(max_batches):
            times = self._acks.next_times(emits=True)
            if not times:
                return
            self.now_ms = max(self.now_ms, min(times))
            if not self._polling or not self._poll_batch():
                self.run_batch()
            while self._polling and self._poll_batch():
                pass  # what the spouts re-emit after the fails and time-outs
        msg = (f"spout tuples still pending or failing after {max_batches} batches: "
               f"{self._acks.outstanding()}")
        raise TopologyError(msg)

    def advance_time(self, ms: int | Duration, *, run: bool = True) -> None:
        """Move the clock ``ms`` on.

        With ``run``, a batch without input runs if a windowed bolt task has a window to
        close by then (Spark's processing-time timers), a windowed aggregate a
        processing-time session (the spout source's batch without input on Spark), or a
        bolt's tick is due (the tick source's batch on Spark).
        """
        if isinstance(ms, Duration):
            ms = ms.ms
        if ms < 0:
            msg = f"advance_time({ms}): time only moves forward"
            raise ValueError(msg)
        self.now_ms += int(ms)
        waits = self._acks.next_times()
        closes = [at for a in self._aggregates.values() if (at := a.next_close()) is not None]
        if run and (any(w.timer is not None and w.timer <= self.now_ms
                        for w in self._windows.values()) or any(t <= self.now_ms for t in waits)
                    or any(at <= self.now_ms for at in closes)
                    or due(self._tick_counts, counts(self._ticks, self.now_ms))):
            self.run_batch()

    # -- reading ---------------------------------------------------------------------------

    def output(self, component: str, stream: str = "default") -> list[list[Any]]:
        """What ``component`` emitted on ``stream`` so far, in batch order.

        For a sink: the values it received.
        """
        if component not in self.topology.components:
            msg = f"no component {component!r} (it has {sorted(self.topology.components)})"
            raise KeyError(msg)
        if self.plan.stage_of.get(component) == DRIVER:
            return [list(t.values) for t in self._received[component]]
        return [list(v) for c, s, v in self._emitted if c == component and s == stream]

    def received(self, sink: str) -> list[Tuple]:
        """The tuples sink ``sink`` received so far, in batch order."""
        return list(self._received[sink])

    def state(self, component: str, task: int = 0) -> dict[Any, Any]:
        """The committed ``KeyValueState`` of a stateful bolt's task, as a dict."""
        found = self._states.get((component, task))
        if found is None:
            spec = self.topology.components.get(component)
            if spec is None or not isinstance(spec.component, BaseStatefulBolt) and not \
                    getattr(spec.component, "is_stateful_windowed_bolt", False):
                msg = f"{component!r} is not a stateful bolt"
                raise KeyError(msg)
            return {}
        return {k: v for k, v in InMemoryKeyValueState(found.namespace)}

    def bolt(self, component: str, task: int = 0) -> Any:
        """The bolt instance running ``component``'s task ``task`` (None before its first tuple)."""
        where = self.plan.stage_of[component]
        found = self._instances[where].get((component, task))
        return None if found is None else found[0]

    def close(self) -> None:
        """``cleanup()`` every bolt instance, ``close()`` every spout run; forget the state."""
        if self._closed:
            return
        self._closed = True
        for runner in self._runners.values():
            runner.close()
        for planner in self._planners.values():
            planner.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        for instances in self._instances.values():
            for bolt, *_ in instances.values():
                cleanup = getattr(bolt, "cleanup", None)
                if cleanup is not None:
                    cleanup()
        _forget_state(self._namespace)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- spout tuples ----------------------------------------------------------------------

    def _tuples(self, spout: str, rows: list[Any], stream: str,
                list_batch: int | None = None) -> list[Tuple]:
        spec = self.topology.components.get(spout)
        if spec is None or not spec.is_spout:
            msg = f"no spout {spout!r} (spouts: {[s.id for s in self.topology.spouts()]})"
            raise TopologyError(msg)
        fields = spec.streams.get(stream)
        if fields is None:
            msg = f"spout {spout!r} declares no stream {stream!r} ({sorted(spec.streams)})"
            raise TopologyError(msg)
        kind = source_kind(spec.component)
        if kind in ("kafka", "list") and stream != "default":
            msg = f"spout {spout!r} emits on its default stream only"
            raise TopologyError(msg)
        out = []
        for i, row in enumerate(rows):
            values = self._values(spout, spec.component, kind, fields, row)
            message_id = None
            if kind == "kafka":
                message_id = tuple(values[fields.index(c)] for c in _KAFKA_META[:3])
                self._acks.remember(spout, KafkaMessageId(*message_id), values)
            elif kind == "list":
                message_id = list_message_id(
                    self.batch_id if list_batch is None else list_batch, i)
                self._acks.remember(spout, list_position(message_id), values)
            elif kind == "transactional" and len(values) == len(fields) - 1:
                values = [None, *values]  # its TransactionAttempt, set by each attempt
            out.append(Tuple(values, fields, spout, stream, message_id))
        return out

    def _values(self, spout: str, component: Any, kind: str, fields: Fields,
                row: Sequence[Any] | Mapping[str, Any]) -> list[Any]:
        if isinstance(row, Tuple):
            row = row.values
        if isinstance(row, Mapping):
            unknown = sorted(set(row) - set(fields))
            if unknown:
                msg = f"spout {spout!r}: no field(s) {unknown} (fields: {fields.to_list()})"
                raise TopologyError(msg)
            values = [row.get(f) for f in fields]
            if kind == "kafka":
                self._kafka_meta(component, fields, values, row)
        else:
            values = list(row)
        if kind == "transactional" and len(values) == len(fields) - 1:
            return values  # the attempt comes first (_tuples)
        if len(values) != len(fields):
            msg = (f"spout {spout!r}: a row of {len(values)} values for fields "
                   f"{fields.to_list()}: {values!r}")
            raise TopologyError(msg)
        return values

    def _kafka_meta(self, spout: Any, fields: Fields, values: list[Any],
                    row: Mapping[str, Any]) -> None:
        at = {f: fields.index(f) for f in _KAFKA_META}
        if "topic" not in row:
            topics = list(spout.topics or [])
            values[at["topic"]] = topics[0] if topics else "topic"
        if "partition" not in row:
            values[at["partition"]] = 0
        key = (values[at["topic"]], values[at["partition"]])
        if "offset" not in row:
            values[at["offset"]] = self._offsets[key]
        self._offsets[key] = max(self._offsets[key], values[at["offset"]] + 1)
        if "kafka_timestamp" not in row:
            values[at["kafka_timestamp"]] = self.now_ms

    # -- free-form spouts ------------------------------------------------------------------

    def _runner(self, spout: str) -> SpoutExecutor:
        """The spout's executor, as Spark's source process holds it (created on first use)."""
        found = self._runners.get(spout)
        if found is not None:
            return found
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="kstorm-testdriver-")
        spec = self.topology.components[spout]
        settings = self.settings
        bounds = BatchBounds(settings.spout_max_batch_tuples, settings.spout_max_batch_ms,
                             settings.spout_idle_calls, settings.spout_max_failures)
        context = TopologyContext(self.name, spout, 0, 1, -1, dict(spec.streams),
                                  self.topology)
        notices = (NoticeBook(f"{self._scratch}/notices/{spout}") if spout in self._acks.emits
                   else None)
        found = self._runners[spout] = SpoutExecutor(
            copy.deepcopy(spec.component), spout, settings.component_conf(self.conf, spec.conf),
            context,
            SpoutLog(f"{self._scratch}/spouts/{spout}", spout), bounds,
            ack_on_emit=settings.acks_on_emit, notices=notices, sleep=lambda _s: None,
            wall_ms=lambda: self.now_ms,
            max_pending=settings.spout_max_pending(spec.conf) if notices is not None else None)
        return found

    def _planner(self, spout: str) -> TxPlanner:
        """The transactional spout's planner, as Spark's source process holds it."""
        found = self._planners.get(spout)
        if found is None:
            spec = self.topology.components[spout]
            found = self._planners[spout] = TxPlanner(
                spec.component, spout, spec.streams,
                self.settings.component_conf(self.conf, spec.conf),
                lambda task: self._tx_context(spout, task))
        return found

    def _tx_context(self, spout: str, task: int) -> TopologyContext:
        spec = self.topology.components[spout]
        return TopologyContext(self.name, spout, task, spec.parallelism, -1,
                               dict(spec.streams), self.topology)

    def _tx_batch(self) -> bool:
        """One transaction of the transactional spouts; False when none of them had one."""
        self._check_open()
        txid = self._txid(self.batch_id)
        tuples: dict[str, list[Tuple]] = {}
        ends: dict[str, dict[str, Any]] = {}
        for spec in self.topology.spouts():
            if source_kind(spec.component) != "transactional":
                continue
            start = self._tx_ends.get(spec.id, {"seq": 0})
            planned = self._planner(spec.id).plan(start, txid, 0)
            if planned is None:
                continue
            end, kept = planned
            if not kept:  # a coordinated spout: each emitter task emits its part
                conf = self.settings.component_conf(self.conf, spec.conf)
                for task in range(spec.parallelism):
                    emitted, _ = emit_part(spec.component, spec.id, spec.streams, conf,
                                           self._tx_context(spec.id, task), "emit", task,
                                           end["meta"], TransactionAttempt(txid, 0),
                                           committed=self._committed)
                    kept[task] = emitted
            logged = [t for part in sorted(kept) for t in kept[part]]
            if not logged:
                continue  # the end of its input: no transaction
            tuples[spec.id] = [Tuple(list(t.values), spec.streams[t.stream], spec.id, t.stream)
                               for t in logged]
            ends[spec.id] = end
        if not ends:
            return False
        self._batch(tuples)
        self._tx_ends.update(ends)
        return True

    def _poll_batch(self) -> bool:
        """One batch of the free-form spouts' emits; False when none of them had a batch."""
        self._check_open()
        tuples: dict[str, list[Tuple]] = {}
        ends: dict[str, int] = {}
        for spec in self.topology.spouts():
            if source_kind(spec.component) != "next_tuple":
                continue
            runner, seq = self._runner(spec.id), self._seqs[spec.id]
            end = runner.next_batch(seq)
            if end == seq:
                continue
            ends[spec.id] = end
            task = (self._acking.spout_tasks.get(spec.id) if self._acking is not None
                    else None)
            tracked = task is not None and spec.id in self._acks.emits
            out = tuples[spec.id] = []
            for i, logged in enumerate(runner.spout_log.tuples(seq)):
                t = Tuple(list(logged.values), spec.streams[logged.stream], spec.id,
                          logged.stream)
                if tracked and logged.message_id is not None:
                    msg = EmitMsg(pickle.dumps(logged.message_id, protocol=5), logged.stream,
                                  pickle.dumps(list(logged.values), protocol=5), logged.owner)
                    t._ids = SpoutEmit(emit_root_id(task, seq, i), msg,  # type: ignore[arg-type]
                                       runner.planned_ms)
                out.append(t)
        if not ends:
            return False
        self._batch(tuples)
        for spout, end in ends.items():  # committed: Spark's commit(end) acks (untracked)
            self._seqs[spout] = end
            self._runners[spout].ack_through(end)
        return True

    # -- one batch -------------------------------------------------------------------------

    def _batch(self, tuples: dict[str, list[Tuple]]) -> None:
        """One batch as one transaction (``kstorm/_runtime/batch_loop.py``), then its record."""
        batch_id = self.batch_id
        txid = self._txid(batch_id)
        self._inputs = set(tuples)  # the spouts with a batch of their own (not only retries)
        retries = self._acks.retries(tuples, self.now_ms, self._spout_cap)
        now_counts = counts(self._ticks, self.now_ms)
        self._due_ticks = due(self._tick_counts, now_counts)
        saved: list[dict[str, Any]] = []

        def process(attempt: int) -> _Attempt:  # the processing phase: the stages, here
            saved[:] = [self._save()]
            return self._attempt(batch_id, TransactionAttempt(txid, attempt), tuples)

        def commit(done: _Attempt, attempt: int, given_up: bool = False) -> _Attempt:
            batch = batch_commit(pa.Table.from_batches([to_arrow(done.rows)]), batch_id,
                                 TransactionAttempt(txid, attempt), given_up=given_up)
            run_commit_phase(_DriverCommit(self, done, retries), self._stage, batch)
            return done

        def failed(_attempt: int, decision: Decision, exc: Exception) -> None:
            self._restore(saved[0], txid)
            if decision.kind == "fatal":
                raise exc  # a topology or configuration error: no retry cures it
            self.counters[f"__transactions.{decision.kind}"] += 1

        run_transaction(
            self._tx, process, commit, failed=failed,
            give_up=lambda attempts, decision: commit(
                self._given_up(tuples, txid, attempts, decision.cause), attempts,
                given_up=True),
            fatal=lambda attempt, decision: failure_error(txid, attempt, decision))
        self._tick_counts = now_counts
        self._committed = txid
        self.batch_id += 1

    def _txid(self, batch_id: int) -> int:
        """A batch's txid: from 1 in a transactional topology, else the batch id."""
        return batch_id + (FIRST_TXID if self.topology.transactional_id is not None else 0)

    def _spout_cap(self, spout: str) -> int | None:
        """``topology.max.spout.pending`` of ``spout`` (its own, else the topology's)."""
        return self.settings.spout_max_pending(self.topology.components[spout].conf)

    def _save(self) -> dict[str, Any]:
        return {"windows": {k: (copy.deepcopy(w.task.snapshot()), dict(w.chunks.data), w.timer)
                            for k, w in self._windows.items()},
                "aggregates": {k: a.snapshot() for k, a in self._aggregates.items()},
                "reliability": self._acks.snapshot()}

    def _restore(self, saved: dict[str, Any], txid: int) -> None:
        """Undo a failed attempt: windows, aggregates and prepared state as before it."""
        for key, window in list(self._windows.items()):
            if key not in saved["windows"]:
                del self._windows[key]
                continue
            snapshot, chunks, window.timer = saved["windows"][key]
            window.chunks.data = chunks
            window.task = self._window_task(*key, window.chunks)
            window.task.restore(copy.deepcopy(snapshot))
        for key, blob in saved["aggregates"].items():
            self._aggregates[key].restore(blob)
        self._acks.restore(saved["reliability"])
        for (component, task), state in self._states.items():
            if state.prepared_txid() is not None:  # seed 000: the hook, then the rollback
                hook = getattr(self.bolt(component, task), "pre_rollback", None)
                if hook is not None:
                    hook()
            state.rollback()  # prepared changes, and those of a task that failed midway

    def _given_up(self, tuples: dict[str, list[Tuple]], txid: int, attempts: int,
                  cause: str) -> _Attempt:
        reason = given_up_reason(txid, attempts, cause)
        done = _Attempt()
        for spout, ts in tuples.items():
            raw = source_kind(self.topology.components[spout].component) in ("kafka", "list")
            for t in ts:
                where = t.message_id if isinstance(t.message_id, tuple) else (None,) * 3
                # as on Spark: a spout's typed row by field name, an envelope tuple's values
                shown = dict(zip(t.fields, t.values, strict=True)) if raw else t.values
                done.dead_letters.append(as_record(
                    given_up_letter(spout, t.source_stream, reason, shown, where)))
        done.counters["__transactions.dead_lettered"] += 1
        return done

    def _attempt(self, batch_id: int, attempt: TransactionAttempt,
                 tuples: dict[str, list[Tuple]]) -> _Attempt:
        """The processing phase: each stage in plan order, through the in-process exchange."""
        done = _Attempt()
        inbox: dict[int, list[Any]] = defaultdict(list)   # stage -> envelope rows / tuples
        raw: dict[int, list[tuple[int, Tuple]]] = defaultdict(list)
        partials_of: dict[str, list[Tuple]] = defaultdict(list)
        for spout, ts in tuples.items():
            if source_kind(self.topology.components[spout].component) == "transactional":
                for t in ts:
                    if t.values[0] is None or isinstance(t.values[0], TransactionAttempt):
                        t.values[0] = attempt
            source = self.plan.stages[self.plan.stage_of[spout]]
            executor = self._executor(source, batch_id, attempt, 0)
            fresh = [(0, _fresh(t)) for t in ts]
            self._route(list(executor.process_rows(interleaved(fresh) if source.ordered
                                                   else fresh))
                        + list(executor.finish_rows()), inbox, done)
            done.counters.update(executor.counters)
            for stage in self.plan.stages:
                if stage.raw_spout != spout or stage.is_source:
                    continue
                if stage.native_window:
                    partials_of[stage.head].extend(ts)
                else:  # each stage its own copies (the runtime tracks each arrival)
                    raw[stage.index].extend(self._raw_tasks(stage, spout,
                                                            [_fresh(t) for t in ts]))
        if self._due_ticks:  # as the tick source's rows on Spark: one per task, unanchored
            tasks = {c: self.topology.components[c].parallelism for c in self._due_ticks}
            self._route(tick_rows(tasks, self._ticks, self._due_ticks), inbox, done)
        for stage in self.plan.stages:
            if stage.is_source:
                continue
            if stage.native_window:
                late_rows, done.folded[stage.head] = self._aggregate_stage(
                    stage, partials_of.get(stage.head, []), done)
                self._route(late_rows, inbox, done)
                continue
            arrived = self._arrivals(stage, raw.get(stage.index, []), inbox.get(stage.index, []))
            if stage.windowed:
                rows = self._run_windowed(stage, batch_id, attempt, arrived, done)
            elif stage.keyed:
                rows = self._run_keyed(stage, batch_id, attempt, arrived, done)
            else:
                rows = self._run_plain(stage, batch_id, attempt, arrived, done)
            self._route(rows, inbox, done)
        return done

    def _executor(self, stage: Stage, batch_id: int, attempt: TransactionAttempt,
                  partition: int, state_for: Any = None) -> StageExecutor:
        return StageExecutor(self.topology, self.plan, stage.index, topology_name=self.name,
                             conf=self.conf, settings=self.settings, batch_id=batch_id,
                             partition=partition, state_for=state_for, attempt=attempt,
                             acking=self._acking, instances=self._instances[stage.index])

    # -- where tuples go -------------------------------------------------------------------

    def _raw_tasks(self, stage: Stage, spout: str, ts: list[Tuple]) -> list[tuple[int, Tuple]]:
        """``(task, tuple)`` for a stage reading the spout's rows, as Spark assigns them."""
        n = self.topology.components[stage.head].parallelism
        p = stage.partitioning
        if p.kind is PartitionKind.SINGLE or n == 1:
            return [(0, t) for t in ts]
        if p.kind is PartitionKind.BROADCAST:
            return [(task, t) for t in ts for task in range(n)]
        if p.kind is PartitionKind.HASH:
            kinds = self._raw_types(spout)
            fields = list(self.topology.components[spout].streams["default"])
            names = list(p.fields) or [c for c in ("partition", "offset") if c in fields]
            if names:
                return [(spark_task([t.get_value_by_field(f) for f in names],
                                    [kinds[f] for f in names], n), t) for t in ts]
            # a batch bolt's shuffle of rows without a position: Spark hashes whole rows
            # (the list source's columns: the fields, then the message id)
            whole = [kinds[f] for f in fields] + [pa.string()]
            return [(spark_task([*t.values, t.message_id], whole, n), t) for t in ts]
        grouping = next(g for g in self.topology.components[stage.head].inputs
                        if g.component == spout)
        if grouping.kind is GroupingKind.GLOBAL:
            return [(0, t) for t in ts]
        out = []
        for partition, part in self._partitions(spout, ts):
            if stage.keyed:  # TWS keys a stage by __task = partition mod n
                out += [(partition % n, t) for t in part]
            else:  # round robin over the head's tasks, from the partition's start
                out += [((partition + i) % n, t) for i, t in enumerate(part)]
        return out

    def _partitions(self, spout: str, ts: list[Tuple]) -> list[tuple[int, list[Tuple]]]:
        """The Spark partitions a spout's rows of one batch arrive in."""
        component = self.topology.components[spout].component
        kind = source_kind(component)
        if kind == "list":  # the list source's: the batch's row ranges, then its retries
            first = [t for t in ts if not _retried(t)]
            parts: list[tuple[int, list[Tuple]]] = []
            if first or spout in self._inputs:
                n = max(1, min(component.partitions, len(first)))
                step = -(-len(first) // n) if first else 0
                parts = [(i, first[i * step:(i + 1) * step]) for i in range(n)]
            retried: dict[int, list[Tuple]] = defaultdict(list)
            for t in ts:
                if _retried(t):
                    retried[list_position(t.message_id).partition].append(t)
            for b in sorted(retried):
                rows = sorted(retried[b], key=lambda t: list_position(t.message_id).offset)
                parts.append((len(parts), rows))
            return parts
        if kind == "kafka":
            by: dict[int, list[Tuple]] = defaultdict(list)
            order: dict[tuple[str, int], int] = {}
            for t in ts:
                key = (t.message_id[0], t.message_id[1])
                by[order.setdefault(key, len(order))].append(t)
            return sorted(by.items())
        return [(0, ts)]

    def _raw_types(self, spout: str) -> dict[str, pa.DataType]:
        component = self.topology.components[spout].component
        schema = (component.arrow_schema() if source_kind(component) == "kafka"
                  else component.schema)
        return {f.name: f.type for f in schema}

    def _route(self, rows: Iterable[Outgoing | Packed], inbox: dict[int, list[Any]],
               done: _Attempt) -> None:
        """Rows for a stage to its inbox, acker messages to the ackers, the rest to the driver.

        The driver's rows (sinks, the commit stage, metrics, dead letters, captured
        emissions) are read in the commit phase (:meth:`_commit_phase`), as on Spark.
        """
        for row in rows:
            dest = row.dest
            if dest == ACKER:
                done.acker[row.task].append(pickle.loads(row.values))
                continue
            where = self.plan.stage_of.get(dest)
            if dest in (CAPTURE, DEAD_LETTER, METRICS) or where in (DRIVER, COMMIT):
                done.rows.append(row)
            elif where is not None:
                inbox[where].append(row)
            else:  # pragma: no cover - the plan addresses only its own components
                msg = f"a row for unknown destination {dest!r}"
                raise TopologyError(msg)

    def _arrivals(self, stage: Stage, raw: list[tuple[int, Tuple]], rows: list[Any]
                  ) -> list[tuple[int, Tuple]]:
        """The stage's input: the spout rows it reads, then envelope rows for its head.

        An ordered stage (``Stage.ordered``) takes them interleaved by origin, as Spark's
        stage does (``window_task.interleaved``).
        """
        out = list(raw)
        if rows:
            out.extend(envelope_tuples(to_arrow(rows), self.topology))
        return interleaved(out) if stage.ordered else out

    # -- running stages --------------------------------------------------------------------

    def _run_plain(self, stage: Stage, batch_id: int, attempt: TransactionAttempt,
                   arrived: list[tuple[int, Tuple]], done: _Attempt) -> list[Any]:
        """A stateless stage: one executor per partition (a task of a fields grouping)."""
        if not arrived:
            return []
        by_partition: dict[int, list[tuple[int, Tuple]]] = defaultdict(list)
        hashed = stage.partitioning.kind is PartitionKind.HASH
        for task, t in arrived:
            by_partition[task if hashed else 0].append((task, t))
        rows: list[Any] = []
        for partition in sorted(by_partition):
            executor = self._executor(stage, batch_id, attempt, partition)
            rows += list(executor.process_rows(by_partition[partition]))
            rows += list(executor.finish_rows())
            done.counters.update(executor.counters)
        return rows

    def _run_keyed(self, stage: Stage, batch_id: int, attempt: TransactionAttempt,
                   arrived: list[tuple[int, Tuple]], done: _Attempt) -> list[Any]:
        """A stateful stage: one executor per task, with the task's state (seed 000)."""
        rows: list[Any] = []
        for task, part in sorted(_by_task(arrived).items()):
            prepared: list[tuple[str, Any]] = []

            def state_for(component: str, task_: int, prepared: list = prepared) -> Any:
                state = self._state(component, task_)
                prepared.append((component, state))
                return state

            executor = self._executor(stage, batch_id, attempt, task, state_for)
            rows += list(executor.process_rows(part))
            rows += list(executor.finish_rows())
            done.counters.update(executor.counters)
            for component, state in prepared:
                bolt = executor.bolt(component, task)
                bolt.pre_prepare(attempt.transaction_id)
                state.prepare_commit(attempt.transaction_id)
                done.states.append((bolt, state))
        return rows

    def _state(self, component: str, task: int) -> InMemoryKeyValueState:
        found = self._states.get((component, task))
        if found is None:
            namespace = f"{self._namespace}/{state_namespace(self.name, component, task)}"
            found = self._states[(component, task)] = InMemoryKeyValueState(namespace)
        return found

    def _run_windowed(self, stage: Stage, batch_id: int, attempt: TransactionAttempt,
                      arrived: list[tuple[int, Tuple]], done: _Attempt) -> list[Any]:
        """A windowed bolt's stage: each task with input or a window due runs its windows."""
        component = stage.head
        config = self.topology.components[component].component.window_config
        by_task = _by_task(arrived)
        for (c, task), window in self._windows.items():
            if c == component and window.timer is not None and window.timer <= self.now_ms:
                by_task.setdefault(task, [])
        rows: list[Any] = []
        for task, part in sorted(by_task.items()):
            states: list[Any] = []

            def state_for(c: str, t: int, states: list = states) -> Any:
                states.append(self._state(c, t))
                return states[-1]

            executor = self._executor(stage, batch_id, attempt, task, state_for)
            window = self._windows.get((component, task))
            if window is None:
                chunks = _Chunks()
                window = self._windows[(component, task)] = _Window(
                    self._window_task(component, task, chunks), chunks)
            tuples = [t for _, t in part]
            executor.counters[f"{component}.executed"] += len(tuples)
            executor.run_windows(component, task, window.task, tuples, self.now_ms,
                                 config.late_tuple_stream,
                                 acks_on_arrival(self.topology.components[component].component))
            rows += list(executor.finish_rows())
            window.timer = window.task.next_timer(self.now_ms)
            done.counters.update(executor.counters)
            for state in states:  # a stateful windowed bolt: its state commits with the batch
                state.prepare_commit(attempt.transaction_id)
                done.states.append((executor.bolt(component, task), state))
        return rows

    def _window_task(self, component: str, task: int, chunks: _Chunks) -> WindowedTask:
        spec = self.topology.components[component]
        config = bind_session_keys(spec.component.window_config, spec.inputs, component)
        inputs = [f"{g.component}:{g.stream}" for g in spec.inputs
                  if source_kind(self.topology.components[g.component].component) != "kafka"]
        store = (PersistentTuples(chunks, config.max_events_in_memory)
                 if config.persistent else None)
        tracked = self._acking is not None and not acks_on_arrival(spec.component)
        return WindowedTask(component, config, inputs, store, tracked=tracked)

    def _aggregate_stage(self, stage: Stage, ts: list[Tuple], done: _Attempt
                         ) -> tuple[list[Packed], dict[str, Any]]:
        """A windowed aggregate's stage: late rows flagged (and sent on), partials built.

        The partials leave as a read task's payload on Spark does (``fold_partials``).
        """
        component = stage.head
        windows = self._aggregates[component]
        spec = windows.spec
        done.counters[f"{component}.executed"] += len(ts)
        if not ts:
            return [], {"partials": None, "latest": {}, "late": 0}
        clocks = dict(windows.latest)
        if windows.new_stream_clock() is not None:
            clocks[NEW_STREAM] = windows.new_stream_clock()
        kinds = self._raw_types(ts[0].source_component)
        fields = list(ts[0].fields)
        table = pa.table({f: pa.array([t.values[i] for t in ts], type=kinds.get(f))
                          for i, f in enumerate(fields)})
        streams = np.array([_stream_of(t) for t in ts], dtype=object)
        latest = {s: c for s in set(streams.tolist())
                  if (c := clock_of(clocks, s)) is not None}
        consumers = ([c for c, _ in self.topology.consumers(component, spec.late_stream)]
                     if spec.late_stream else [])
        late, late_rows, part = read_rows(table, streams, latest, spec, component, consumers,
                                          fields)
        done.counters[f"{component}.late"] += len(late)
        if spec.late_stream:
            done.captured += [(component, spec.late_stream, [v]) for v in late]
        merged = merge([part], spec) if part is not None else None
        return late_rows, {"partials": merged, "latest": latest, "late": len(late)}

    def _check_open(self) -> None:
        if self._closed:
            msg = "this TopologyTestDriver is closed"
            raise TopologyError(msg)


class _DriverCommit:
    """The test driver's side of each commit-phase step (``kstorm/_runtime/commit_phase.py``).

    What differs from Spark: no offset log, the ackers run here, the sinks *receive* their
    tuples, dead letters and emissions are kept, and nothing is persisted (the driver's
    windows and trackers live in memory; a failed attempt restores them).
    """

    overlap = False

    def __init__(self, driver: TopologyTestDriver, done: _Attempt,
                 retries: dict[str, list[tuple]]) -> None:
        self.driver = driver
        self.done = done
        self.retries = retries

    def read_offsets(self, batch: BatchCommit) -> None:
        """Step 2: the test driver keeps no offset log."""

    def settle_trees(self, batch: BatchCommit, events: pa.Table) -> Any:
        """Step 3b: this process's ackers (their events never became rows)."""
        driver, done = self.driver, self.done
        if driver._acking is None:
            return None
        out = driver._acks.settle(done.acker, driver.now_ms, self.retries)
        done.notices.update(out.notices)
        done.counters.update(out.counters)
        return out

    def close_windows(self, batch: BatchCommit) -> list[ClosedWindows]:
        """Step 4: each aggregate folds its stage's partials in; the windows it closed."""
        out = []
        driver, done = self.driver, self.done
        for component, windows in driver._aggregates.items():
            payloads = [done.folded[component]] if component in done.folded else []
            closed = ClosedWindows(component, driver.topology.components[component]
                                   .streams["default"],
                                   fold_partials(windows, payloads, driver.now_ms), windows)
            done.captured += [(component, "default", list(t.values)) for t in closed.tuples()]
            out.append(closed)
        return out

    def commit_sinks(self, batch: BatchCommit) -> int:
        """Step 6: each sink receives its tuples (kept by :meth:`record`)."""
        delivered = 0
        by_dest = batch.by_dest
        for sink in [*by_dest, *(c for c in batch.to_sinks if c not in by_dest)]:
            tuples = driver_rows.sink_tuples(self.driver.topology, by_dest.pop(sink, EMPTY),
                                             batch.to_sinks.get(sink, []))
            made = tuples.make() if isinstance(tuples, UnmadeTuples) else tuples
            self.done.sinks[sink] = made
            delivered += len(made)
        return delivered

    def write_dead_letters(self, batch: BatchCommit) -> None:
        """Step 7: the stages' dead letters, then the spouts' given-up tuples (as on Spark)."""
        self.done.dead_letters += driver_rows.dead_letters(batch.dead) + (
            batch.reliable.dead_letters if batch.reliable is not None else [])

    def commit_states(self, batch: BatchCommit) -> None:
        """Step 7b: each prepared state commits the txid, after its ``pre_commit`` hook."""
        for bolt, state in self.done.states:
            hook = getattr(bolt, "pre_commit", None)
            if hook is not None:
                hook(batch.txid)
            state.commit(batch.txid)

    def persist(self, batch: BatchCommit) -> None:
        """Step 8: nothing; what the next batch starts from is in this process."""

    def record(self, batch: BatchCommit) -> None:
        """Step 9: counters, received tuples, dead letters and emissions kept."""
        driver, done = self.driver, self.done
        for found in batch.metrics:
            done.counters.update({k: v for k, v in found.items() if k != "stage"})
        done.captured += driver_rows.emitted(batch.captured)
        for sink, ts in done.sinks.items():
            driver._received[sink].extend(ts)
        driver._emitted.extend(done.captured)
        driver_rows.log_emitted(driver.settings, batch.batch_id, done.captured)  # as on Spark
        driver.dead_letters.extend(done.dead_letters)
        driver.counters.update(done.counters)
        if driver._polling:  # as the commit phase: the notices for the spouts' processes
            for spout, notices in done.notices.items():
                driver._runner(spout).notices.write(  # type: ignore[union-attr]
                    batch.txid, notices, driver._acks.emits[spout].next_timeout_at(),
                    driver._acks.emits[spout].pending_count)

    def commit_later(self, batch: BatchCommit) -> None:  # pragma: no cover - overlap is False
        msg = "the test driver commits each batch before the next"
        raise AssertionError(msg)


def _forget_state(namespace: str) -> None:
    """Drop the in-memory state a driver kept (at ``close()``, or once it is collected)."""
    from kstorm.state import _MEMORY

    for key in [k for k in _MEMORY if k.startswith(namespace + "/")]:
        del _MEMORY[key]


def _fresh(t: Tuple) -> Tuple:
    """A copy of a spout tuple for one stage (its ``_ids``: the attempt marks, untouched)."""
    c = copy.copy(t)
    c.values = list(t.values)
    return c


def _retried(t: Tuple) -> bool:
    """Whether a tracked spout tuple is a retry (its attempt, set by ``_retries``, is > 0)."""
    return isinstance(t._ids, tuple) and t._ids[0] > 0


def _by_task(arrived: list[tuple[int, Tuple]]) -> dict[int, list[tuple[int, Tuple]]]:
    out: dict[int, list[tuple[int, Tuple]]] = defaultdict(list)
    for task, t in arrived:
        out[task].append((task, t))
    return out


def _stream_of(t: Tuple) -> str:
    """The windowed aggregate's input stream of a spout tuple (as ``stream_ids`` on Spark)."""
    if isinstance(t.message_id, tuple) and len(t.message_id) == 3:
        return f"{t.message_id[0]}/{t.message_id[1]}"
    return "0"

