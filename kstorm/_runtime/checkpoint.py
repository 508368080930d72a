"""``<checkpoint>/kstorm/``: kstorm's own files beside Spark's, owned by one class.

Spark keeps its offset log, commit log and state store under the checkpoint; kstorm keeps
what the driver and the sources need to replay a batch exactly, next to them::

    <checkpoint>/kstorm/
        txid_base                     txid = txid_base + Spark batch id (reconcile raises it
                                      when a topology resumes from a sink's record)
        windows/<aggregate>/<b>.pkl   a windowed aggregate's open windows after batch b
        pmax/<aggregate>.json         its streams' latest timestamps, for the next batch's plan
        acking/<b>.trackers.pkl       at least once: the spouts' trackers after batch b
        acking/<spout>.book.json      ... and the book the spout's source plans with
        acking/notices/<spout>/<b>.notices.pkl  a free-form spout's trees that ended (or
                                      timed out) in batch b, for its process to ack/fail
        spouts/<spout>/<seq>          a free-form spout's logged batches (spout_log.py)
        txmeta/<spout>.json           a transactional spout's partition metadata after its
                                      last committed batch (what replays really emitted)
        task_keys.json                the grouping key of each task of a stateful or windowed
                                      stage, fixed at the checkpoint's first run (Spark keeps
                                      the stage's state under it; compiler.py)

Every file is written atomically (:meth:`CheckpointLayout.write`: a temporary file, fsync,
rename, fsync of the directory), so a reader sees a whole file or the previous one. Files
versioned by batch id follow one retention rule: a batch's state is kept until
:data:`KEEP_BATCHES` later batches committed (a replay needs only the state of the batch
before it; the margin leaves room to inspect).

Pure file handling, no Spark: Spark's own ``offsets/`` and ``commits/`` are read only by
``kstorm/_spark/offset_log.py``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("kstorm")

KEEP_BATCHES = 10
"""Versioned files of a batch are deleted once this many later batches have them."""


class CheckpointLayout:
    """The layout of ``<checkpoint>/kstorm/`` (see the module docstring)."""

    def __init__(self, checkpoint: Path | str) -> None:
        self.checkpoint = Path(checkpoint)
        self.root = self.checkpoint / "kstorm"

    def __repr__(self) -> str:
        return f"CheckpointLayout({str(self.checkpoint)!r})"

    # -- paths -----------------------------------------------------------------------------

    @property
    def txid_base_path(self) -> Path:
        """``txid_base``."""
        return self.root / "txid_base"

    def window_dir(self, component: str) -> Path:
        """A windowed aggregate's states, one file per batch id."""
        return self.root / "windows" / component

    def clocks_path(self, component: str) -> Path:
        """A windowed aggregate's stream clocks after its last batch."""
        return self.root / "pmax" / f"{component}.json"

    @property
    def acking_dir(self) -> Path:
        """At least once: the spouts' trackers and books."""
        return self.root / "acking"

    def book_path(self, spout: str) -> Path:
        """The book tracked spout ``spout``'s source plans its next batch with."""
        return self.acking_dir / f"{spout}.book.json"

    def notices_dir(self, spout: str) -> Path:
        """A tracked free-form spout's notices (ack/fail to deliver), one file per batch."""
        return self.acking_dir / "notices" / spout

    def txmeta_path(self, spout: str) -> Path:
        """A transactional spout's partition metadata after its last committed batch."""
        return self.root / "txmeta" / f"{spout}.json"

    @property
    def spout_logs_dir(self) -> Path:
        """The free-form spouts' batch logs."""
        return self.root / "spouts"

    def spout_log_dir(self, spout: str) -> Path:
        """A free-form spout's batch log."""
        return self.spout_logs_dir / spout

    # -- txid base -------------------------------------------------------------------------

    def txid_base(self) -> int:
        """The checkpoint's txid base (0 for a checkpoint kstorm never rebased)."""
        try:
            return int(self.txid_base_path.read_text())
        except FileNotFoundError:
            return 0

    def set_txid_base(self, base: int) -> None:
        """Record the txid base (before the query starts)."""
        self.write(self.txid_base_path, str(base).encode())

    # -- task keys -------------------------------------------------------------------------

    @property
    def task_keys_path(self) -> Path:
        """``task_keys.json``."""
        return self.root / "task_keys.json"

    def task_keys(self) -> dict[str, dict[str, Any]] | None:
        """The recorded task keys per stateful stage's bolt (None: none recorded)."""
        try:
            return json.loads(self.task_keys_path.read_text())
        except FileNotFoundError:
            return None

    def set_task_keys(self, keys: dict[str, dict[str, Any]]) -> None:
        """Record the task keys (before the query starts)."""
        self.write(self.task_keys_path, json.dumps(keys, sort_keys=True).encode())

    # -- tick tuples ------------------------------------------------------------------------

    @property
    def ticks_path(self) -> Path:
        """``ticks.json``."""
        return self.root / "ticks.json"

    def ticks(self) -> list[str]:
        """The bolts with tick tuples when the query last started (none recorded: none)."""
        try:
            return list(json.loads(self.ticks_path.read_text()))
        except FileNotFoundError:
            return []

    def set_ticks(self, bolts: list[str]) -> None:
        """Record the bolts with tick tuples (before the query starts)."""
        self.write(self.ticks_path, json.dumps(sorted(bolts)).encode())

    # -- files -----------------------------------------------------------------------------

    @staticmethod
    def write(path: Path, data: bytes) -> None:
        """Write ``path`` atomically: a reader sees the whole new file or the old one."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)

    @staticmethod
    def versions(directory: Path, suffix: str) -> list[int]:
        """Batch ids of the files ``<id><suffix>`` in ``directory``, sorted."""
        if not directory.is_dir():
            return []
        found = []
        for entry in directory.iterdir():
            name = entry.name
            if name.endswith(suffix) and name[:-len(suffix)].lstrip("-").isdigit():
                found.append(int(name[:-len(suffix)]))
        return sorted(found)

    def latest_before(self, directory: Path, suffix: str, batch_id: int) -> Path | None:
        """The newest ``<id><suffix>`` with ``id < batch_id`` (a replay reads the one before)."""
        older = [v for v in self.versions(directory, suffix) if v < batch_id]
        return directory / f"{max(older)}{suffix}" if older else None

    def retain(self, directory: Path, suffix: str, batch_id: int) -> None:
        """Delete the versions older than :data:`KEEP_BATCHES` batches before ``batch_id``."""
        for version in self.versions(directory, suffix):
            if version < batch_id - KEEP_BATCHES:
                (directory / f"{version}{suffix}").unlink(missing_ok=True)

    def move_aside(self) -> Path | None:
        """Rename a stale checkpoint to ``<name>.stale-<time>`` (kept for inspection)."""
        if not self.checkpoint.exists():
            return None
        stale = self.checkpoint.with_name(f"{self.checkpoint.name}.stale-{int(time.time())}")
        self.checkpoint.rename(stale)
        log.warning("checkpoint moved aside to %s", stale)
        return stale


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
