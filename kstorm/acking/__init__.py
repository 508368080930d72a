"""Guaranteed message processing: Storm's anchoring, XOR ackers and spout bookkeeping.

Pure logic (no Spark, no I/O, no clock): the Spark layer moves the values
between tasks. How the pieces talk:

* spout ``emit_root`` -> :class:`AckerMessage` ``init`` to ``acker_for(root_id, n)``;
  :meth:`SpoutTracker.emit` records the pending message.
* bolt :class:`AnchorTracker` ``emit``/``ack``/``fail`` -> :class:`MessageId` on new
  tuples, :class:`AckerMessage` s to the ackers of the input tuple's roots.
* :class:`AckerLedger` (one per acker partition, or :func:`combine_messages` +
  :meth:`AckerEntry.merge` + :func:`settle` as a keyed reduce) -> :class:`AckerEvent`
  to the spout task.
* :meth:`SpoutTracker.on_event` -> :class:`SpoutDecision` (ack / retry / dead letter),
  :func:`dispatch` runs the spout's ``ack``/``fail``; ``committable_offsets()``
  gives the Kafka offsets the group may commit.

The names exported here are the user's: Storm's anchoring, the XOR ledger (seed 003's
walk-through can be checked with them), spout bookkeeping and retry policies. How the Spark
runtime uses them (at-least-once): each stage task folds its messages into an
``acking.outbox.AckerOutbox`` (combined per root) and sends one payload per acker task; the
acker operator runs ``acking.acker.run_acker_batch`` over its payloads against its
state-store entries; the driver's :class:`SpoutTracker` per spout turns the events into
decisions and an ``acking.replay.SpoutBook``, from which the spout's source plans retries
into the next batch.
"""

from kstorm.acking.anchoring import AnchorTracker, RootEmit, TrackedTuple, emit_root
from kstorm.acking.decisions import ReliableSpout, SpoutAction, SpoutDecision, dispatch
from kstorm.acking.ids import MAX_ID, MIN_ID, IdSource, TupleIdGenerator, acker_for, seed_for
from kstorm.acking.ledger import AckerEntry, AckerLedger, combine_messages, settle
from kstorm.acking.messages import AckerEvent, AckerMessage, MessageId, Outcome
from kstorm.acking.offsets import KafkaMessageId, OffsetTracker
from kstorm.acking.retry import RetryPolicy
from kstorm.acking.spout_tracker import DEFAULT_MESSAGE_TIMEOUT_SECS, SpoutTracker

__all__ = [
    "DEFAULT_MESSAGE_TIMEOUT_SECS",
    "MAX_ID",
    "MIN_ID",
    "AckerEntry",
    "AckerEvent",
    "AckerLedger",
    "AckerMessage",
    "AnchorTracker",
    "IdSource",
    "KafkaMessageId",
    "MessageId",
    "OffsetTracker",
    "Outcome",
    "ReliableSpout",
    "RetryPolicy",
    "RootEmit",
    "SpoutAction",
    "SpoutDecision",
    "SpoutTracker",
    "TrackedTuple",
    "TupleIdGenerator",
    "acker_for",
    "combine_messages",
    "dispatch",
    "emit_root",
    "seed_for",
    "settle",
]
