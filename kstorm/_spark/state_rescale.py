"""Rescaling a stateful bolt whose state is in Spark's state store (the ``spark`` provider).

A stateful bolt's state is one TWS map per task, kept under the task's grouping key
(``compiler.recorded_task_keys``); Spark gives a query's state to the tasks of its first run
only, and seeds a TWS operator (``initialState``) only in the first batch of a checkpoint.
So a start whose parallelism differs from the one the checkpoint recorded moves the state
into a new checkpoint, on the driver, before the first batch:

1. Check, changing nothing: every stateful bolt whose parallelism changed is fed only by
   fields groupings from bolts (``kstorm/state/rescale.py``); the query has no other Spark
   state (windowed bolts, ackers); every sink that records offsets is at one txid ``T``,
   the txid of the checkpoint's last committed batch (or of the next one, which the sinks
   committed before Spark's commit log: that batch is completed in the commit log, as the
   sinks have it).
2. Read every stateful bolt's map at that batch (Spark's ``statestore`` reader) and send
   each key to task ``key group % new parallelism`` (:func:`kstorm.state.rescale.redistribute`;
   a key without a key group, or with several, refuses the start).
3. Write ``<checkpoint>.rescale`` (where the old checkpoint goes, ``T``, the state read),
   then rename the checkpoint to ``<checkpoint>.rescaled-at-<T>``.
4. The topology resumes from its sinks' record at ``T`` in a new checkpoint, whose first
   batch seeds each new task with its share of the state (``initialState``).

A crash before step 3's rename leaves the old checkpoint (the record, pointing at nothing,
is dropped at the next start). After it, until the new checkpoint commits its first batch,
the next start finds the record and moves the state read again, to the
parallelism it starts with; if the sinks committed that first batch but Spark did not, its
commit is completed and the new checkpoint is the one rescaled (or resumed).
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstorm._ids import ACKER_COMPONENT
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._spark.offset_log import complete_batch, last_committed_batch
from kstorm._spark.stage import task_of_key
from kstorm.errors import StateError
from kstorm.state.rescale import TAG, redistribute, task_fields, why_not_keyed
from kstorm.topology import StormTopology

log = logging.getLogger("kstorm.state")

#: The TWS map variable of a stateful stage (``stage.stateful_processor``).
STATE_VAR = "kv"


@dataclass(frozen=True)
class Rescaling:
    """A rescaling start: the state each stateful bolt's new tasks begin with."""

    initial_state: dict[str, list[dict[bytes, bytes]]]  # bolt -> per new task: key -> value
    txid: int  # the sinks' txid the state is at; the new checkpoint resumes after it
    moved: dict[str, tuple[int, int]]  # bolt -> (old tasks, new tasks), rescaled bolts only


def record_path(checkpoint: Path) -> Path:
    """``<checkpoint>.rescale``: a rescaling in progress (module doc, step 3).

    A pickle of where the old checkpoint went, its batch and txid base, the sinks' txid, its
    recorded task keys, and every stateful bolt's map entries at that batch: Spark's state
    reader cannot read a checkpoint that was renamed (its state schema files are recorded
    under the old path), so a start that moves the state again reads them from here.
    """
    return checkpoint.with_name(f"{checkpoint.name}.rescale")


def _read_record(checkpoint: Path) -> dict[str, Any] | None:
    try:
        found = pickle.loads(record_path(checkpoint).read_bytes())  # noqa: S301 - kstorm's own
    except FileNotFoundError:
        return None
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        msg = f"{record_path(checkpoint)} cannot be read ({exc})"
        raise StateError(msg, hint="restore it, or remove it if the checkpoint "
                         f"{checkpoint} has committed batches") from exc
    return found


def _drop_record(checkpoint: Path) -> None:
    record_path(checkpoint).unlink(missing_ok=True)


def rescale(name: str, checkpoint: Path, topology: StormTopology, plan: Any,
            guarantee_tracked: bool, records: Mapping[str, Any],
            session: Callable[[], Any], follow: Callable[[], None]) -> Rescaling | None:
    """Move the stateful bolts' state to their new parallelism (module doc); None: no change.

    Args:
        name: the topology's name, for messages.
        checkpoint: its checkpoint directory (locked).
        topology: the topology as it starts now.
        plan: its stages.
        guarantee_tracked: at least once with ackers (their trees are state too).
        records: each offset-recording sink's last record (None: none).
        session: the SparkSession to read the state with.
        follow: lock the checkpoint directory again after it was renamed.

    Raises:
        StateError: the state cannot move exactly; nothing was changed.
    """
    heads = [s.head for s in plan.stages if s.stateful]
    if not heads:
        return None
    layout = CheckpointLayout(checkpoint)
    record = _read_record(checkpoint)
    last = last_committed_batch(checkpoint)
    if record is not None and (last is not None or not Path(record["source"]).exists()):
        _drop_record(checkpoint)  # done (the new checkpoint committed), or never begun
        record = None
    if record is None:
        keys = layout.task_keys()
        if last is None or keys is None or not _changed(topology, heads, keys):
            return None
        source, batch, base = checkpoint, last, layout.txid_base()
    else:
        source, batch, base = Path(record["source"]), int(record["batch"]), int(record["base"])
        keys = record["keys"]
    txid = _sinks_txid(name, records, _changes(topology, heads, keys))
    if record is not None and txid > int(record["txid"]) + 1:
        _drop_record(checkpoint)  # the sinks went on without this checkpoint: not a move
        return None
    entries = record["entries"] if record is not None else None
    if record is not None and txid == int(record["txid"]) + 1:
        # the sinks committed the new checkpoint's first batch, Spark did not: complete it
        # (as the sinks have it), and the new checkpoint is what a change moves from
        _complete(checkpoint, 0, source, batch)
        _drop_record(checkpoint)
        record, source, batch, base = None, checkpoint, 0, layout.txid_base()
        entries = None
        keys = layout.task_keys() or {}
        if not _changed(topology, heads, keys):
            return None
    # Step 1
    _check(name, topology, plan, heads, keys, guarantee_tracked)
    completed: Path | None = None
    if record is None and txid == base + batch + 1:
        completed = _complete(checkpoint, batch + 1, checkpoint, batch)
        batch += 1
    try:
        if txid != base + batch:
            msg = (f"topology {name!r}: its sinks are at txid {txid}, but the state in "
                   f"{source} is at txid {base + batch}")
            raise StateError(msg, hint="start with the parallelism the checkpoint has, so "
                             "the checkpoint and the sinks agree again, then change it")
        # Step 2
        if entries is None:
            entries = _read_maps(session(), source, batch, heads, keys)
        initial, moved = _moved_state(name, entries, topology, heads, keys)
    except BaseException:
        if completed is not None:
            completed.unlink(missing_ok=True)  # a refused start changes nothing
        raise
    # Step 3
    if record is None:
        aside = checkpoint.with_name(f"{checkpoint.name}.rescaled-at-{txid}")
        if aside.exists():
            aside.rename(aside.with_name(f"{aside.name}.old-{int(time.time())}"))
        CheckpointLayout.write(record_path(checkpoint), pickle.dumps({
            "source": str(aside), "batch": batch, "base": base, "txid": txid,
            "keys": keys, "entries": entries}, protocol=5))
        checkpoint.rename(aside)  # from here, the next start moves what the record holds
    else:  # a rescaling start again: this checkpoint's first batch is not committed
        failed = checkpoint.with_name(f"{checkpoint.name}.unfinished-{int(time.time())}")
        checkpoint.rename(failed)
    follow()
    for bolt, (old, new) in moved.items():
        log.info("state of %r: %d key(s) moved from %d task(s) to %d by key group, at txid %s "
                 "(spark provider, from %s)", bolt,
                 sum(len(m) for m in initial[bolt]), old, new, txid, source)
    # Step 4: the caller resumes from the sinks in the new checkpoint, seeded with ``initial``
    return Rescaling(initial, txid, moved)


def _changed(topology: StormTopology, heads: list[str], keys: Mapping[str, Any]) -> bool:
    return any(h in keys and len(keys[h]["keys"]) != topology.components[h].parallelism
               for h in heads)


def _changes(topology: StormTopology, heads: list[str], keys: Mapping[str, Any]
             ) -> dict[str, tuple[int, int]]:
    """Each stateful bolt whose parallelism changed -> (tasks its state is for, tasks now)."""
    return {h: (len(keys[h]["keys"]), topology.components[h].parallelism) for h in heads
            if h in keys and len(keys[h]["keys"]) != topology.components[h].parallelism}


def _sinks_txid(name: str, records: Mapping[str, Any],
                changes: Mapping[str, tuple[int, int]]) -> int:
    if not records:
        changed = "; ".join(f"{bolt!r} now runs {new} task(s), but the checkpoint holds its "
                            f"state for {old} task(s)" for bolt, (old, new) in changes.items())
        msg = (f"topology {name!r}: {changed}. Its state (spark provider) would move to a new "
               "checkpoint that resumes from its sinks' offsets, but no sink records offsets")
        keep = (f"keep the bolt's parallelism at {next(iter(changes.values()))[0]}"
                if len(changes) == 1 else "keep each bolt's parallelism as the checkpoint has it")
        raise StateError(msg, hint=f"{keep}, or write its output with a sink that records "
                         "offsets (RedisSink, KafkaSink) so that its state can move "
                         "(docs/state.md, Rescaling)")
    known = {sid: rec.txid for sid, rec in records.items() if rec is not None}
    if not known or len(set(known.values())) != 1 or len(known) != len(records):
        msg = (f"topology {name!r}: a stateful bolt's state (spark provider) moves to a new "
               "checkpoint that resumes from its sinks' offsets, but the sinks that record "
               f"offsets do not agree on one txid: {dict(sorted(known.items()))} of "
               f"{sorted(records)}")
        raise StateError(msg, hint="keep the bolt's parallelism until every sink that records "
                         "offsets has committed (a RedisSink or KafkaSink does)")
    return next(iter(known.values()))


def _complete(checkpoint: Path, batch: int, like: Path, like_batch: int) -> Path:
    """Complete Spark's commit of ``batch``, which the sinks committed (``offset_log``)."""
    target = complete_batch(checkpoint, batch, like, like_batch)
    if target is None:
        msg = (f"the sinks committed batch {batch} of {checkpoint}, which has no offsets or "
               "commit log to complete it from")
        raise StateError(msg, hint="start with the parallelism the checkpoint has")
    log.info("batch %s of %s: its sinks committed it, Spark had not: completed in its commit "
             "log before its state moves", batch, checkpoint)
    return target


def _check(name: str, topology: StormTopology, plan: Any, heads: list[str],
           keys: Mapping[str, Any], tracked: bool) -> None:
    """Step 1: refuse what cannot move exactly (nothing changed yet)."""
    why: list[str] = []
    for head in heads:
        n = topology.components[head].parallelism
        if head not in keys:
            why.append(f"stateful bolt {head!r} is not in the checkpoint")
        elif len(keys[head]["keys"]) != n:
            reason = why_not_keyed(topology, head)
            if reason is not None:
                why.append(f"stateful bolt {head!r} now runs {n} task(s) but its state was "
                           f"written by {len(keys[head]['keys'])}: {reason}")
    gone = sorted(set(keys) - set(heads) - {ACKER_COMPONENT})
    if gone:
        why.append(f"{gone} hold state in the checkpoint but are not stateful bolts of the "
                   "topology")
    windowed = [s.head for s in plan.stages if s.windowed and not s.native_window]
    if windowed:
        why.append(f"the windowed bolts {windowed} keep windows in Spark's state store, which "
                   "cannot move to a new checkpoint")
    if tracked:
        why.append("at least once, the ackers' pending trees are in Spark's state store, "
                   "which cannot move to a new checkpoint")
    if why:
        msg = (f"topology {name!r}: its stateful bolts' state (spark provider) cannot move to "
               f"their new parallelism: {'; '.join(why)}")
        raise StateError(msg, hint=_HINT)


_HINT = ("keep the parallelism the checkpoint has, or start over with a new checkpoint "
         "directory (its state starts empty); docs/state.md, Rescaling, says what moves")


def _moved_state(name: str, entries: Mapping[str, list[tuple[int, bytes, bytes]]],
                 topology: StormTopology, heads: list[str], keys: Mapping[str, Any]
                 ) -> tuple[dict[str, list[dict[bytes, bytes]]], dict[str, tuple[int, int]]]:
    """Step 2: each stateful bolt's entries per new task, and which bolts were rescaled.

    ``entries``: per bolt, ``(grouping key, key, stored value)`` as its old tasks hold them.
    """
    initial: dict[str, list[dict[bytes, bytes]]] = {}
    moved: dict[str, tuple[int, int]] = {}
    for head in heads:
        n = topology.components[head].parallelism
        old_keys = [int(k) for k in keys[head]["keys"]]
        old = [dict[bytes, bytes]() for _ in old_keys]
        for group_key, k, v in entries[head]:
            old[task_of_key(group_key, len(old_keys))][k] = v
        if len(old_keys) == n:
            initial[head] = old
            continue
        try:
            layout = redistribute([task_fields(m.items()) for m in old], n)
        except StateError as exc:
            msg = (f"topology {name!r}: stateful bolt {head!r} now runs {n} task(s) but its "
                   f"state (spark provider) was written by {len(old_keys)}, and some keys "
                   f"cannot follow their key group to a new task: {exc}")
            raise StateError(msg, hint=(
                f"keep the bolt's parallelism at {len(old_keys)}; a key must be written only "
                "while executing tuples of one grouping value (docs/state.md, Rescaling)")
                             ) from exc
        initial[head] = [{k: v for k, v in m.items() if not k.startswith(TAG)}
                         for m in layout]
        moved[head] = (len(old_keys), n)
    return initial, moved


def _read_maps(spark: Any, source: Path, batch: int, heads: list[str],
               keys: Mapping[str, Any]) -> dict[str, list[tuple[int, bytes, bytes]]]:
    """Every stateful bolt's ``(grouping key, key, value)`` at ``batch`` of ``source``.

    Spark numbers a query's state operators itself; a stateful bolt's operator is the one
    holding the map :data:`STATE_VAR` whose grouping keys are among the bolt's recorded keys
    (a bolt none fits holds no state). Every operator holding state must be some bolt's,
    and no two bolts' the same.
    """
    path = str(source)
    operators = []
    for row in spark.read.format("state-metadata").load(path).collect():
        props = json.loads(row["operatorProperties"] or "{}")
        names = {v.get("stateName") for v in props.get("stateVariables", [])}
        if STATE_VAR in names:
            operators.append(int(row["operatorId"]))
    found: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for op in operators:
        frame = (spark.read.format("statestore").option("operatorId", op)
                 .option("stateVarName", STATE_VAR).option("batchId", batch).load(path))
        found[op] = [(int(r[0][0]), bytes(r[1][0]), bytes(r[2][0]))
                     for r in frame.select("key", "user_map_key", "user_map_value").collect()]
    chosen: dict[str, int | None] = {}
    for head in heads:
        mine = {int(k) for k in keys[head]["keys"]}
        fits = [op for op in operators if found[op] and {g for g, _, _ in found[op]} <= mine]
        if len(fits) > 1:
            msg = (f"cannot tell which of the state operators {fits} in {source} holds "
                   f"stateful bolt {head!r}'s state (each has only its task keys "
                   f"{sorted(mine)})")
            raise StateError(msg, hint=_HINT)
        chosen[head] = fits[0] if fits else None  # none: its tasks hold no state
    held = [op for op in chosen.values() if op is not None]
    unread = [op for op in operators if found[op] and op not in held]
    if len(set(held)) != len(held) or unread:
        msg = (f"cannot tell the stateful bolts' state operators apart in {source}: by "
               f"their task keys, {chosen} (operators {operators})")
        raise StateError(msg, hint=_HINT)
    return {head: found[op] if op is not None else [] for head, op in chosen.items()}
