"""Spark's checkpoint logs, read here and nowhere else.

``<checkpoint>/offsets/<batch id>``: written by Spark before a batch runs: a version line,
the batch's metadata (``batchTimestampMs``...), then one line per source, in the order of
the query's sources (the order the compiler reads the spouts in), ``-`` for a source with no
offset yet. ``<checkpoint>/commits/<batch id>``: written once the batch's sink (kstorm's
commit phase) returned.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path

from kstorm._runtime.batch import BatchOffsets
from kstorm._runtime.checkpoint import CheckpointLayout


def read_batch(checkpoint: Path, batch_id: int, spouts: Sequence[str], *,
               kafka_spouts: Collection[str]) -> BatchOffsets:
    """Batch ``batch_id``'s end offsets per spout (``spouts`` in the query's source order)."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    except FileNotFoundError:
        return BatchOffsets(batch_id)
    meta = json.loads(lines[1]) if len(lines) > 1 else {}
    sources = [json.loads(line) if line.strip() not in ("", "-") else None
               for line in lines[2:]]
    return BatchOffsets.parse(batch_id, int(meta.get("batchTimestampMs", 0)),
                              dict(zip(spouts, sources, strict=False)),
                              kafka_spouts=kafka_spouts)


def last_committed_batch(checkpoint: Path) -> int | None:
    """Highest batch id in Spark's commit log, or None (no checkpoint, or nothing committed)."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids) if ids else None


def next_batch_id(checkpoint: Path) -> int:
    """The id Spark gives the next batch it plans: one past the last in its offset log."""
    offsets = checkpoint / "offsets"
    ids = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()] if offsets.is_dir() else []
    return max(ids) + 1 if ids else 0


def checkpoint_sql_conf(checkpoint: Path) -> dict[str, str]:
    """The SQL settings Spark keeps with the checkpoint's latest planned batch, or ``{}``.

    Spark writes the settings that shape a query's state (``spark.sql.shuffle.partitions``,
    the state store's provider and formats, ...) into each batch's metadata, and a restarted
    query runs with those, whatever the session says.
    """
    batch = next_batch_id(checkpoint) - 1
    if batch < 0:
        return {}
    try:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
        conf = json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else {}
    except (OSError, ValueError, AttributeError):
        return {}  # unreadable: Spark itself refuses such a log when the query starts
    return {str(k): str(v) for k, v in conf.items()} if isinstance(conf, dict) else {}


def replay_last_batch(checkpoint: Path, last_batch: int) -> list[str]:
    """Make Spark run ``last_batch`` again: out of its commit log, later plans out of its offsets.

    Spark then re-runs ``last_batch`` from the offsets it logged for it (the same range,
    the same txid). Returns the files removed.
    """
    removed: list[str] = []
    targets = [checkpoint / "commits" / str(last_batch)]
    offsets = checkpoint / "offsets"
    if offsets.is_dir():
        targets += [p for p in offsets.iterdir() if p.name.isdigit() and int(p.name) > last_batch]
    for path in targets:
        for victim in (path, path.with_name(f".{path.name}.crc")):
            if victim.exists():
                victim.unlink()
                removed.append(str(victim.relative_to(checkpoint)))
    return removed


def complete_batch(checkpoint: Path, batch: int, like: Path, like_batch: int) -> Path | None:
    """Write Spark's commit of ``batch``, whose sinks committed it, as ``like`` committed another.

    The entry is a copy of ``like``'s commit of ``like_batch`` (the same format and
    watermark). Returns the file written, or None: ``batch`` was not planned, or there is
    no entry to copy.
    """
    source = like / "commits" / str(like_batch)
    if not (checkpoint / "offsets" / str(batch)).exists() or not source.exists():
        return None
    target = checkpoint / "commits" / str(batch)
    CheckpointLayout.write(target, source.read_bytes())
    return target
