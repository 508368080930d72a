"""Batch bolts and committers (seed 002): a new instance per batch, ``finish_batch`` at its end.

A :class:`BaseBatchBolt` task gets a fresh instance for every batch: ``prepare(conf,
context, collector, id)`` with the batch's id (a :class:`TransactionAttempt` in a
transactional topology), ``execute`` for each of the batch's tuples, then ``finish_batch``
once the task has every tuple of the batch from every input. There is no acking or
anchoring: the batch is the unit, and a failure (raise :class:`kstorm.FailedException`)
replays the whole batch.

A *committer* (a bolt that also subclasses :class:`ICommitter`, or one added with
``TransactionalTopologyBuilder.set_committer_bolt``) runs in the commit phase: its
``finish_batch`` is called strictly in txid order, after every earlier transaction
committed. Bolts downstream of a committer receive its output in the commit phase too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from kstorm.bolt import _NO, _is_values, basic_emit_form
from kstorm.component import Component, TopologyContext
from kstorm.tuple import DEFAULT_STREAM, Tuple


class BatchOutputCollector:
    """Emits a batch bolt's tuples (no anchors: the batch is tracked as a whole)."""

    def __init__(self, emit: Callable[[str, list[Any], Sequence[Tuple]], None]) -> None:
        self._emit = emit

    def emit(self, values: Any, second: Any = _NO, *, stream: str = DEFAULT_STREAM) -> None:
        """Emit ``values`` on ``stream`` (Storm's ``emit(stream, values)`` works too)."""
        if second is not _NO or not _is_values(values):
            stream, values = basic_emit_form(values, second, stream, "BatchOutputCollector")
        self._emit(stream, list(values), ())

    def report_error(self, error: BaseException) -> None:
        """Fail the batch with ``error`` (it is replayed; Storm's ``reportError``)."""
        raise error


class BaseBatchBolt(Component):
    """A bolt that processes one batch per instance (Storm ``BaseBatchBolt``)."""

    is_batch_bolt: ClassVar[bool] = True

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: BatchOutputCollector, id: Any) -> None:  # noqa: A002 - Storm's name
        """Called when the task's instance for batch ``id`` is created."""

    def execute(self, tuple_: Tuple) -> None:
        """One tuple of the batch."""
        msg = f"{type(self).__name__} must implement execute(tuple_)"
        raise NotImplementedError(msg)

    def finish_batch(self) -> None:
        """The task has every tuple of the batch (committers: in the commit phase)."""


class BaseTransactionalBolt(BaseBatchBolt):
    """A batch bolt of a transactional topology: ``id`` is a :class:`TransactionAttempt`."""


class ICommitter:
    """Marker: this batch bolt's ``finish_batch`` runs in the ordered commit phase.

    Example:
        >>> class UpdateGlobalCount(BaseTransactionalBolt, ICommitter):
        ...     pass
    """

    is_committer: ClassVar[bool] = True
