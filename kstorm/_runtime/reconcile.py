"""Reconcile the Spark checkpoint with what the sinks committed, before a topology starts.

Exactly-once contract, step 3 (``ARCHITECTURE.md``): a sink that records offsets stores each
batch's source end offsets and txid in the same atomic step as its values. On start, the
runner reads the checkpoint (its last committed batch id ``B``, its txid base ``b``: txid =
``b + batch id``) and every recording sink's record (its last txid ``T`` and offsets), and
:func:`decide` chooses, from those values only:

- no sink record, or every sink at or ahead of the checkpoint (``T >= b + B``): start from
  the checkpoint as usual. A sink one batch ahead (killed between its commit and Spark's)
  skips the replayed batch by its txid.
- no checkpoint (deleted or never written) but a sink record: resume from the sink -- the
  spouts start at the sink's offsets, windowed state from the state stored with them, and
  txids continue at ``T + 1`` so no txid is ever reused.
- a sink exactly one batch behind (``T = b + B - 1``, or no record and ``B = 0``) in a
  topology whose sinks commit after Spark's commit log (``kstorm.commit.overlap``,
  ``kstorm/_spark/overlap.py``): batch ``B`` runs again from its logged offsets with its
  txid; the sinks that have it skip it.
- a sink behind the checkpoint (``T < b + B``, e.g. Redis lost writes): the checkpoint is
  moved aside and the topology resumes from the sink that is furthest behind.
- a sink with no record while the checkpoint has committed batches: start over from the
  spouts' starting offsets with txids past the checkpoint's (the sink was emptied).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kstorm.sink import CommitRecord

log = logging.getLogger("kstorm.reconcile")


FIRST_TXID = 1  # a new transactional topology's first txid (Storm: "the first batch has id 1")


@dataclass(frozen=True)
class Resume:
    """Where a topology starts."""

    txid_base: int = 0
    from_sink: str | None = None  # sink whose offsets (and state) the topology resumes from
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    reset_checkpoint: bool = False  # move the existing checkpoint aside first
    replay_last: int | None = None  # run this committed batch again (its sinks lag one batch)


def decide(last_batch: int | None, txid_base: int, checkpoint_exists: bool,
           records: Mapping[str, CommitRecord | None], *, replayable: bool = False) -> Resume:
    """Where to start (module docstring), from the checkpoint's facts and the sinks' records.

    Args:
        last_batch: the checkpoint's last committed batch id (None: nothing committed).
        txid_base: the checkpoint's txid base.
        checkpoint_exists: whether the checkpoint directory exists at all.
        records: each recording sink's last record (None: it has none).
        replayable: the checkpoint's last batch may be run again from its logged offsets
            (a topology whose sinks commit after Spark's commit log, all state with them).

    Example:
        >>> r = decide(None, 0, False, {"store": CommitRecord(7, {"t": {0: 100}})})
        >>> r.txid_base, r.from_sink, r.offsets, r.reset_checkpoint
        (8, 'store', {'t': {0: 100}}, False)
    """
    known = {sid: rec for sid, rec in records.items() if rec is not None}
    if last_batch is None:
        if not known:
            return Resume(txid_base=txid_base)
        sid, record = min(known.items(), key=lambda kv: kv[1].txid)
        return Resume(record.txid + 1, sid, record.offsets, reset_checkpoint=checkpoint_exists)
    at = txid_base + last_batch
    behind = {sid: rec for sid, rec in records.items() if rec is None or rec.txid < at}
    if not behind:
        return Resume(txid_base=txid_base)
    if replayable and all(rec.txid == at - 1 if rec is not None else last_batch == 0
                          for rec in behind.values()):
        log.info("sink(s) %s do not have the checkpoint's last batch %s (txid %s), which "
                 "Spark recorded before they committed it: running it again from its logged "
                 "offsets", sorted(behind), last_batch, at)
        return Resume(txid_base, replay_last=last_batch)
    empty = sorted(sid for sid, rec in behind.items() if rec is None)
    if empty:
        log.warning("sink(s) %s have no record but the checkpoint has committed batch %s; "
                    "starting over from the spouts' starting offsets", empty, last_batch)
        return Resume(at + 1, reset_checkpoint=True)
    sid, record = min(known.items(), key=lambda kv: kv[1].txid)
    log.warning("sink %r is at txid %s, behind the checkpoint (txid %s): resuming from the "
                "sink's offsets", sid, record.txid, at)
    return Resume(record.txid + 1, sid, record.offsets, reset_checkpoint=True)


def numbered_from_one(resume: Resume, *, transactional: bool, last_batch: int | None,
                      base_recorded: bool) -> Resume:
    """``resume`` with a new transactional topology's txids starting at :data:`FIRST_TXID`.

    Storm's *Transactional topologies*: "the first batch has id 1, the second has id 2".
    Only a topology with nothing committed anywhere starts there: a checkpoint that recorded
    its base keeps it, a checkpoint from before the base was recorded (committed batches, no
    ``txid_base`` file) keeps base 0, and a start from a sink's record continues after it.
    Plain topologies keep txid = Spark batch id.

    Example:
        >>> numbered_from_one(Resume(), transactional=True, last_batch=None,
        ...                   base_recorded=False).txid_base
        1
        >>> numbered_from_one(Resume(), transactional=True, last_batch=4,
        ...                   base_recorded=False).txid_base
        0
    """
    if transactional and last_batch is None and resume.from_sink is None and not base_recorded:
        return replace(resume, txid_base=FIRST_TXID)
    return resume
