"""Spouts (Storm ``IRichSpout``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from kstorm.component import Component, TopologyContext, report_error
from kstorm.errors import EmitError
from kstorm.tuple import DEFAULT_STREAM

_NO: Any = object()  # no third positional argument


class SpoutOutputCollector:
    """Emits spout tuples; a tuple emitted with a ``message_id`` is tracked for ack/fail."""

    def __init__(self, emit: Callable[[str, list[Any], Any], None]) -> None:
        self._emit = emit

    def emit(self, values: Any, message_id: Any = None, third: Any = _NO, *,
             stream: str = DEFAULT_STREAM) -> None:
        """Emit ``values`` on ``stream``; ``message_id`` None means untracked.

        Storm's ``emit(stream, values)`` and ``emit(stream, values, message_id)`` work as
        written too (a first argument that is a string names the stream).
        """
        if isinstance(values, str):
            if not isinstance(message_id, list | tuple):
                msg = (f"SpoutOutputCollector.emit({values!r}, ...): a stream name needs the "
                       "values after it: emit(stream, values[, message_id]), or kstorm's "
                       "emit(values, message_id=None, *, stream='default')")
                raise EmitError(msg, hint="put the values list where the form has it")
            stream, values, message_id = values, message_id, None if third is _NO else third
        elif third is not _NO or not isinstance(values, list | tuple):
            msg = (f"SpoutOutputCollector.emit({type(values).__name__}, ...) matches neither "
                   "Storm's emit(values[, message_id]) / emit(stream, values[, message_id]) "
                   "nor kstorm's emit(values, message_id=None, *, stream='default')")
            raise EmitError(msg, hint="put the values list where the form has it")
        self._emit(stream, list(values), message_id)

    def report_error(self, error: BaseException) -> None:
        """Storm's ``reportError``: log ``error`` (ERROR, logger ``kstorm.errors``)."""
        report_error(error)


class BaseRichSpout(Component):
    """A source of tuples (Storm ``BaseRichSpout``).

    Subclass it for your own source (an API poller, a file tailer, a generator): kstorm calls
    ``next_tuple`` in one long-lived process, cuts its emits into batches (``kstorm.spout.*``
    bounds) and writes each batch to a log under the checkpoint before Spark runs it, so a
    replayed batch is the same batch. ``ack(msg_id)`` comes once the batch holding the tuple
    committed (at most once: once it is logged); persist your position there and resume from
    it in ``open``. Exactly once ``fail`` is not called: a failed batch is replayed from the
    log. At least once (with ackers) each tuple with a message id is tracked: ``ack`` when
    its tree completes, ``fail`` when a bolt fails it or it times out, before the next
    ``next_tuple``, which may re-emit it. See the README's "Writing a spout".
    :class:`kstorm.KafkaSpout` and :class:`kstorm.testing.ListSpout` are replayable by
    themselves and run without a log.

    Example:
        >>> class Numbers(BaseRichSpout):
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("n"))
        ...     def open(self, conf, context, collector):
        ...         self.collector, self.n = collector, 0
        ...     def next_tuple(self):
        ...         self.collector.emit([self.n], message_id=self.n)
        ...         self.n += 1
    """

    source_kind: ClassVar[str] = "next_tuple"
    """How the runtime reads this spout: ``next_tuple`` calls, logged into batches.

    (:class:`kstorm.KafkaSpout` and :class:`kstorm.testing.ListSpout` are read by Spark
    sources of their own instead: ``"kafka"``, ``"list"``.)
    """

    def open(self, conf: dict[str, Any], context: TopologyContext,
             collector: SpoutOutputCollector) -> None:
        """Called once before the first ``next_tuple``."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples."""

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out."""

    def close(self) -> None:
        """Called when the spout shuts down."""
