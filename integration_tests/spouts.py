"""Free-form spouts and bolts for the user-spout tests (importable by Spark's Python workers).

- :class:`NumberSpout`: emits ``[n, n mod keys]`` for n in 0..count-1, a few per
  ``next_tuple``, message id n; every ``ack`` is appended to ``<state_dir>/acks``. Its
  position (the first n not acked yet) is persisted in ``ack`` and resumed in ``open``, the
  contract free-form spouts follow (docs/spouts.md).
- :class:`FlakySpout`: emits like NumberSpout but ``next_tuple`` raises on chosen calls.
- :class:`WrongAritySpout`: emits two values on a one-field stream.
- :class:`Record`: a bolt that passes tuples on and, at the end of each batch, appends
  ``<batch id> <pid> <task> <n> <n> ...`` to ``<state_dir>/batches`` (what each attempt saw); it
  can pause in one batch so a test can kill the process mid-batch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kstorm import BaseRichBolt, BaseRichSpout, Fields


class NumberSpout(BaseRichSpout):
    """0..count-1 on the default stream (and odd numbers also on ``odd`` when asked)."""

    def __init__(self, count: int, state_dir: str, *, per_call: int = 5, keys: int = 7,
                 odd_stream: bool = False) -> None:
        self.count = count
        self.state_dir = state_dir
        self.per_call = per_call
        self.keys = keys
        self.odd_stream = odd_stream

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n", "key"))
        if self.odd_stream:
            declarer.declare_stream("odd", Fields("n"))

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.cursor_file = Path(self.state_dir) / "cursor"
        self.acks_file = Path(self.state_dir) / "acks"
        self.cursor = int(self.cursor_file.read_text()) if self.cursor_file.exists() else 0
        self.next = self.cursor
        self.done: set[int] = set()
        with open(Path(self.state_dir) / "opens", "a") as f:
            f.write(f"{os.getpid()} {self.cursor}\n")

    def next_tuple(self) -> None:
        for _ in range(self.per_call):
            if self.next >= self.count:
                return
            n = self.next
            self.collector.emit([n, n % self.keys], message_id=n)
            if self.odd_stream and n % 2:
                self.collector.emit([n], message_id=None, stream="odd")
            self.next += 1

    def ack(self, msg_id: Any) -> None:
        with open(self.acks_file, "a") as f:
            f.write(f"{msg_id}\n")
        self.done.add(msg_id)
        while self.cursor in self.done:
            self.done.discard(self.cursor)
            self.cursor += 1
        tmp = self.cursor_file.with_suffix(".tmp")
        tmp.write_text(str(self.cursor))
        os.replace(tmp, self.cursor_file)
        # acks can come for tuples a previous instance emitted (before any next_tuple)
        self.next = max(self.next, self.cursor)


class FlakySpout(NumberSpout):
    """A NumberSpout whose ``next_tuple`` raises on the calls in ``fail_calls`` (0-based)."""

    def __init__(self, count: int, state_dir: str, fail_calls: set[int] | None = None,
                 always_fail: bool = False) -> None:
        super().__init__(count, state_dir, per_call=1)
        self.fail_calls = set(fail_calls or ())
        self.always_fail = always_fail

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.calls = 0

    def next_tuple(self) -> None:
        call, self.calls = self.calls, self.calls + 1
        if self.always_fail or call in self.fail_calls:
            raise ConnectionError(f"upstream API unavailable (call {call})")
        super().next_tuple()


class WrongAritySpout(BaseRichSpout):
    """Declares one field, emits two."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        self.collector.emit([1, 2], message_id=1)


class Record(BaseRichBolt):
    """Passes ``n``/``key`` on; records each batch attempt's numbers (see the module doc)."""

    def __init__(self, state_dir: str, pause_batch: int | None = None) -> None:
        self.state_dir = state_dir
        self.pause_batch = pause_batch

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n", "key"))

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.context = context  # the instance outlives a batch: context.batch_id moves on
        self.task = context.task_index
        self.seen: list[int] = []

    def execute(self, t: Any) -> None:
        self.seen.append(t.values[0])
        self.collector.emit(t.values[:2] if len(t.values) > 1 else [t.values[0], -1],
                            anchors=t)
        self.collector.ack(t)

    def finish_batch(self) -> None:
        batch_id, seen, self.seen = self.context.batch_id, self.seen, []
        with open(Path(self.state_dir) / "batches", "a") as f:
            f.write(f"{batch_id} {os.getpid()} {self.task} {' '.join(map(str, seen))}\n")
        marker = Path(self.state_dir) / "paused"
        if batch_id == self.pause_batch and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(120)  # the test kills the process now


def recorded_batches(state_dir: Path) -> list[tuple[int, int, int, list[int]]]:
    """``(batch id, pid, task, numbers)`` per recorded batch attempt of a task."""
    path = state_dir / "batches"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append((int(parts[0]), int(parts[1]), int(parts[2]),
                        [int(x) for x in parts[3:]]))
    return out


def acked(state_dir: Path) -> list[int]:
    """Every message id the spout's ``ack`` received, in order (repeats kept)."""
    path = state_dir / "acks"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


class Explode(BaseRichBolt):
    """Raises on number ``bad`` (with ``kstorm.bolt.error.policy = fail`` the query fails)."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, t: Any) -> None:
        if t.values[0] == self.bad:
            raise ValueError(f"cannot take {self.bad}")
        self.collector.emit([t.values[0]], anchors=t)
        self.collector.ack(t)


class ReliableNumbers(NumberSpout):
    """A NumberSpout that tracks its tuples as Storm's reliable spouts do (seed 001).

    It keeps ``msg id -> values`` of every tuple in flight, re-emits a tuple when ``fail``
    names it (before new numbers), and appends each ``fail`` to ``<state_dir>/fails`` as
    ``<pid> <n>`` (``ack`` is recorded by NumberSpout in ``acks``, with the cursor).
    """

    def __init__(self, count: int, state_dir: str, *, per_call: int = 5, keys: int = 7,
                 resume_emitted: bool = False) -> None:
        super().__init__(count, state_dir, per_call=per_call, keys=keys)
        self.resume_emitted = resume_emitted  # resume after the last number emitted (not acked)

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.pending: dict[int, list[Any]] = {}
        self.replay: list[int] = []
        self.emitted_file = Path(self.state_dir) / "emitted"
        if self.resume_emitted and self.emitted_file.exists():
            self.next = max(self.next, int(self.emitted_file.read_text()))

    def next_tuple(self) -> None:
        if self.replay:
            for _ in range(min(self.per_call, len(self.replay))):
                n = self.replay.pop(0)
                self.collector.emit(self.pending[n], message_id=n)
            return
        for _ in range(self.per_call):
            if self.next >= self.count:
                return
            n = self.next
            self.pending[n] = [n, n % self.keys]
            self.collector.emit(self.pending[n], message_id=n)
            self.next += 1
        if self.resume_emitted:
            self.emitted_file.write_text(str(self.next))

    def ack(self, msg_id: Any) -> None:
        self.pending.pop(msg_id, None)
        super().ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        with open(Path(self.state_dir) / "fails", "a") as f:
            f.write(f"{os.getpid()} {msg_id}\n")
        if msg_id in self.pending:
            self.replay.append(msg_id)


def failed(state_dir: Path) -> list[int]:
    """Every message id the spout's ``fail`` received, in order (repeats kept)."""
    path = state_dir / "fails"
    return [int(line.split()[1]) for line in path.read_text().splitlines()] \
        if path.exists() else []


class FailFirst(BaseRichBolt):
    """Fails the first attempt of each number divisible by ``every`` (a marker file per
    number under ``<state_dir>/seen``, so every process agrees); passes the rest on.

    ``hold``: neither acks nor fails those first attempts instead (their trees time out).
    """

    def __init__(self, state_dir: str, every: int, hold: bool = False) -> None:
        self.state_dir = state_dir
        self.every = every
        self.hold = hold

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n", "key"))

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.seen = Path(self.state_dir) / "seen"
        self.seen.mkdir(exist_ok=True)

    def execute(self, t: Any) -> None:
        n = t.values[0]
        if n % self.every == 0:
            try:
                os.close(os.open(self.seen / str(n), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                if not self.hold:
                    self.collector.fail(t)
                return
            except FileExistsError:
                pass
        self.collector.emit(list(t.values), anchors=t)
        self.collector.ack(t)
