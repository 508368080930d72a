"""The spout side of at-least-once, run by the driver in each batch's commit phase.

kstorm's spouts are read by Spark (their batches are fixed in the offset log), so the
*spout task* of Storm's reliability protocol is the driver: it keeps, per tracked spout, a
:class:`SpoutTracker` of the trees still pending after their batch and of the failed
records waiting for a retry. For batch ``b``:

1. Load the trackers as they were after the batch before ``b`` (a replay of ``b`` starts
   from the same state), and read ``b``'s marks from its end offsets: the time it was
   planned at and the retries it re-emits.
2. Register what started in ``b`` and is not over: the retries, the trees the ackers report
   pending, the failed trees of new records (in offset order per partition).
3. Apply the ackers' events: ``ACKED`` -> ``ack(msg_id)``; ``FAILED`` -> ``fail(msg_id)``
   and a retry after the spout's backoff, or, after its last retry, a dead letter whose
   headers name the record's topic, partition and offset.
4. Time out the trees pending ``topology.message.timeout.secs`` (-> ``fail`` as in 3).
5. After the sinks committed: persist the trackers under the batch id, and write each
   spout's :class:`SpoutBook` (committable offsets = lowest un-acked offset per partition,
   waiting retries, next timeout) for its source to plan the next batch with.

A list spout (``ListSpout``) is a Kafka spout here: its row ``i`` of batch ``b`` is offset
``i`` of partition ``b`` of the topic :data:`~kstorm.acking.offsets.LIST_TOPIC`, so the same
tracker and book plan its retries; its ``ack``/``fail`` get the row's ``"b:i"``, its dead
letters carry the row's values, and it has no committable offsets (it starts from its first
batch whatever the sinks stored).

A free-form spout (``next_tuple``) is tracked the same way up to step 3, with an
:class:`~kstorm.acking.emits.EmitTracker` instead: its tuples are not replayed by kstorm but
by the spout, so the trees that ended (acked, failed, timed out) become notices, written in
step 5 under the batch id for the spout's own process to deliver as ``ack``/``fail``
(``kstorm/_runtime/spout_notices.py``); no retry, no dead letter, no committable offsets.

Times are the batch's planned time, recorded in the offset log, so every decision is the
same when a batch is replayed.
"""

from __future__ import annotations

import copy
import json
import logging
import pickle
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from kstorm._runtime.batch import BatchOffsets
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.plan import AckingPlan, source_kind
from kstorm._runtime.spout_notices import NoticeBook
from kstorm.acking.decisions import SpoutAction, SpoutDecision
from kstorm.acking.emits import EmitTracker, Notice, emits_batch
from kstorm.acking.ids import root_id_for
from kstorm.acking.messages import Outcome
from kstorm.acking.offsets import LIST_TOPIC, KafkaMessageId, spout_message_id
from kstorm.acking.replay import SpoutBook, committable_offsets, read_marks
from kstorm.acking.retry import RetryPolicy
from kstorm.acking.spout_tracker import SpoutTracker
from kstorm.spout import BaseRichSpout
from kstorm.topology import StormTopology

log = logging.getLogger("kstorm.acking")
TRACKERS = ".trackers.pkl"  # <acking dir>/<batch id>.trackers.pkl: the trackers after it


@dataclass
class BatchOutcome:
    """What the reliability step of one batch produced."""

    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    gauges: dict[str, int] = field(default_factory=dict)
    trackers: dict[str, SpoutTracker] = field(default_factory=dict)
    ends: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    emits: dict[str, EmitTracker] = field(default_factory=dict)  # free-form spouts
    notices: dict[str, list[Notice]] = field(default_factory=dict)


class SpoutReliability:
    """Driver half of at-least-once for a topology's tracked spouts."""

    def __init__(self, topology: StormTopology, acking: AckingPlan,
                 layout: CheckpointLayout) -> None:
        self.acking = acking
        self.layout = layout
        self.dir = layout.acking_dir
        self._acker_entries: dict[int, int] = {}
        self.spouts: dict[str, Any] = {}
        self.retry: dict[str, RetryPolicy] = {}
        self.free = {s for s in acking.spout_tasks
                     if source_kind(topology.components[s].component) == "next_tuple"}
        self.lists = {s for s in acking.spout_tasks
                      if source_kind(topology.components[s].component) == "list"}
        for spout_id in acking.spout_tasks:
            declared = topology.components[spout_id].component
            if spout_id in self.free:
                continue  # its own instance acks / fails (and replays), in its process
            self.retry[spout_id] = declared.retry or RetryPolicy()
            self.spouts[spout_id] = copy.deepcopy(declared)

    # -- Step 1 ---------------------------------------------------------------------------

    def _load(self, batch_id: int) -> tuple[dict[str, SpoutTracker], dict[str, EmitTracker]]:
        previous = self.layout.latest_before(self.dir, TRACKERS, batch_id)
        data = pickle.loads(previous.read_bytes()) if previous is not None else {}
        trackers = {}
        emits = {}
        for spout_id in self.free:
            snap = data.get(spout_id)
            emits[spout_id] = (EmitTracker.restore(snap, timeout_ms=self.acking.timeout_ms)
                               if snap is not None else
                               EmitTracker(timeout_ms=self.acking.timeout_ms))
        for spout_id in self.acking.spout_tasks:
            if spout_id in self.free:
                continue
            settings = {"timeout_ms": self.acking.timeout_ms, "retry": self.retry[spout_id]}
            snap = data.get(spout_id)
            trackers[spout_id] = (SpoutTracker.restore(snap, **settings) if snap is not None
                                  else SpoutTracker(**settings))
        return trackers, emits

    def commit(self, offsets: BatchOffsets, events: list[tuple[int, bytes]]) -> BatchOutcome:
        """Steps 1-4 for the batch ``offsets`` describes.

        Args:
            offsets: the batch's end offsets per spout (marks included) and Spark's batch
                timestamp (the planned time when a batch has no marks).
            events: ``(acker task, payload)`` rows the ackers sent.
        """
        batch_id = offsets.batch_id
        trackers, emits = self._load(batch_id)
        out = BatchOutcome(trackers=trackers, emits=emits)
        payloads = []
        expired = 0
        for acker, raw in events:
            payload = pickle.loads(raw)
            payloads.append(payload)
            self._acker_entries[acker] = payload["entries"]
            expired += payload["expired"]
        for spout_id in trackers:
            out.ends[spout_id] = {(t, p): o for t, parts in offsets.ends_of(spout_id).items()
                                  for p, o in parts.items()}

        def marks(spout_id: str) -> tuple[int, list[tuple[str, int, int, int]]]:
            now, retries = read_marks(offsets.marks_of(spout_id))
            return (offsets.timestamp_ms if now is None else now), retries

        settle_trees(self.acking.spout_tasks, payloads, out, marks,
                     lambda spout_id, decisions: self._apply(spout_id, decisions, out))
        out.gauges["__acker.pending"] = sum(self._acker_entries.values())
        if expired:
            out.counters["__acker.expired"] += expired
        self._log(batch_id, out)
        return out

    def _apply(self, spout_id: str, decisions: list[SpoutDecision], out: BatchOutcome) -> None:
        apply_decisions(spout_id, self.spouts[spout_id], self.retry[spout_id].max_retries,
                        decisions, out)

    def _log(self, batch_id: int, out: BatchOutcome) -> None:
        for spout_id in self.acking.spout_tasks:
            counts = {k.rpartition(".")[2]: v for k, v in out.counters.items()
                      if k.startswith(f"{spout_id}.") and v}
            unusual = {k: v for k, v in counts.items() if k != "acked"}
            if unusual:
                log.info("batch %s: spout %r %s; un-acked %d", batch_id, spout_id,
                         ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                         out.gauges[f"{spout_id}.pending"])

    def resume_state(self, batch_id: int, out: BatchOutcome) -> bytes:
        """Where each tracked spout must restart if the checkpoint is lost, for the sinks.

        Exactly-once sinks store each batch's end offsets; at least once, records below
        them may still be un-acked (pending, or waiting for a retry). Stored with the sinks'
        offsets, this lets a topology that lost its checkpoint start each partition at its
        lowest un-acked offset (``{spout: {topic: {partition: offset}}}`` as JSON), so a
        waiting retry is re-read instead of forgotten.
        """
        marks: dict[str, dict[str, dict[str, int]]] = {}
        for spout_id, tracker in out.trackers.items():
            if spout_id in self.lists:
                continue  # a list spout starts from its first batch again
            book = book_of(batch_id, tracker, out.ends[spout_id])
            per_topic: dict[str, dict[str, int]] = {}
            for (topic, part), offset in book.committable.items():
                per_topic.setdefault(topic, {})[str(part)] = int(offset)
            marks[spout_id] = per_topic
        return json.dumps(marks, sort_keys=True).encode()

    # -- Step 5 ---------------------------------------------------------------------------

    def persist(self, batch_id: int, out: BatchOutcome) -> None:
        """Save the trackers after ``batch_id`` and write each spout's book (atomically)."""
        snapshot: dict[str, Any] = {s: t.snapshot() for s, t in out.trackers.items()}
        snapshot.update({s: t.snapshot() for s, t in out.emits.items()})
        self.layout.write(self.dir / f"{batch_id}{TRACKERS}", pickle.dumps(snapshot))
        for spout_id, emitted in out.emits.items():
            NoticeBook(self.layout.notices_dir(spout_id)).write(
                batch_id, out.notices.get(spout_id, []), emitted.next_timeout_at(),
                emitted.pending_count)
        for spout_id, tracker in out.trackers.items():
            self.layout.write(self.layout.book_path(spout_id),
                              book_of(batch_id, tracker, out.ends[spout_id]).to_json().encode())
        self.layout.retain(self.dir, TRACKERS, batch_id)


def settle_trees(spout_tasks: dict[str, int], payloads: list[dict[str, Any]],
                 out: BatchOutcome, marks: Any, apply: Any) -> None:
    """Steps 2-4 for every tracked spout, from the ackers' payloads of one batch.

    Pure (both orchestrations run it: the commit phase, the test driver): ``out`` holds the
    spouts' trackers (``out.trackers``, ``out.emits`` for free-form spouts) and takes the
    counters, gauges and notices; ``marks(spout)`` is the batch's ``(time, retries)`` for
    the spout, ``apply(spout, decisions)`` the spout's side of its decisions
    (:func:`apply_decisions`).
    """
    by_task: dict[int, list[tuple[str, int, int, Any]]] = defaultdict(list)
    pending: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
    acked: Counter[int] = Counter()
    for payload in payloads:
        for event in payload["events"]:
            by_task[event[2]].append(event)
        for root, task, msg in payload["pending"]:
            pending[task].append((root, task, msg))
        acked.update(payload["acked"])
    for spout_id, task in spout_tasks.items():
        now, retries = marks(spout_id)
        if spout_id in out.emits:  # a free-form spout: notices for its own instance
            emitted = out.emits[spout_id]
            out.notices[spout_id] = emits_batch(spout_id, emitted, now, pending[task],
                                                by_task[task], out.counters)
            out.counters[f"{spout_id}.acked"] += acked[task]
            out.gauges[f"{spout_id}.pending"] = emitted.pending_count
            continue
        tracker = out.trackers[spout_id]
        decisions = spout_batch(spout_id, task, tracker, now, retries, pending[task],
                                by_task[task], out.counters)
        out.counters[f"{spout_id}.acked"] += acked[task]
        apply(spout_id, decisions)
        out.gauges[f"{spout_id}.pending"] = tracker.pending_count + tracker.waiting_count


def spout_batch(spout_id: str, task: int, tracker: SpoutTracker, now: int,
                retries: list[tuple[str, int, int, int]], pending: list[tuple[int, int, Any]],
                events: list[tuple[str, int, int, Any]], counters: Counter[str]
                ) -> list[SpoutDecision]:
    """Steps 2-4 for one tracked spout: register, settle the ended trees, time out.

    Pure (the test driver runs it too): ``retries`` are the ``(topic, partition, offset,
    attempt)`` the batch re-emitted, ``pending`` the trees the ackers left open, ``events``
    the trees that ended; returns the spout's decisions (ack, retry, dead letter).
    """
    # Step 2: register, in offset order per partition (the offset tracker needs it).
    started = [(KafkaMessageId(t, p, o), root_id_for(task, t, p, o, a))
               for t, p, o, a in retries]
    counters[f"{spout_id}.replayed"] += len(retries)
    started += [(KafkaMessageId(*msg[:3]), root) for root, _, msg in pending]
    started += [(KafkaMessageId(*msg[:3]), root) for outcome, root, _, msg in events
                if outcome == Outcome.FAILED.value and msg is not None]
    for msg_id, root in sorted(started):
        if not tracker.is_in_flight(msg_id) and not tracker.is_pending_root(root):
            tracker.emit(msg_id, root, now)
    # Step 3: the trees that ended.
    decisions = []
    for outcome, root, _, msg in events:
        if outcome == Outcome.ACKED.value:
            decision = tracker.ack(root)
            if decision is None and msg is not None:  # a first attempt, never pending
                decision = SpoutDecision(KafkaMessageId(*msg[:3]), SpoutAction.ACK,
                                         Outcome.ACKED, 0)
        else:
            decision = tracker.fail(root, now)
        if decision is not None:
            decisions.append(decision)
    # Step 4: time-outs.
    decisions += tracker.expire(now)
    return decisions


def apply_decisions(spout_id: str, spout: Any, max_retries: int | None,
                    decisions: list[SpoutDecision], out: BatchOutcome,
                    fetch: Any = None, row_of: Any = None) -> None:
    """The spout's side of ``decisions``.

    Its ``ack``/``fail`` (when it overrides them), the counters, and a dead letter per
    message out of retries (``fetch`` reads a record's raw value back, default: from Kafka;
    ``row_of`` a list row's values, default: from the spout's batches).
    """
    calls_ack = type(spout).ack is not BaseRichSpout.ack
    calls_fail = type(spout).fail is not BaseRichSpout.fail
    dead: list[SpoutDecision] = []
    for d in decisions:
        if d.action is SpoutAction.ACK:
            out.counters[f"{spout_id}.acked"] += 1
            if calls_ack:
                spout.ack(spout_message_id(d.msg_id))
            continue
        out.counters[f"{spout_id}.{d.outcome.value}"] += 1
        if calls_fail:
            spout.fail(spout_message_id(d.msg_id))
        if d.action is SpoutAction.DEAD_LETTER:
            dead.append(d)
    if dead:
        out.counters[f"{spout_id}.dead_lettered"] += len(dead)
        records = [d.msg_id for d in dead if d.msg_id.topic != LIST_TOPIC]
        raw = (fetch or _fetch_values)(spout, records) if records else {}
        for d in dead:
            why = "timed out" if d.outcome is Outcome.TIMED_OUT else "failed"
            error = "TupleTimedOut" if d.outcome is Outcome.TIMED_OUT else "TupleFailed"
            t, p, o = d.msg_id
            if t == LIST_TOPIC:  # a list row: its values, as a given-up batch's show them
                what = f"spout tuple {spout_message_id(d.msg_id)!r}"
                found = row_of(d.msg_id) if row_of is not None else spout.batches[p][o]
                row = dict(zip(spout.fields, found, strict=True))
                values, t, p, o = repr(row)[:10_000], None, None, None
            else:
                what, values = f"spout tuple {t}[{p}]@{o}", None
            out.dead_letters.append({
                "component": spout_id, "stream": "default", "error_type": error,
                "message": (f"{what} {why} on its last attempt ({d.num_fails} failures, "
                            f"max_retries={max_retries})"),
                "values": values, "topic": t, "partition": p, "offset": o,
                "raw": raw.get(d.msg_id)})


def lowest_unacked(offsets: Any, marks: bytes) -> dict[str, dict[int, int]]:
    """``offsets`` ({topic: {partition: end}}) lowered to the stored lowest un-acked offsets.

    Example:
        >>> lowest_unacked({"t": {0: 10, 1: 4}}, b'{"s": {"t": {"0": 6}}}')
        {'t': {0: 6, 1: 4}}
    """
    out = {t: dict(parts) for t, parts in offsets.items()}
    for per_topic in json.loads(marks).values():
        for topic, parts in per_topic.items():
            for part, low in parts.items():
                mine = out.setdefault(topic, {})
                mine[int(part)] = min(int(low), mine.get(int(part), int(low)))
    return out


def book_of(batch_id: int, tracker: SpoutTracker,
            ends: dict[tuple[str, int], int]) -> SpoutBook:
    """The :class:`SpoutBook` of a spout after ``batch_id``."""
    retries = [(m.topic, m.partition, m.offset, tracker.num_fails(m), due)
               for due, m in tracker.waiting()]
    committable = committable_offsets(ends, tracker.offsets.lowest_outstanding())
    return SpoutBook(batch_id, committable, retries, tracker.next_timeout_at(),
                     tracker.pending_count + tracker.waiting_count)


def _fetch_values(spout: Any, msg_ids: list[KafkaMessageId]
                  ) -> dict[KafkaMessageId, bytes | None]:
    """The raw values of the records ``msg_ids`` (for their dead letters); best effort."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    found: dict[KafkaMessageId, bytes | None] = {}
    consumer = Consumer(spout.client_config("consumer"))
    try:
        for msg_id in msg_ids:
            consumer.assign([KafkaTopicPartition(msg_id.topic, msg_id.partition,
                                                 msg_id.offset)])
            for _ in range(50):
                got = consumer.consume(1, 0.2)
                if got and got[0].error() is None and got[0].offset() == msg_id.offset:
                    found[msg_id] = got[0].value()
                    break
            else:
                log.warning("dead letter of %s: could not read the record back", msg_id)
    finally:
        consumer.close()
    return found
