"""A batch's commit phase: its steps, in their order, for both orchestrations.

The processing phase of a batch (on Spark, its job; in the test driver, the stages run in
this process) leaves rows addressed to the driver. :func:`run_commit_phase` turns them into
the batch's effects, one step after the other, the same for the Spark runner
(``kstorm/_spark/commit.py``) and :class:`~kstorm.testdriver.TopologyTestDriver`; each
brings a :class:`CommitSide` that says what a step does where it runs:

1. Split the rows by destination (a given-up transaction keeps only its dead letters,
   metrics and snapshots: no output at all).
2. ``read_offsets``: the batch's source offsets (Spark: its offset log, written before the
   batch ran, so a replay carries the same offsets; transactional spouts' end offsets with
   what opaque replays returned). The test driver has no offset log.
3. Read the stages' metrics (folded into progress in step 9, once the batch committed).
   3b. ``settle_trees`` (at least once): the ackers' events become the spouts' ack/fail,
   retries, time-outs and dead letters (``kstorm/_runtime/reliability.py``).
4. ``close_windows``: each windowed aggregate folds the batch's partials in; the windows
   the watermark passed become tuples for the aggregate's consumers (processing-time
   sessions: at the batch's time, Spark's offset-log timestamp or the driver's clock).
5. The commit stage: committers (seed 002's ``ICommitter``) and the bolts downstream of
   them execute their tuples, then ``finish_batch`` in topology order, strictly in txid
   order across batches (``kstorm/_runtime/driver_rows.py``); what they emit for sinks
   joins the sinks' rows. A given-up transaction runs no user code: it skips this step.
6. ``commit_sinks``: each sink, in topology order, commits its tuples under the txid (on
   Spark with the Kafka end offsets and the runtime's state after the batch: sinks make
   this step idempotent per txid, ``kstorm/sink.py``; a sink that fails is aborted). The
   test driver's sinks receive their tuples.
7. ``write_dead_letters``: undecodable records, tuples whose bolt raised, spout tuples out
   of retries, with their reasons: after the sinks, so a retried attempt writes them once.
   7b. ``commit_states``: every stateful bolt task's state held outside Spark commits the
   txid its task prepared (seed 000; ``kstorm/_runtime/state_book.py``), after the sinks:
   a crash in between is settled at start. A failed attempt is rolled back there before it
   re-runs.
8. ``persist``: what the next batch (and a replay of this one) starts from: windowed
   aggregates' state under the batch id, transactional spouts' metadata, at least once the
   spouts' trackers and books.
9. ``record``: progress from the metrics of step 3; captured emissions kept for
   ``kstorm.testing`` and logged on ``kstorm.debug`` (``topology.debug``).

With ``kstorm.commit.overlap`` (``CommitSide.overlap``: Spark topologies whose state all
lives with sinks that record offsets, ``kstorm/_spark/overlap.py``) steps 7 and 8 run before
step 6, and steps 6 and 9 run later (``commit_later``: on the sinks' thread, while Spark
records the batch and runs the next).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from kstorm._runtime import driver_rows
from kstorm._runtime.batch_loop import ClosedWindows
from kstorm._runtime.envelope import (
    ACKER_EVENTS,
    CAPTURE,
    DEAD_LETTER,
    EMPTY,
    METRICS,
    STATE_PREFIX,
    TXMETA_PREFIX,
    split_by_dest,
)
from kstorm._runtime.plan import Plan
from kstorm.config import TopologyConfig
from kstorm.topology import StormTopology
from kstorm.transactional.attempt import TransactionAttempt


@dataclass
class BatchCommit:
    """One attempt's commit phase: what its steps found, for the steps after them."""

    batch_id: int
    attempt: TransactionAttempt
    by_dest: dict[str, pa.Table]
    given_up: bool = False
    metrics: list[dict[str, Any]] = field(default_factory=list)  # step 3 (and 4, 5)
    reliable: Any = None  # step 3b: the side's outcome of the spouts' trees
    closed: list[ClosedWindows] = field(default_factory=list)  # step 4
    to_sinks: dict[str, list[ClosedWindows]] = field(
        default_factory=lambda: defaultdict(list))  # step 4: closed windows per consumer
    dead: pa.Table = field(default_factory=lambda: EMPTY)  # step 7's rows
    captured: pa.Table = field(default_factory=lambda: EMPTY)  # step 9's rows
    delivered: int = 0  # step 6: tuples the sinks took
    kept: dict[str, Any] = field(default_factory=dict)  # what a side keeps between steps

    @property
    def txid(self) -> int:
        return self.attempt.transaction_id


class CommitSide(Protocol):
    """What an orchestration does at each step of the commit phase (module docstring)."""

    overlap: bool

    def read_offsets(self, batch: BatchCommit) -> None:
        """Step 2."""

    def settle_trees(self, batch: BatchCommit, events: pa.Table) -> Any:
        """Step 3b: the outcome of the spouts' trees (None: no tracked spout)."""

    def close_windows(self, batch: BatchCommit) -> list[ClosedWindows]:
        """Step 4: per windowed aggregate, the windows this batch closed."""

    def commit_sinks(self, batch: BatchCommit) -> int:
        """Step 6: the tuples delivered."""

    def write_dead_letters(self, batch: BatchCommit) -> None:
        """Step 7."""

    def commit_states(self, batch: BatchCommit) -> None:
        """Step 7b."""

    def persist(self, batch: BatchCommit) -> None:
        """Step 8."""

    def record(self, batch: BatchCommit) -> None:
        """Step 9."""

    def commit_later(self, batch: BatchCommit) -> None:
        """Steps 6 (``commit_sinks``) and 9 (``record``) after the batch (``overlap``)."""


@dataclass
class CommitStage:
    """What step 5 runs the committers with."""

    topology: StormTopology
    plan: Plan | None
    name: str
    conf: dict[str, Any]
    settings: TopologyConfig


def batch_commit(table: pa.Table, batch_id: int, attempt: TransactionAttempt, *,
                 given_up: bool = False) -> BatchCommit:
    """Step 1: the attempt's rows for the driver, by destination."""
    by_dest = split_by_dest(table)
    if given_up:
        by_dest = {d: rows for d, rows in by_dest.items()
                   if d in (DEAD_LETTER, METRICS) or d.startswith((STATE_PREFIX, TXMETA_PREFIX))}
    return BatchCommit(batch_id, attempt, by_dest, given_up)


def run_commit_phase(side: CommitSide, stage: CommitStage, batch: BatchCommit) -> None:
    """Steps 2-9 of the module docstring, for ``batch`` (step 1: :func:`batch_commit`)."""
    by_dest = batch.by_dest
    # Step 2: the batch's source offsets.
    side.read_offsets(batch)
    # Step 3: the stages' metrics.
    batch.metrics = driver_rows.metrics(by_dest.pop(METRICS, EMPTY))
    # Step 3b: at least once, the spout side of the trees that ended or timed out.
    batch.reliable = side.settle_trees(batch, by_dest.pop(ACKER_EVENTS, EMPTY))
    # Step 4: windowed aggregates fold the batch in; the windows that closed go on.
    batch.closed = side.close_windows(batch)
    for closed in batch.closed:
        batch.metrics.append({f"{closed.component}.windows": closed.closed.num_rows})
        for consumer, _ in stage.topology.consumers(closed.component, "default"):
            batch.to_sinks[consumer].append(closed)
    # Step 5: the commit stage (committers and the bolts they feed).
    if stage.plan is not None and stage.plan.commit_stage is not None and not batch.given_up:
        batch.metrics.append(driver_rows.run_commit_stage_rows(
            stage.topology, stage.plan, stage.name, stage.conf, stage.settings,
            batch.batch_id, batch.attempt, by_dest))
    batch.captured = by_dest.pop(CAPTURE, EMPTY)
    batch.dead = by_dest.pop(DEAD_LETTER, EMPTY)
    if side.overlap:
        # Steps 7 and 8 now (what the next batch is planned from); 6 and 9 later.
        side.write_dead_letters(batch)
        side.persist(batch)
        side.commit_later(batch)
        return
    # Step 6: the sinks, in topology order.
    batch.delivered = side.commit_sinks(batch)
    # Step 7: dead letters.
    side.write_dead_letters(batch)
    # Step 7b: state held by a provider commits this txid (seed 000), after the sinks.
    side.commit_states(batch)
    # Step 8: what the next batch starts from.
    side.persist(batch)
    # Step 9: progress and captured emissions.
    side.record(batch)

