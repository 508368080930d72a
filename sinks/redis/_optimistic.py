"""The atomic commit for a Python merge: an optimistic (compare-and-set) transaction.

1. If the record's txid is at or above this batch's, stop: the batch is in Redis (opaque
   mode: unless it is this batch's, whose replay is applied again from the prev values).
2. Read the values, txids and prevs of the batch's keys (one read-only script).
3. Apply the update rules with the Python merge, on the driver. A failing merge
   stops here, before anything is written.
4. One write script, atomic in Redis: if the txid got recorded meanwhile, stop;
   if any key's value, txid or prev differs from what step 2 read, write nothing
   and start again from step 1; else write the values, txids, prevs and the batch
   record.

This is WATCH/MULTI's optimistic concurrency checked inside the script instead:
Redis 7.0's WATCH costs O(n) per watched key (half a second for 10,000 keys),
the compare is O(1). A retried write after a lost reply finds its txid recorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kstorm.errors import SinkError

from ._batch import Entry
from ._codec import ValueCodec, decode, encode
from ._keys import TXID_FIELD, Namespace
from ._lua import READ_SCRIPT, WRITE_SCRIPT
from ._rules import ABSENT, Mode, Stored, replays, update
from .merge import PythonMerge

if TYPE_CHECKING:
    import redis

MAX_ATTEMPTS = 16
_PER_ENTRY = 8  # items per entry in the write script's JSON array


def commit_optimistic(client: redis.Redis, ns: Namespace, *, mode: Mode, txid: int,
                      entries: Sequence[Entry], offsets: Sequence[str], merge: PythonMerge,
                      codec: ValueCodec) -> tuple[bool, int, int]:
    """Apply ``entries`` and record the batch atomically; ``(applied, written, skipped)``."""
    pairs = [part for e in entries for part in (e.key, e.field)]
    for _attempt in range(MAX_ATTEMPTS):
        # Step 1
        recorded = client.hget(ns.record, TXID_FIELD)
        if recorded is not None and not replays(mode, int(recorded), txid):
            return False, 0, 0
        # Step 2
        stored = json.loads(client.eval(READ_SCRIPT, 0, ns.prefix, *pairs)) if entries else []
        # Step 3
        plan = _compute(mode, txid, entries, stored, merge, codec)
        # Step 4
        payload = json.dumps(plan, separators=(",", ":"), ensure_ascii=False)
        outcome = client.eval(WRITE_SCRIPT, 1, ns.record, ns.prefix, str(txid),
                              len(offsets) // 2, *offsets, payload, mode)
        if outcome == b"committed":
            return False, 0, 0
        if outcome == b"applied":
            written = sum(1 for at in range(5, len(plan), _PER_ENTRY) if plan[at] is not False)
            return True, written, len(entries) - written
    msg = f"RedisSink {ns.prefix}: txid {txid} could not commit in {MAX_ATTEMPTS} attempts; " \
          "its keys kept changing under another writer"
    raise SinkError(msg)


def _compute(mode: Mode, txid: int, entries: Sequence[Entry], stored: Sequence[Any],
             merge: PythonMerge, codec: ValueCodec) -> list[Any]:
    """The write script's entries, ``_PER_ENTRY`` items each (``false`` = absent)."""
    out: list[Any] = []
    for n, entry in enumerate(entries):
        raw_value, raw_txid, raw_prev = stored[3 * n:3 * n + 3]
        now = Stored(ABSENT if raw_value is False else decode(raw_value, codec),
                     None if raw_txid is False else int(raw_txid),
                     ABSENT if raw_prev is False else decode(raw_prev, codec))
        where = f"RedisSink {entry.where()}"
        try:
            new = update(mode, txid, now, entry.values, merge.fn)
        except Exception as exc:
            msg = f"{where}: merge {merge.name} failed on txid {txid}: {exc!r}"
            raise SinkError(msg) from exc
        out += [entry.key, entry.field, raw_value, raw_txid, raw_prev]
        if new is None:
            out += [False, "keep", False]
            continue
        # prev is the stored text the new value was computed from, kept byte for byte.
        base = raw_prev if now.txid == txid else raw_value
        action = "keep"
        if mode == "opaque":
            action = "set" if base is not False else ("drop" if raw_prev is not False else "keep")
        out += [encode(new.value, codec, where), action, base]
    return out


__all__ = ["MAX_ATTEMPTS", "commit_optimistic"]
