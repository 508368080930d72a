"""One acker task's work for one batch (Storm's ``Acker.execute``, batch at a time).

Input: the payloads the executors sent to this acker task (see :mod:`kstorm.acking.outbox`).
State: a store of :class:`AckerEntry` per pending root (in Spark, the acker's ``MapState``,
versioned by batch id); each entry is the spout task, the ack val, when the tree started and
whether it failed -- the same size whatever the size of the tree.

Steps for one batch:

1. Combine the payloads per root (XOR the vals, keep the spout task, OR the failed flags).
2. For each root: a root whose spout ``init`` is in this batch is new (root ids are unique
   per message attempt), so its entry is the combined value as it stands; any other root
   is merged into its stored entry. Only the second kind reads the store.
3. :func:`settle` the entry: a failed tree -> ``FAILED`` event; ack val 0 -> ``ACKED``;
   otherwise the entry is stored (a new one is reported as ``pending`` with its message id,
   so the spout can time it out and replay it).
4. Completions of first attempts whose spout does not ask for ``ack`` callbacks are only
   counted: the spout side never heard of them.

Example:
    >>> from kstorm.acking.outbox import AckerOutbox
    >>> from kstorm.acking.messages import AckerMessage
    >>> box = AckerOutbox(n_ackers=1)
    >>> box.init(6, spout_task=0, init_val=5, msg=("t", 0, 9, 0), now_ms=100)
    >>> store = DictStore()
    >>> result = run_acker_batch([box.payloads()[0]], store)
    >>> [(p.root_id, p.msg) for p in result.pending], len(store)
    ([(6, ('t', 0, 9, 0))], 1)
    >>> box.add(AckerMessage.ack(6, 5))
    >>> run_acker_batch([box.payloads()[0]], store).events[0].outcome
    <Outcome.ACKED: 'acked'>
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from kstorm.acking.ledger import AckerEntry, settle
from kstorm.acking.messages import Outcome
from kstorm.acking.outbox import NO_TASK, SpoutMsg


class AckerStore(Protocol):
    """Where an acker task keeps its pending entries (Spark ``MapState``, or a dict)."""

    def get(self, root_id: int) -> AckerEntry | None:
        """The stored entry of ``root_id``, if any."""

    def put(self, root_id: int, entry: AckerEntry) -> None:
        """Store ``entry`` for ``root_id``."""

    def delete(self, root_id: int) -> None:
        """Forget ``root_id``."""


class DictStore(dict):
    """An :class:`AckerStore` in a dict (tests, benchmarks)."""

    def get(self, root_id: int, default: Any = None) -> AckerEntry | None:  # type: ignore[override]
        """The stored entry of ``root_id``, if any."""
        return super().get(root_id, default)

    def put(self, root_id: int, entry: AckerEntry) -> None:
        """Store ``entry``."""
        self[root_id] = entry

    def delete(self, root_id: int) -> None:
        """Forget ``root_id``."""
        self.pop(root_id, None)


class TreeEvent(NamedTuple):
    """A tree that ended: tell its spout task."""

    outcome: Outcome
    root_id: int
    spout_task: int
    msg: SpoutMsg | None  # known when the tree started in this batch


class PendingTree(NamedTuple):
    """A tree that started in this batch and is still open at its end."""

    root_id: int
    spout_task: int
    msg: SpoutMsg


@dataclass
class AckerBatchResult:
    """What one acker task's batch produced."""

    events: list[TreeEvent] = field(default_factory=list)
    pending: list[PendingTree] = field(default_factory=list)
    acked: Counter[int] = field(default_factory=Counter)  # spout task -> completions counted
    added: int = 0     # entries stored
    removed: int = 0   # stored entries that ended

    def to_payload(self) -> dict[str, Any]:
        """Plain data for the driver."""
        return {"events": [(e.outcome.value, e.root_id, e.spout_task, e.msg)
                           for e in self.events],
                "pending": [tuple(p) for p in self.pending],
                "acked": dict(self.acked), "added": self.added, "removed": self.removed}


def combine_payloads(payloads: Iterable[dict[str, Any]]
                     ) -> tuple[dict[int, AckerEntry], dict[int, SpoutMsg], int]:
    """Step 1: ``(root -> combined entry, root -> message id, batch time)``."""
    combined: dict[int, list[Any]] = {}
    msgs: dict[int, SpoutMsg] = {}
    now = 0
    for payload in payloads:
        if payload.get("now") is not None:
            now = max(now, int(payload["now"]))
        msgs.update(payload["msgs"])
        for root, xor, task, failed in zip(payload["roots"], payload["xors"], payload["tasks"],
                                           payload["failed"], strict=True):
            entry = combined.get(root)
            if entry is None:
                combined[root] = [xor, task, failed]
                continue
            entry[0] ^= xor
            if entry[1] == NO_TASK:
                entry[1] = task
            entry[2] = entry[2] or failed
    entries = {root: AckerEntry(None if task == NO_TASK else task, xor, now, failed)
               for root, (xor, task, failed) in combined.items()}
    return entries, msgs, now


def run_acker_batch(payloads: Iterable[dict[str, Any]], store: AckerStore, *,
                    report_acks: Collection[int] = ()) -> AckerBatchResult:
    """Steps 1-4 for one acker task.

    Args:
        payloads: what the executors sent this acker task in the batch.
        store: the task's pending entries.
        report_acks: spout tasks that want an event for every completed tree (their spout
            overrides ``ack``); other first-attempt completions are only counted.
    """
    entries, msgs, now = combine_payloads(payloads)
    result = AckerBatchResult()
    for root, partial in entries.items():
        fresh = partial.spout_task is not None and root in msgs
        current = None if fresh else store.get(root)
        entry = partial if current is None else current.merge(partial)
        event = settle(root, entry, now)
        if event is None:
            store.put(root, entry)
            if current is None:
                result.added += 1
                msg = msgs.get(root)
                if msg is not None and entry.spout_task is not None:
                    result.pending.append(PendingTree(root, entry.spout_task, msg))
            continue
        if current is not None:
            store.delete(root)
            result.removed += 1
        msg = msgs.get(root)
        if (event.outcome is Outcome.ACKED and msg is not None and _first_emit(msg)
                and event.spout_task not in report_acks):
            result.acked[event.spout_task] += 1
        else:
            if event.outcome is Outcome.ACKED and msg is not None and isinstance(msg[3], str):
                msg = (*msg[:2], b"", msg[3])  # a free-form emit's values: only a fail needs them
            result.events.append(TreeEvent(event.outcome, root, event.spout_task, msg))
    return result


def _first_emit(msg: Any) -> bool:
    """A completed tree the spout side needs no event for (unless its spout overrides ack).

    A Kafka tuple's first attempt (a retry's completion settles the retry), or any emit of a
    free-form spout (``msg[3]`` is its owner, a string: each emit is a tree of its own).
    """
    return isinstance(msg[3], str) or msg[3] == 0


def stale_roots(entries: Iterable[tuple[int, AckerEntry]], now_ms: int, timeout_ms: int
                ) -> Iterator[int]:
    """Roots started ``timeout_ms`` or longer before ``now_ms``.

    The spout side has already timed them out (it uses the same batch times), so the acker
    drops them without an event, as Storm's acker forgets entries its ``RotatingMap``
    rotates out.
    """
    cutoff = now_ms - timeout_ms
    for root, entry in entries:
        if entry.created_at_ms <= cutoff:
            yield root
