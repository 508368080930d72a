"""The book of a tracked free-form spout: its trees that ended, for its own process to deliver.

At least once, the driver decides in each batch's commit phase which of a free-form spout's
trees ended (``kstorm/acking/emits.py``), but the spout instance lives in another process
(Spark's streaming source runner, ``kstorm/_spark/spout_source.py``). So, after the sinks
committed batch ``b``, the driver writes the batch's :class:`~kstorm.acking.emits.Notice` s
and when the oldest pending tree times out::

    <checkpoint>/kstorm/acking/notices/<spout>/<b>.notices.pkl   written atomically
    <checkpoint>/kstorm/acking/notices/<spout>/delivered         first batch not delivered

A replay of ``b`` writes the same file again (the same trees end the same way), so delivery is
keyed by batch id. Before its next ``next_tuple`` the spout's executor reads the files it has
not delivered, in batch order (:meth:`NoticeBook.unread`), calls ``ack``/``fail``, and records
``delivered`` only once the batch it then fills is logged: what a spout re-emits from ``fail``
is then in the log. A crash in between delivers the notices again, to the new instance.

Example:
    >>> book = NoticeBook(tmp_path / "notices" / "numbers")     # doctest: +SKIP
    >>> book.write(4, [notice], next_timeout_ms=None)           # doctest: +SKIP
    >>> [(b, len(n)) for b, n, _ in book.unread(0)]               # doctest: +SKIP
    [(4, 1)]
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm.acking.emits import EmitMsg, Notice
from kstorm.acking.messages import Outcome

SUFFIX = ".notices.pkl"
DELIVERED_FILE = "delivered"


class NoticeBook:
    """One tracked free-form spout's notice files (see the module docstring)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def write(self, batch_id: int, notices: Sequence[Notice], next_timeout_ms: int | None,
              pending: int = 0) -> None:
        """The driver, after batch ``batch_id`` committed: its notices (atomic, idempotent).

        ``pending``: the trees still pending after it (``topology.max.spout.pending``).
        """
        data = {"notices": [(n.action, n.outcome.value, tuple(n.msg)) for n in notices],
                "next_timeout_ms": next_timeout_ms, "pending": pending}
        CheckpointLayout.write(self.directory / f"{batch_id}{SUFFIX}",
                               pickle.dumps(data, protocol=5))

    def unread(self, first: int) -> list[tuple[int, list[Notice], int | None]]:
        """``(batch id, notices, next timeout)`` of every file from batch ``first`` on."""
        out = []
        for batch_id in CheckpointLayout.versions(self.directory, SUFFIX):
            if batch_id < first:
                continue
            notices, timeout, _ = self._read(batch_id)
            out.append((batch_id, notices, timeout))
        return out

    def latest(self) -> tuple[int | None, int]:
        """The newest file's next time-out and pending trees (``(None, 0)``: no file)."""
        versions = CheckpointLayout.versions(self.directory, SUFFIX)
        if not versions:
            return None, 0
        _, timeout, pending = self._read(versions[-1])
        return timeout, pending

    def latest_timeout(self) -> int | None:
        """The next time-out the newest file names (None: no file, or nothing pending)."""
        return self.latest()[0]

    def _read(self, batch_id: int) -> tuple[list[Notice], int | None, int]:
        data = pickle.loads((self.directory / f"{batch_id}{SUFFIX}").read_bytes())
        notices = [Notice(action, Outcome(outcome), EmitMsg(*msg))
                   for action, outcome, msg in data["notices"]]
        return notices, data["next_timeout_ms"], int(data.get("pending", 0))

    def delivered(self) -> int:
        """The first batch whose notices were not durably delivered (0 for a new book)."""
        try:
            return int((self.directory / DELIVERED_FILE).read_text())
        except FileNotFoundError:
            return 0

    def mark_delivered(self, first_unread: int) -> None:
        """Every batch below ``first_unread`` was delivered; older files are deleted.

        (The last delivered file stays: its next time-out is what a new instance starts from.)
        """
        if first_unread <= self.delivered():
            return
        CheckpointLayout.write(self.directory / DELIVERED_FILE, str(first_unread).encode())
        for batch_id in CheckpointLayout.versions(self.directory, SUFFIX):
            if batch_id < first_unread - 1:
                (self.directory / f"{batch_id}{SUFFIX}").unlink(missing_ok=True)
