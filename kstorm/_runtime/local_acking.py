"""At least once in one process: the test driver's ackers, spout trackers and retries.

On Spark the acker operator keeps the tuple trees (``kstorm/_spark/acker.py``), the commit
phase settles them (``kstorm/_runtime/reliability.py``) and the spouts' sources replay the
retries that are due. :class:`~kstorm.testdriver.TopologyTestDriver` runs the same parts in
its own process, at its clock: ``run_acker_batch`` over one in-memory store per acker task,
a :class:`~kstorm.acking.spout_tracker.SpoutTracker` per Kafka or list spout (with a copy of
the spout, whose ``ack``/``fail`` run here), an :class:`~kstorm.acking.emits.EmitTracker` per
tracked free-form spout, and :func:`~kstorm._runtime.reliability.settle_trees`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from kstorm._runtime.plan import AckingPlan, source_kind
from kstorm._runtime.reliability import BatchOutcome, apply_decisions, settle_trees
from kstorm.acking.acker import DictStore, run_acker_batch, stale_roots
from kstorm.acking.emits import EmitTracker
from kstorm.acking.offsets import KafkaMessageId, spout_message_id
from kstorm.acking.retry import RetryPolicy
from kstorm.acking.spout_tracker import SpoutTracker
from kstorm.topology import StormTopology
from kstorm.tuple import Tuple


class LocalAcking:
    """The trees and spout trackers of a topology run in one process (none: no tracking).

    Args:
        topology: the topology.
        plan: its :class:`AckingPlan` (None: at most once, nothing is tracked).
    """

    def __init__(self, topology: StormTopology, plan: AckingPlan | None) -> None:
        self.topology = topology
        self.plan = plan
        self.ackers: dict[int, DictStore] = {}
        self.trackers: dict[str, SpoutTracker] = {}
        self.spouts: dict[str, Any] = {}  # each tracked spout's copy, its ack/fail hooks
        self.records: dict[str, dict[KafkaMessageId, list[Any]]] = {}  # what a retry re-emits
        self.emits: dict[str, EmitTracker] = {}  # tracked free-form spouts' pending trees
        if plan is None:
            return
        self.ackers = {i: DictStore() for i in range(plan.n_ackers)}
        for spout in plan.spout_tasks:
            declared = topology.components[spout].component
            if source_kind(declared) == "next_tuple":
                self.emits[spout] = EmitTracker(timeout_ms=plan.timeout_ms)
                continue
            self.trackers[spout] = SpoutTracker(timeout_ms=plan.timeout_ms,
                                                retry=declared.retry or RetryPolicy())
            self.spouts[spout] = copy.deepcopy(declared)
            self.records[spout] = {}

    def remember(self, spout: str, key: KafkaMessageId, values: list[Any]) -> None:
        """Keep a tracked spout's record by its position (a retry emits it again)."""
        if spout in self.records:
            self.records[spout][key] = values

    def next_times(self, spouts: Mapping[str, Any] | None = None, *,
                   emits: bool = False) -> list[int]:
        """When a retry or a time-out is next due, per tracker (of ``spouts`` only, if given)."""
        times = [t for s, tracker in self.trackers.items() if spouts is None or s in spouts
                 for t in (tracker.next_retry_at(), tracker.next_timeout_at()) if t is not None]
        if emits:
            times += [t for e in self.emits.values() if (t := e.next_timeout_at()) is not None]
        return times

    def outstanding(self) -> dict[str, int]:
        """Each tracked spout's tuples pending or waiting to retry."""
        return {s: t.pending_count + t.waiting_count for s, t in self.trackers.items()}

    def retries(self, tuples: dict[str, list[Tuple]], now_ms: int,
                cap_of: Callable[[str], int | None]) -> dict[str, list[tuple]]:
        """The failed records due by ``now_ms`` join the batch (first), as on Spark.

        Each spout tuple gets its attempt mark (``_ids``); returns, per spout, the retries'
        ``(topic, partition, offset, fails)`` for :meth:`settle`.
        """
        out: dict[str, list[tuple]] = {}
        for spout, tracker in self.trackers.items():
            cap = cap_of(spout)
            fields = self.topology.components[spout].streams["default"]
            due = sorted((at, m) for at, m in tracker.waiting() if at <= now_ms)
            due = [m for _, m in due][:None if cap is None else max(cap, 1)]  # as on Spark
            replays = []
            for m in due:
                message_id = spout_message_id(m)  # a list row's "b:i", a record's position
                if isinstance(message_id, KafkaMessageId):
                    message_id = tuple(message_id)
                t = Tuple(list(self.records[spout][m]), fields, spout, "default", message_id)
                t._ids = (tracker.num_fails(m), now_ms)
                replays.append(t)
            for t in tuples.get(spout, []):
                t._ids = (0, now_ms)
            if replays:
                tuples[spout] = replays + tuples.get(spout, [])
            out[spout] = [(m.topic, m.partition, m.offset, tracker.num_fails(m)) for m in due]
        return out

    def settle(self, acker_rows: Mapping[int, list[Any]], now_ms: int,
               retries: Mapping[str, list[tuple]]) -> BatchOutcome:
        """The commit phase's step 3b: the ackers run, their events become spout decisions."""
        assert self.plan is not None
        payloads = []
        for task, store in self.ackers.items():
            if acker_rows.get(task):
                payloads.append(run_acker_batch(acker_rows[task], store,
                                                report_acks=self.plan.report_acks)
                                .to_payload())
            for root in list(stale_roots(list(store.items()), now_ms, self.plan.timeout_ms)):
                store.delete(root)
        out = BatchOutcome(trackers=self.trackers, emits=self.emits)

        def apply(spout: str, decisions: list[Any]) -> None:
            apply_decisions(spout, self.spouts[spout], self.trackers[spout].retry.max_retries,
                            decisions, out, fetch=lambda _spout, _ids: {},
                            row_of=self.records[spout].get)

        settle_trees(self.plan.spout_tasks, payloads, out,
                     lambda spout: (now_ms, retries.get(spout, [])), apply)
        return out

    def snapshot(self) -> Any:
        """What :meth:`restore` takes back to (before a batch's attempt)."""
        return copy.deepcopy((self.ackers, self.trackers, self.spouts, self.emits))

    def restore(self, saved: Any) -> None:
        """Undo a failed attempt's acks, fails and retries."""
        self.ackers, self.trackers, self.spouts, self.emits = saved
