"""One batch as one transaction, for both orchestrations (seed 002).

The Spark runner's commit phase (``kstorm/_spark/commit.py``, ``CommitPhase``) and
:class:`~kstorm.testdriver.TopologyTestDriver` drive the same loop; each brings only what
differs: how an attempt's processing phase runs (a Spark job, or the stages in this
process), what it must wait for, how a failed attempt is undone, and whether a retry
sleeps. The loop runs the batch with a fixed txid and content, in txid order (the caller
runs one batch at a time, in order). :func:`run_transaction`:

1. Process attempt ``n`` (0, 1, ...): the orchestration's ``process(n)``, the same txid
   and content as every other attempt, attempt id ``Transactions.attempt_id(n)``.
2. Wait for what must be final before this batch commits (``ready``: on Spark, the
   previous batch's overlapped sinks); a failure there is not this batch's, so it is not
   retried: it propagates.
3. The commit phase of attempt ``n`` (``commit``); its result is the batch's.
4. A failed step 1 or 3: :meth:`Transactions.decide` says what follows, and the
   orchestration reports and undoes the attempt (``failed``: counters, a log line, the
   state it prepared rolled back).
5. ``retry``: after the backoff (``sleep``), attempt ``n + 1`` from step 1.
6. ``dead-letter`` (the policy, after the last attempt): ``give_up`` runs the batch once
   more with its spout tuples as dead letters (:func:`given_up_reason` says why); its
   result is the batch's.
7. ``fail``: :func:`failure_error` (naming the component, the txid and the cause) is
   raised from the last failure.

The orchestration then records the batch (Spark: its commit log; the test driver: the
outputs it keeps). The commit phase's steps both run are here too: a windowed aggregate
folding the batch in and closing windows (:func:`fold_partials`, :class:`ClosedWindows`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from kstorm._runtime.transaction import Decision, Transactions
from kstorm.errors import KstormError, SinkError, SourceError
from kstorm.tuple import Fields, Tuple
from kstorm.windowing.aggregate import AggregateWindows

P = TypeVar("P")
R = TypeVar("R")


def run_transaction(transactions: Transactions, process: Callable[[int], P],
                    commit: Callable[[P, int], R], *,
                    failed: Callable[[int, Decision, Exception], None],
                    give_up: Callable[[int, Decision], R],
                    fatal: Callable[[int, Decision], BaseException],
                    ready: Callable[[], None] | None = None,
                    sleep: Callable[[float], None] = lambda _s: None) -> R:
    """Steps 1-7 of the module docstring; returns what the committed attempt returned.

    Args:
        transactions: the topology's retry policy.
        process: runs attempt ``n``'s processing phase.
        commit: runs the commit phase of what ``process`` made, for attempt ``n``.
        failed: reports and undoes failed attempt ``n`` (may raise: then nothing follows).
        give_up: the policy ``dead-letter`` after ``attempts`` attempts.
        fatal: the error the policy ``fail`` raises after attempt ``n``.
        ready: waits, before each commit phase, for what must be final first.
        sleep: waits out a retry's backoff (seconds).
    """
    attempt = 0
    while True:
        # Step 1: the attempt's processing phase.
        try:
            made = process(attempt)
        except Exception as exc:  # noqa: BLE001 - decided below, re-raised if final
            failure = exc
        else:
            # Step 2: what must be final first (its failure is not this batch's).
            if ready is not None:
                ready()
            # Step 3: the attempt's commit phase.
            try:
                return commit(made, attempt)
            except Exception as exc:  # noqa: BLE001 - decided below, re-raised if final
                failure = exc
        # Step 4: decide, report, undo.
        decision = transactions.decide(attempt, failure)
        failed(attempt, decision, failure)
        # Step 5: retry, after the backoff.
        if decision.action == "retry":
            sleep(decision.delay_s)
            attempt += 1
            continue
        # Step 6: dead-letter the batch's input and go on.
        if decision.action == "dead-letter":
            return give_up(attempt + 1, decision)
        # Step 7: stop.
        raise fatal(attempt, decision) from failure


def given_up_reason(txid: int, attempts: int, cause: str) -> str:
    """Why a given-up transaction's spout tuples are dead letters (step 6)."""
    return (f"transaction {txid} failed {attempts} times (kstorm.transaction.max."
            f"attempts); last: {cause}")


def failure_error(txid: int, attempt: int, decision: Decision) -> KstormError:
    """The error that stops a topology after attempt ``attempt`` of ``txid`` (step 7)."""
    where = f"component {decision.component!r}" if decision.component else "the batch"
    tries = "" if decision.kind == "fatal" else f" after {attempt + 1} attempt(s)"
    msg = f"txid {txid} failed in {where}{tries}: {decision.cause}"
    hint = ("raise kstorm.transaction.max.attempts, or set kstorm.transaction.failure."
            "policy = dead-letter to dead-letter a failing batch's input and go on"
            if decision.kind != "fatal" else "")
    kind = SinkError if decision.kind == "sink" else (
        SourceError if decision.kind == "source" else KstormError)
    return kind(msg, hint=hint)


def fold_partials(windows: AggregateWindows, payloads: Iterable[Mapping[str, Any]],
                  now: int | None = None) -> pa.Table:
    """Fold a batch into a windowed aggregate; the windows the watermark passed.

    A payload per read task of the batch: its ``partials`` (None: none), its streams'
    ``latest`` timestamps and its ``late`` count. ``now``: the batch's processing time
    (Spark's batch timestamp, the test driver's clock), for processing-time sessions.
    """
    parts, late = [], 0
    latest: dict[Any, int] = {}
    for payload in payloads:
        if payload["partials"] is not None:
            parts.append(payload["partials"])
        late += payload["late"]
        for stream, ts in payload["latest"].items():
            latest[stream] = max(ts, latest.get(stream, ts))
    return windows.advance(parts, latest, late, now)


@dataclass
class ClosedWindows:
    """The windows a built-in windowed aggregate closed in a batch, for its consumers."""

    component: str
    fields: Fields
    closed: pa.Table
    windows: AggregateWindows

    def tuples(self) -> list[Tuple]:
        """One tuple per window: ``[*key, window_start, window_end, *aggregates]``."""
        return [Tuple(v, self.fields, self.component) for v in self.windows.results(self.closed)]

    def table(self) -> pa.Table | None:
        """The same as Arrow columns named by the fields (None for per-window aggregates)."""
        return self.windows.results_table(self.closed, list(self.fields))
