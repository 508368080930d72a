"""The commit phase on Spark: what runs on the driver for each batch, in batch order.

A batch is a transaction (seed 002): its txid is the checkpoint's txid base + ``batch_id``.
:meth:`CommitPhase.__call__` (Spark's ``foreachBatch`` function) runs it as attempt 0, 1, ...
through the loop both orchestrations share (``kstorm/_runtime/batch_loop.py``: a new attempt
id each time, the same txid and content, a failed attempt retried in place, then the failure
policy). An attempt's processing phase is the Spark job that computes the batch's rows for
the driver (as ``toArrow`` would: ``kstorm/_spark/batch_rows.py``); its commit phase is
:func:`~kstorm._runtime.commit_phase.run_commit_phase`, whose steps (and their order) both
orchestrations share. :class:`CommitPhase` is the Spark side of each step: Spark's offset log
(step 2), sinks committed with a :class:`SinkBatch` holding the txid, the Kafka end offsets
and the runtime's state after the batch (windowed aggregates' open windows, windowed bolt
snapshots, transactional spouts' metadata, at least once the lowest un-acked offsets), dead
letters to their topic, state persisted in the checkpoint, progress.

With a state provider other than Spark's, where a RedisSink shares the Redis provider's
server, that sink's step-6 script also commits every task's state (values, record and states
in one atomic step; :meth:`CommitPhase._state_carrier`).

Spark writes the batch to its commit log only after ``__call__`` returns; a crash before
that replays the same batch id with the same offsets, and the sinks skip or recompute it.

With ``kstorm.commit.overlap`` (``kstorm/_spark/overlap.py``; topologies whose state all
lives with sinks that record offsets) steps 7 and 8 run before step 6 and ``__call__``
returns; steps 6 and 9 run on the sinks' thread while Spark records the batch and runs the
next, whose ``__call__`` waits for them after its Spark job (strict txid order). A crash
in between leaves the checkpoint a batch ahead of a sink, and the next start runs that batch
again (``reconcile.decide``).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

from kstorm._runtime import driver_rows
from kstorm._runtime.batch_loop import (
    ClosedWindows,
    failure_error,
    given_up_reason,
    run_transaction,
)
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.commit_phase import (
    BatchCommit,
    CommitStage,
    batch_commit,
    run_commit_phase,
)
from kstorm._runtime.deadletter import DeadLetterWriter
from kstorm._runtime.envelope import (
    EMPTY,
    STATE_PREFIX,
    txmeta_dest,
    window_dest,
)
from kstorm._runtime.plan import Plan, source_kind
from kstorm._runtime.progress import Progress
from kstorm._runtime.reliability import SpoutReliability
from kstorm._runtime.state_book import StateBook
from kstorm._runtime.transaction import (
    ATTEMPT_PROPERTY,
    COMMITTED_PROPERTY,
    DEAD_LETTER_PROPERTY,
    Decision,
    Transactions,
)
from kstorm._spark import txspout_source as txspout
from kstorm._spark.batch_rows import ArrowRows
from kstorm._spark.offset_log import read_batch
from kstorm._spark.speedups.gc_control import paused
from kstorm._spark.windowed_bolt import state_key
from kstorm.config import TopologyConfig
from kstorm.errors import KstormError, SinkError, StateError
from kstorm.sink import BaseSink, SinkBatch
from kstorm.topology import StormTopology
from kstorm.transactional.attempt import TransactionAttempt

log = logging.getLogger("kstorm.commit")
progress_log = logging.getLogger("kstorm.progress")  # one INFO line per committed batch

UNACKED_STATE = "acking:lowest-unacked"  # sink state entry: where tracked spouts resume


def window_state_key(component: str) -> str:
    """Name of a windowed aggregate's open windows in the sinks' stored state."""
    return f"window:{component}"


class CommitPhase:
    """The ``foreachBatch`` function of a running topology."""

    def __init__(self, topology: StormTopology, name: str, checkpoint: Path,
                 settings: TopologyConfig, sinks: dict[str, BaseSink], txid_base: int,
                 progress: Progress, dead_letters: DeadLetterWriter,
                 windows: dict[str, Any] | None = None,
                 reliability: SpoutReliability | None = None,
                 plan: Plan | None = None, conf: dict[str, Any] | None = None,
                 states: StateBook | None = None, overlap: bool = False) -> None:
        self.topology = topology
        self.name = name
        self.checkpoint = checkpoint
        self.layout = CheckpointLayout(checkpoint)
        self.settings = settings
        self.sinks = sinks
        self.txid_base = txid_base
        self.progress = progress
        self.dead_letters = dead_letters
        self.windows = windows or {}
        self.reliability = reliability
        self.captured: list[tuple[str, str, list[Any]]] = []
        self.failure: BaseException | None = None  # what stopped the topology, if it failed here
        self._spouts = [s.id for s in topology.spouts()]
        self._kafka = {s.id for s in topology.spouts() if source_kind(s.component) == "kafka"}
        self._transactional = [s.id for s in topology.spouts()
                               if source_kind(s.component) == "transactional"]
        self.plan = plan
        self.conf = conf or {}
        self._stage = CommitStage(topology, plan, name, self.conf, settings)  # step 5's
        self.states = states  # stateful bolts' state outside Spark (seed 000's protocol)
        self._carrier_logged = False
        # kstorm.commit.overlap: batch N's sinks commit on a thread of their own while Spark
        # runs batch N + 1 (kstorm/_spark/overlap.py)
        self.overlap = overlap
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self.sink_failure: KstormError | None = None  # an overlapped commit's final failure
        self.committed_txid: int | None = None  # the newest txid this process committed
        self.on_failure: Callable[[], Any] | None = None  # stops the query (set by the runner)
        self._waited = 0.0  # how long this batch waited for the previous batch's sinks
        self.rows = ArrowRows()  # a batch frame's rows for the driver (``toArrow``, leaner)
        self.transactions = Transactions(settings.transaction_max_attempts,
                                         settings.transaction_backoff_ms,
                                         settings.transaction_failure_policy,
                                         random.getrandbits(40) << 16)

    def __call__(self, frame: Any, batch_id: int) -> None:
        """Run batch ``batch_id`` as one transaction (``kstorm/_runtime/batch_loop.py``)."""
        context = frame.sparkSession.sparkContext
        txid = self.txid_base + batch_id
        if self.committed_txid is not None:  # a coordinated spout's cleanup_before
            context.setLocalProperty(COMMITTED_PROPERTY, str(self.committed_txid))

        def process(attempt: int) -> pa.Table:  # the attempt's Spark job
            context.setLocalProperty(ATTEMPT_PROPERTY, str(self.transactions.attempt_id(attempt)))
            return self.rows(frame)

        def ready() -> None:  # the previous batch's sinks (overlapped, strict txid order)
            waiting = time.monotonic()
            self.wait_for_sinks()
            self._waited = time.monotonic() - waiting

        def failed(attempt: int, decision: Decision, exc: Exception) -> None:
            self._failed_attempt(txid, attempt, decision)
            if self.states is not None and decision.action != "fail":
                self._roll_states_back(txid, exc)  # the next attempt prepares again

        try:
            run_transaction(
                self.transactions, process,
                lambda table, attempt: self.commit(table, batch_id,
                                                   self.transactions.attempt_id(attempt)),
                failed=failed, ready=ready, sleep=time.sleep,
                give_up=lambda attempts, decision: self._give_up(context, frame, batch_id,
                                                                 attempts, decision),
                fatal=lambda attempt, decision: failure_error(txid, attempt, decision))
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            context.setLocalProperty(ATTEMPT_PROPERTY, None)
            context.setLocalProperty(COMMITTED_PROPERTY, None)

    def _roll_states_back(self, txid: int, cause: BaseException) -> None:
        """Undo a failed attempt's state (prepared or committed); else stop, never re-run."""
        assert self.states is not None
        try:
            self.states.rollback(txid)
        except Exception as exc:
            msg = (f"txid {txid} failed ({cause}) and the state of {self.states.components} "
                   f"could not be rolled back ({type(exc).__name__}: {exc}): re-running the "
                   "batch could apply its changes twice, so the topology stops")
            raise StateError(msg, hint="check the state provider (topology.state.provider."
                             "config), then restart: recovery at start settles the state "
                             "at the checkpoint's txid") from exc

    def _failed_attempt(self, txid: int, attempt: int, decision: Decision) -> None:
        where = f"{decision.component!r}" if decision.component else "the batch"
        self.progress.increment({f"__transactions.{decision.kind}": 1})
        log.warning("txid %s attempt %d failed in %s: %s; %s", txid, attempt + 1, where,
                    decision.cause, {"retry": f"retrying in {decision.delay_s:.1f} s",
                                     "dead-letter": "dead-lettering the batch's input",
                                     "fail": "stopping"}[decision.action])

    def _give_up(self, context: Any, frame: Any, batch_id: int, attempt: int,
                 decision: Decision) -> None:
        """The failure policy ``dead-letter``: the batch again, its spout tuples dead letters."""
        txid = self.txid_base + batch_id
        reason = given_up_reason(txid, attempt, decision.cause)
        context.setLocalProperty(ATTEMPT_PROPERTY, str(self.transactions.attempt_id(attempt)))
        context.setLocalProperty(DEAD_LETTER_PROPERTY, reason)
        try:
            self.commit(self.rows(frame), batch_id, self.transactions.attempt_id(attempt),
                        given_up=True)
        finally:
            context.setLocalProperty(DEAD_LETTER_PROPERTY, None)
        self.progress.increment({"__transactions.dead_lettered": 1})

    def commit(self, table: pa.Table, batch_id: int, attempt_id: int = 0,
               given_up: bool = False) -> None:
        """The commit phase (``kstorm/_runtime/commit_phase.py``) of ``batch_id``'s rows.

        ``given_up``: the transaction's input went to the dead letters; no user code runs
        (the commit stage is skipped), the sinks commit the empty batch under its txid.
        """
        batch = batch_commit(table, batch_id,
                             TransactionAttempt(self.txid_base + batch_id, attempt_id),
                             given_up=given_up)
        batch.kept["started"] = time.monotonic()
        run_commit_phase(self, self._stage, batch)

    # -- the commit phase's steps, as they run on Spark (CommitSide) -------------------------

    def read_offsets(self, batch: BatchCommit) -> None:
        """Step 2: the offset log's ends; 2b: transactional spouts' ends, after replays."""
        offsets = read_batch(self.checkpoint, batch.batch_id, self._spouts,
                             kafka_spouts=self._kafka)
        batch.kept["offsets"] = offsets
        batch.kept["transactional"] = self._transactional_ends(offsets, batch.by_dest)

    def settle_trees(self, batch: BatchCommit, events: pa.Table) -> Any:
        """Step 3b: the ackers' events -> the spouts' decisions (``reliability.py``)."""
        if self.reliability is None:
            return None
        return self.reliability.commit(
            batch.kept["offsets"], list(zip(events.column("__task").to_pylist(),
                                            events.column("__vals").to_pylist(), strict=True)))

    def close_windows(self, batch: BatchCommit) -> list[ClosedWindows]:
        """Step 4: each aggregate's partials of the batch folded in; its closed windows."""
        out, persist = [], []
        for component, windows in self.windows.items():
            rows = batch.by_dest.pop(window_dest(component), EMPTY)
            closed, state = windows.commit_closed(batch.batch_id,
                                                  rows.column("__vals").to_pylist(),
                                                  batch.kept["offsets"].timestamp_ms)
            persist.append((windows, state))
            out.append(ClosedWindows(component,
                                     self.topology.components[component].streams["default"],
                                     closed, state))
        batch.kept["persist"] = persist
        return out

    def commit_sinks(self, batch: BatchCommit) -> int:
        """Step 6: each sink commits the batch, in topology order; the tuples delivered.

        Not overlapped, the first sink that accepts the provider's states commits them in
        its own atomic step (:meth:`_state_carrier`).
        """
        state = self._sink_state(batch)
        carried = None if self.overlap else self._state_carrier(batch.txid)
        batch.kept["carried"] = carried
        rows = dict(batch.by_dest)  # an overlapped retry starts from the same rows
        # No automatic collection while the sinks build and keep an object or more per
        # tuple (collections would walk them all, again and again, finding nothing; with
        # RedisSink and 400,000 tuples, ~half of its commit): they are freed, by reference
        # counting, when _commit_sinks returns, before collection is on again.
        with paused():
            delivered = self._commit_sinks(batch.txid, batch.batch_id, rows, batch.to_sinks,
                                           batch.kept["offsets"].kafka_ends(), state, carried)
        batch.kept["unknown"] = rows
        return delivered

    def _sink_state(self, batch: BatchCommit) -> dict[str, bytes]:
        """The runtime's state after the batch, stored with the sinks' offsets (step 6)."""
        if "sink_state" in batch.kept:
            return batch.kept["sink_state"]
        state = {window_state_key(w.component): snap.snapshot()
                 for w, snap in batch.kept["persist"]}
        for spout, end in batch.kept["transactional"].items():  # for a lost checkpoint
            state[txspout.state_key(spout)] = json.dumps(end).encode()
        state.update(_windowed_bolt_state(batch.by_dest))
        if self.reliability is not None and batch.reliable is not None:
            state[UNACKED_STATE] = self.reliability.resume_state(batch.batch_id,
                                                                 batch.reliable)
        batch.kept["sink_state"] = state
        return state

    def write_dead_letters(self, batch: BatchCommit) -> None:
        """Step 7: the batch's dead letters, with the spouts' given-up tuples."""
        self.dead_letters.write(batch.batch_id, driver_rows.dead_letters(batch.dead)
                                + (batch.reliable.dead_letters if batch.reliable is not None
                                   else []))

    def commit_states(self, batch: BatchCommit) -> None:
        """Step 7b: the provider's states commit the txid, unless a sink carried them."""
        if self.states is not None and batch.kept.get("carried") is None:
            self.states.commit(batch.txid)

    def persist(self, batch: BatchCommit) -> None:
        """Step 8: what the next batch (and a replay of this one) starts from."""
        # the windows' state after this batch (a replay restarts from the previous)
        for windows, snap in batch.kept["persist"]:
            windows.persist(batch.batch_id, snap)
        # what transactional spouts' replays returned (the next batch plans from it)
        for spout, end in batch.kept["transactional"].items():
            self.layout.write(self.layout.txmeta_path(spout), json.dumps(
                {"seq": end.get("seq", 0), "metas": end.get("metas", {})}).encode())
        # the spouts' trackers and books after this batch
        if self.reliability is not None and batch.reliable is not None:
            self.reliability.persist(batch.batch_id, batch.reliable)

    def record(self, batch: BatchCommit) -> None:
        """Step 9: progress and captured emissions, once the sinks committed the batch."""
        batch_id, reliable, metrics = batch.batch_id, batch.reliable, batch.metrics
        offsets = batch.kept["offsets"]
        for counters in metrics:
            self.progress.add_counters(counters)
        if reliable is not None:
            self.progress.add_counters(reliable.counters)
            self.progress.set_gauges(reliable.gauges)
        self._captured(batch_id, batch.captured)
        unknown = batch.kept.get("unknown", {})
        for dest in unknown:
            log.error("batch %s: %d rows for unknown destination %r", batch_id,
                      unknown[dest].num_rows, dest)
        self.committed_txid = batch.txid
        seconds = time.monotonic() - batch.kept["started"]
        self.progress.batch_committed(batch_id, offsets.summary(), seconds,
                                      batch.kept.get("blocking"))
        if progress_log.isEnabledFor(logging.INFO):
            late = sum(v for c in metrics for k, v in c.items()
                       if k.endswith(".late") and isinstance(v, int))
            combined = sum(v for c in metrics for k, v in c.items()  # BaseSink.combine
                           if k.endswith(".combined") and isinstance(v, int))
            marks = {w.component: snap.watermark for w, snap in batch.kept["persist"]
                     if snap.watermark is not None}
            progress_log.info(
                "topology %r batch %s (txid %s): in %s; %d tuples to sinks (%d of them folded "
                "into others by the sinks' combine), %d late, %d dead letters; watermark %s; "
                "commit %.0f ms; ends %s", self.name, batch_id, batch.txid,
                self._inputs(batch_id, offsets), batch.delivered + combined, combined, late,
                batch.dead.num_rows + (len(reliable.dead_letters) if reliable is not None
                                       else 0),
                marks or "-", 1000 * seconds, offsets.summary())

    # -- the sinks' commit overlapping the next batch (kstorm.commit.overlap) ---------------

    def commit_later(self, batch: BatchCommit) -> None:
        """Steps 6 and 9 on the sinks' thread, while Spark records the batch and runs the next.

        What the next batch is planned and computed from is final already (steps 7 and 8
        ran): a crash before the sinks commit runs this batch again from the state before it.
        """
        self._sink_state(batch)  # built here, not on the sinks' thread
        batch.kept["blocking"] = time.monotonic() - batch.kept["started"] + self._waited
        self._waited = 0.0
        self._pending = self._sinks_thread().submit(self._overlapped_sinks, batch)

    def _sinks_thread(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"kstorm-sinks-{self.name}")
        return self._pool

    def _overlapped_sinks(self, batch: BatchCommit) -> None:
        """Step 6 for an overlapped batch, retried in place; then step 9. Never raises.

        A failure the policy makes final is kept (:meth:`wait_for_sinks` raises it in the
        next batch, the handle reports it) and stops the query: Spark already recorded the
        batch, so the next start runs it again (``reconcile.decide``'s replay).
        """
        last: list[Exception] = []

        def failed(attempt: int, decision: Decision, exc: Exception) -> None:
            last[:] = [exc]
            self._failed_attempt(batch.txid, attempt, decision)

        def give_up(attempts: int, decision: Decision) -> int:
            # no dead-lettering a batch Spark recorded already: the policy's end is a stop
            raise failure_error(batch.txid, attempts - 1, decision) from last[0]

        try:
            batch.delivered = run_transaction(
                self.transactions, lambda _attempt: None,
                lambda _made, _attempt: self.commit_sinks(batch), failed=failed,
                give_up=give_up,
                fatal=lambda attempt, decision: failure_error(batch.txid, attempt, decision),
                sleep=time.sleep)
        except KstormError as failure:
            self.failure = self.sink_failure = failure
            log.error("topology %r stops: %s (batch %s runs again at the next start)",
                      self.name, failure, batch.batch_id)
            if self.on_failure is not None:  # not from this thread: stop waits for batches
                threading.Thread(target=self.on_failure, name=f"kstorm-stop-{self.name}",
                                 daemon=True).start()
            return
        self.record(batch)

    def wait_for_sinks(self) -> None:
        """Wait for the previous batch's sinks to commit; raise their failure if they could not."""
        pending = self._pending  # (one thread runs the sinks, in submission order)
        if pending is not None:
            pending.result()
        if self.sink_failure is not None:
            raise self.sink_failure

    def _state_carrier(self, txid: int) -> tuple[str, Any] | None:
        """The sink that commits the provider's states with its values (one atomic step).

        The first sink that accepts them (a RedisSink on the Redis provider's server); its
        ``pre_commit`` hooks run now, before the step. None: the states commit after the
        sinks (step 7b).
        """
        if self.states is None:
            return None
        states = self.states.atomic_commit(txid)
        if states is None:
            return None
        for sink_id, sink in self.sinks.items():
            accepts = getattr(sink, "accepts_states", None)
            if callable(accepts) and accepts(states):
                if not self._carrier_logged:
                    log.info("topology %r: the state of %d task(s) commits in sink %r's "
                             "atomic step", self.name, states.tasks, sink_id)
                    self._carrier_logged = True
                self.states.pre_commit(txid)
                return sink_id, states
        return None

    def _inputs(self, batch_id: int, offsets: Any) -> str:
        """Records read per Kafka spout in this batch (its ends minus the previous batch's)."""
        if not self._kafka:
            return "-"
        before = read_batch(self.checkpoint, batch_id - 1, self._spouts,
                            kafka_spouts=self._kafka) if batch_id > 0 else None
        parts = []
        for spout in sorted(self._kafka):
            ends = offsets.ends_of(spout)
            if before is None or spout not in before.spouts:
                parts.append(f"{spout} ? records")
                continue
            old = before.ends_of(spout)
            n = sum(end - old.get(t, {}).get(p, end) for t, ps in ends.items()
                    for p, end in ps.items())
            parts.append(f"{spout} {n} records")
        return ", ".join(parts)

    def _transactional_ends(self, offsets: Any, by_dest: dict[str, pa.Table]
                            ) -> dict[str, dict[str, Any]]:
        ends = {}
        for spout in self._transactional:
            rows = by_dest.pop(txmeta_dest(spout), EMPTY)
            raw = offsets.spouts.get(spout)
            if raw is None:
                continue
            replayed = dict(zip(rows.column("__task").to_pylist(),
                                rows.column("__vals").to_pylist(), strict=True))
            ends[spout] = txspout.effective_end(raw.raw, replayed)
        return ends

    def _commit_sinks(self, txid: int, batch_id: int, by_dest: dict[str, pa.Table],
                      extra: dict[str, list[ClosedWindows]], ends: Any, state: dict[str, bytes],
                      carried: Any) -> int:
        """Commit the batch to each sink, in topology order; the tuples delivered."""
        delivered = 0
        for sink_id, sink in self.sinks.items():
            rows = by_dest.pop(sink_id, EMPTY)
            windows_in = extra.get(sink_id, [])
            table = (windows_in[0].table() if getattr(sink, "accepts_table", False)
                     and rows.num_rows == 0
                     and len(windows_in) == 1 else None)
            tuples = ([] if table is not None
                      else driver_rows.sink_tuples(self.topology, rows, windows_in, paused))
            batch = SinkBatch(txid, batch_id, tuples, ends, state,
                              states=carried[1] if carried and carried[0] == sink_id else None,
                              table=table)
            delivered += batch.size
            self._commit_sink(sink_id, sink, batch)
        return delivered

    def _commit_sink(self, sink_id: str, sink: BaseSink, batch: SinkBatch) -> None:
        try:
            sink.commit(batch)
        except Exception as exc:
            try:
                sink.abort(batch)
            except Exception:  # the commit's failure is what the user must see
                log.exception("sink %r: abort of txid %s raised", sink_id, batch.txid)
            if isinstance(exc, KstormError):
                raise
            msg = f"sink {sink_id!r} failed to commit txid {batch.txid}: " \
                  f"{type(exc).__name__}: {exc}"
            raise SinkError(msg) from exc

    def _captured(self, batch_id: int, captured: pa.Table) -> None:
        if captured.num_rows == 0:
            return
        found = driver_rows.emitted(captured)
        if self.settings.capture_emitted:
            self.captured.extend(found)
        driver_rows.log_emitted(self.settings, batch_id, found)

    def close(self) -> None:
        """Close the sinks (opened by the runner before the query starts) and the DLQ producer.

        An overlapped batch still committing finishes first (Spark recorded it already).
        """
        try:
            self.wait_for_sinks()
        except KstormError as exc:  # kept in self.failure: reported by the handle
            log.debug("topology %r: %s", self.name, exc)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for sink in self.sinks.values():
            sink.close()
        self.dead_letters.close()


def _windowed_bolt_state(by_dest: dict[str, pa.Table]) -> dict[str, bytes]:
    """Snapshots windowed bolt tasks sent this batch (stored with the sinks' offsets)."""
    state: dict[str, bytes] = {}
    for dest in [d for d in by_dest if d.startswith(STATE_PREFIX)]:
        rows = by_dest.pop(dest)
        component = dest[len(STATE_PREFIX):]
        for task, blob in zip(rows.column("__task").to_pylist(),
                              rows.column("__vals").to_pylist(), strict=True):
            state[state_key(component, task)] = blob
    return state
