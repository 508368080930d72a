"""The write-ahead batch log of a free-form spout (one that runs ``next_tuple``).

A Kafka batch is replayable because it is an offset range; a batch of a spout that polls an
API or tails a file is not, so kstorm writes it down before Spark sees it (seed 002: "a
transactional spout must emit the same batch for the same transaction id"):

    <checkpoint>/kstorm/spouts/<spout id>/<seq>     one Arrow IPC file per batch
    <checkpoint>/kstorm/spouts/<spout id>/acked     the first seq not yet acked

A batch file holds, per tuple, its stream, its values (pickled, as in envelope rows), its
message id (pickled; null when untracked) and its owner: the spout instance that emitted it, or
``@kstorm`` for a tuple kstorm re-emitted for an instance that is gone (at least once:
``kstorm/_runtime/spout_notices.py``). It is written atomically
(:meth:`CheckpointLayout.write`), so a reader sees a whole batch or none. Files are only
ever read after that, which is what makes a replayed batch identical to its first attempt.

Example:
    >>> log = SpoutLog(tmp_path / "spouts" / "numbers")   # doctest: +SKIP
    >>> log.write(0, [LoggedTuple("default", [1], "m1")])  # doctest: +SKIP
    >>> [t.values for t in log.tuples(0)]                  # doctest: +SKIP
    [[1]]
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm.errors import SourceError

LOG_SCHEMA = pa.schema([("__stream", pa.string()), ("__vals", pa.binary()),
                        ("__msgid", pa.binary()), ("__owner", pa.string())])
ACKED_FILE = "acked"


class LoggedTuple(NamedTuple):
    """One emitted spout tuple as the log keeps it."""

    stream: str
    values: list[Any]
    message_id: Any = None
    owner: str = ""


def to_table(tuples: Sequence[LoggedTuple]) -> pa.Table:
    """The log's Arrow form of ``tuples`` (values and message ids pickled)."""
    return pa.table([
        pa.array([t.stream for t in tuples], pa.string()),
        pa.array([pickle.dumps(list(t.values), protocol=5) for t in tuples], pa.binary()),
        pa.array([None if t.message_id is None else pickle.dumps(t.message_id, protocol=5)
                  for t in tuples], pa.binary()),
        pa.array([t.owner for t in tuples], pa.string()),
    ], schema=LOG_SCHEMA)


class SpoutLog:
    """The batch files of one spout in one checkpoint (see the module docstring)."""

    def __init__(self, directory: Path | str, spout_id: str = "") -> None:
        self.directory = Path(directory)
        self.spout_id = spout_id or self.directory.name

    def path(self, seq: int) -> Path:
        """Where batch ``seq`` is (or would be) logged."""
        return self.directory / str(seq)

    def exists(self, seq: int) -> bool:
        """Whether batch ``seq`` was logged."""
        return self.path(seq).exists()

    def write(self, seq: int, tuples: Sequence[LoggedTuple]) -> None:
        """Log batch ``seq`` atomically."""
        table = to_table(tuples)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        CheckpointLayout.write(self.path(seq), sink.getvalue().to_pybytes())

    def table(self, seq: int) -> pa.Table:
        """Batch ``seq`` as logged; :class:`SourceError` if it is missing or unreadable."""
        path = self.path(seq)
        try:
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_file(source).read_all()
        except FileNotFoundError as exc:
            msg = (f"spout {self.spout_id!r}: batch {seq} is not in its log {path}; a "
                   "checkpoint that still plans it needs the spout log kept beside it")
            raise SourceError(msg) from exc
        except (OSError, pa.ArrowInvalid) as exc:
            msg = f"spout {self.spout_id!r}: cannot read logged batch {seq} at {path}: {exc}"
            raise SourceError(msg) from exc

    def tuples(self, seq: int) -> Iterator[LoggedTuple]:
        """The tuples of batch ``seq`` in emit order."""
        table = self.table(seq)
        owners = (table.column("__owner").to_pylist() if "__owner" in table.schema.names
                  else [""] * table.num_rows)  # a log written before owners were kept
        for stream, vals, msg, owner in zip(table.column("__stream").to_pylist(),
                                            table.column("__vals").to_pylist(),
                                            table.column("__msgid").to_pylist(), owners,
                                            strict=True):
            yield LoggedTuple(stream, pickle.loads(vals), None if msg is None else
                              pickle.loads(msg), owner or "")

    def acked(self) -> int:
        """The first batch whose tuples were not acked yet (0 for a new log)."""
        try:
            return int((self.directory / ACKED_FILE).read_text())
        except FileNotFoundError:
            return 0

    def mark_acked(self, seq: int) -> None:
        """Record that every batch below ``seq`` was acked (atomic)."""
        CheckpointLayout.write(self.directory / ACKED_FILE, str(seq).encode())

    def prune(self, below: int) -> list[int]:
        """Delete the batch files with seq < ``below``; returns the seqs deleted."""
        gone: list[int] = []
        if not self.directory.is_dir():
            return gone
        for entry in self.directory.iterdir():
            if entry.name.isdigit() and int(entry.name) < below:
                entry.unlink(missing_ok=True)
                gone.append(int(entry.name))
        return sorted(gone)
