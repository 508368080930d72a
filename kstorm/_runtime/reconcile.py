"""Reconcile the Spark checkpoint with what the sinks committed, before a topology starts.

Exactly-once contract, step 3 (``ARCHITECTURE.md``): a sink stores each batch's source end
offsets and txid in the same atomic step as its values. On start:

1. Read the checkpoint: its last committed batch id ``B`` and the txid base ``b`` (txid =
   ``b + batch id``; kept under ``<checkpoint>/kstorm/txid_base``).
2. Read every stateful sink's record: its last txid ``T`` and offsets.
3. Decide:
   - no sink record, or every sink at or ahead of the checkpoint (``T >= b + B``): start
     from the checkpoint as usual. A sink one batch ahead (killed between its commit and
     Spark's) skips the replayed batch by its txid.
   - no checkpoint (deleted or never written) but a sink record: resume from the sink —
     the spouts start at the sink's offsets, windowed aggregates from the state stored
     with them, and txids continue at ``T + 1`` so no batch id is ever reused.
   - a sink behind the checkpoint (``T < b + B``, e.g. Redis lost writes): the checkpoint
     is moved aside and the topology resumes from the sink that is furthest behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kstorm.sink import BaseSink

log = logging.getLogger("kstorm.reconcile")


@dataclass
class Resume:
    """Where a topology starts."""

    txid_base: int = 0
    from_sink: str | None = None  # sink whose offsets the spouts start from
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    state: Mapping[str, bytes] = field(default_factory=dict)
    reset_checkpoint: bool = False


def last_committed_batch(checkpoint: Path) -> int | None:
    """Highest batch id in Spark's commit log, or None."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids) if ids else None


def read_txid_base(checkpoint: Path) -> int:
    """The checkpoint's txid base (0 for a checkpoint kstorm never rebased)."""
    path = checkpoint / "kstorm" / "txid_base"
    return int(path.read_text()) if path.exists() else 0


def decide(checkpoint: Path, sinks: Mapping[str, BaseSink]) -> Resume:
    """Step 1-3 of the module docstring (reads only)."""
    last = last_committed_batch(checkpoint)
    base = read_txid_base(checkpoint)
    records = {sid: sink.committed_offsets() for sid, sink in sinks.items()
               if sink.stores_state}
    known = {sid: rec for sid, rec in records.items() if rec is not None}
    if last is None:
        if not known:
            return Resume(txid_base=base)
        sid, (txid, offsets) = min(known.items(), key=lambda kv: kv[1][0])
        return Resume(txid + 1, sid, offsets, sinks[sid].committed_state(),
                      reset_checkpoint=checkpoint.exists())
    behind = {sid: rec for sid, rec in records.items() if rec is None or rec[0] < base + last}
    if not behind:
        return Resume(txid_base=base)
    if any(rec is None for rec in behind.values()):
        log.warning("sink(s) %s have no record but the checkpoint has committed batch %s; "
                    "starting over from the spouts' starting offsets",
                    sorted(s for s, r in behind.items() if r is None), last)
        return Resume(base + last + 1, reset_checkpoint=True)
    sid, (txid, offsets) = min(behind.items(), key=lambda kv: kv[1][0])  # type: ignore[index]
    log.warning("sink %r is at txid %s, behind the checkpoint (txid %s): resuming from the "
                "sink's offsets", sid, txid, base + last)
    return Resume(txid + 1, sid, offsets, sinks[sid].committed_state(), reset_checkpoint=True)


def apply(checkpoint: Path, resume: Resume) -> None:
    """Move a stale checkpoint aside and record the txid base (writes files)."""
    if resume.reset_checkpoint and checkpoint.exists():
        stale = checkpoint.with_name(f"{checkpoint.name}.stale-{int(time.time())}")
        checkpoint.rename(stale)
        log.warning("checkpoint moved aside to %s", stale)
    (checkpoint / "kstorm").mkdir(parents=True, exist_ok=True)
    (checkpoint / "kstorm" / "txid_base").write_text(str(resume.txid_base))
