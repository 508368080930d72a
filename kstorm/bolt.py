"""Bolts (Storm ``IRichBolt``, ``IBasicBolt``, ``IStatefulBolt``) and their collectors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstorm.component import Component, TopologyContext, report_error
from kstorm.errors import EmitError, FailedException
from kstorm.state import KeyValueState
from kstorm.tuple import DEFAULT_STREAM, Tuple

Anchors = Tuple | Sequence[Tuple] | None
EmitFn = Callable[[str, list[Any], Sequence[Tuple]], None]


def _anchor_list(anchors: Anchors) -> Sequence[Tuple]:
    if anchors is None:
        return ()
    if isinstance(anchors, Tuple):
        return (anchors,)
    return anchors


_NO: Any = object()  # no third positional argument
FORMS = ("Storm's emit(values), emit(anchor_or_anchors, values), emit(stream, values), "
         "emit(stream, anchor_or_anchors, values); or kstorm's emit(values, anchors=None, *, "
         "stream='default')")


def _is_anchors(value: Any, *, empty: bool = True) -> bool:
    """A Tuple, or a list/tuple of Tuples (``empty``: an empty one counts)."""
    if isinstance(value, Tuple):
        return True
    return (isinstance(value, list | tuple) and (empty or bool(value))
            and all(isinstance(v, Tuple) for v in value))


def _is_values(value: Any) -> bool:
    return isinstance(value, list | tuple) and not isinstance(value, Tuple)


def _bad_emit(component: str, *args: Any) -> EmitError:
    shown = ", ".join(type(a).__name__ for a in args if a is not _NO)
    return EmitError(f"{component}.emit({shown}) matches neither emit form: {FORMS}",
                     hint="put the values list where the form has it (a Tuple is an anchor)")


def emit_form(first: Any, second: Any, third: Any, stream: str,
              collector: str = "OutputCollector") -> tuple[str, Any, Anchors]:
    """``(stream, values, anchors)`` of an ``emit`` call in Storm's form or kstorm's.

    Example:
        >>> from kstorm.tuple import Fields
        >>> t = Tuple(["a"], Fields("w"), "split", "default")
        >>> emit_form(["x"], t, _NO, "default")[1:] == (["x"], t)      # kstorm's
        True
        >>> emit_form(t, ["x"], _NO, "default")[1:] == (["x"], t)      # Storm's
        True
        >>> emit_form("counts", [t], ["x"], "default") == ("counts", ["x"], [t])
        True
    """
    if third is not _NO:  # Storm's emit(stream, anchor_or_anchors, values)
        if isinstance(first, str) and _is_anchors(second) and _is_values(third):
            return first, third, second
        raise _bad_emit(collector, first, second, third)
    if second is None or _is_anchors(second):
        if _is_values(first):  # kstorm's emit(values, anchors), or emit(values)
            return stream, first, second
        if isinstance(first, str) and second is None:
            raise _bad_emit(collector, first)
    if _is_values(second):
        if _is_anchors(first):  # Storm's emit(anchor_or_anchors, values)
            return stream, second, first
        if isinstance(first, str):  # Storm's emit(stream, values)
            return first, second, None
    raise _bad_emit(collector, first, second)


def basic_emit_form(first: Any, second: Any, stream: str, collector: str
                    ) -> tuple[str, Any]:
    """``(stream, values)`` of an unanchored collector's ``emit(values)``.

    Or of Storm's ``emit(stream, values)``; an :class:`~kstorm.errors.EmitError` otherwise.
    """
    if second is _NO and _is_values(first):
        return stream, first
    if isinstance(first, str) and _is_values(second):
        return first, second
    raise _bad_emit(collector, first, second)


class OutputCollector:
    """Emits, acks and fails tuples for a :class:`BaseRichBolt` (Storm ``OutputCollector``).

    Example:
        >>> collector.emit(Values(word), anchors=tuple_)   # doctest: +SKIP
        >>> collector.ack(tuple_)                          # doctest: +SKIP
    """

    def __init__(self, emit: EmitFn, ack: Callable[[Tuple], None],
                 fail: Callable[[Tuple], None]) -> None:
        self._emit = emit
        self._ack = ack
        self._fail = fail

    def emit(self, values: Any, anchors: Any = None, third: Any = _NO, *,
             stream: str = DEFAULT_STREAM) -> None:
        """Emit ``values`` on ``stream``, anchored to ``anchors`` (none: unanchored).

        Storm's positional forms work as written too: ``emit(anchor, values)``,
        ``emit(anchors, values)``, ``emit(stream, values)``, ``emit(stream, anchor,
        values)``. A call in neither form is an :class:`~kstorm.errors.EmitError`, which
        stops the topology.
        """
        if third is not _NO or not (type(values) is list or _is_values(values)) or not (
                anchors is None or type(anchors) is Tuple or _is_anchors(anchors)):
            stream, values, anchors = emit_form(values, anchors, third, stream)
        if anchors is None:
            self._emit(stream, list(values), ())
        elif type(anchors) is Tuple:
            self._emit(stream, list(values), (anchors,))
        else:
            self._emit(stream, list(values), _anchor_list(anchors))

    def ack(self, tuple_: Tuple) -> None:
        """Mark ``tuple_`` fully processed by this bolt."""
        self._ack(tuple_)

    def fail(self, tuple_: Tuple) -> None:
        """Fail ``tuple_``: its spout tuples are replayed (at-least-once mode)."""
        self._fail(tuple_)

    def report_error(self, error: BaseException) -> None:
        """Storm's ``reportError``: log ``error`` (ERROR, logger ``kstorm.errors``).

        As in Storm it only reports: the tuple is neither acked nor failed by it.
        """
        report_error(error)


class BasicOutputCollector:
    """Collector of a :class:`BaseBasicBolt`: emits are anchored to the input tuple."""

    def __init__(self, out: OutputCollector) -> None:
        self._out = out
        self.input: Tuple | None = None
        # a plain OutputCollector: its emit function is called directly (a call less per
        # emit), read at each emit (a kept bolt's collector gets each batch's)
        self._plain = type(out) is OutputCollector

    def emit(self, values: Any, second: Any = _NO, *, stream: str = DEFAULT_STREAM) -> None:
        """Emit ``values`` on ``stream``, anchored to the tuple being executed.

        Storm's ``emit(stream, values)`` works as written too; another form is an
        :class:`~kstorm.errors.EmitError`.
        """
        if second is not _NO or not (type(values) is list or _is_values(values)):
            stream, values = basic_emit_form(values, second, stream, "BasicOutputCollector")
        if self._plain:
            anchor = self.input
            self._out._emit(stream, list(values), () if anchor is None else (anchor,))
        else:
            self._out.emit(values, self.input, stream=stream)


    def report_error(self, error: BaseException) -> None:
        """Storm's ``reportError``: log ``error``; the input is still acked on return."""
        report_error(error)


class BaseRichBolt(Component):
    """A bolt that emits, acks and fails explicitly.

    An instance lives as long as the Python worker process that owns its task's partition:
    ``prepare`` is called once, before the task's first tuple, and the instance serves the
    following micro-batches, whichever worker Spark gives them to (README, "How Storm maps
    onto Spark"); if that worker dies, another prepares a new instance. State that must
    survive a failure belongs in a :class:`BaseStatefulBolt`'s ``KeyValueState``,
    checkpointed with the batch.
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Called once per instance, before its first tuple."""

    def execute(self, tuple_: Tuple) -> None:
        """Process one input tuple."""
        msg = f"{type(self).__name__} must implement execute(tuple_)"
        raise NotImplementedError(msg)

    def finish_batch(self) -> None:
        """Called after the task's last tuple of a batch (Storm ``IBatchBolt.finishBatch``)."""

    def cleanup(self) -> None:
        """Called when the instance is let go: its topology stopped.

        ``handle.stop()``, or the end of an available-now run; in the Python worker that
        holds the instance. Like Storm's, not called when that process is killed.
        """


class BaseBasicBolt(Component):
    """A bolt whose emits are anchored to its input, acked when ``execute`` returns.

    Raise :class:`kstorm.FailedException` to fail the input tuple instead.
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once per instance, before its first tuple (see :class:`BaseRichBolt`)."""

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Process one input tuple."""
        msg = f"{type(self).__name__} must implement execute(tuple_, c)"
        raise NotImplementedError(msg)

    def finish_batch(self, collector: BasicOutputCollector) -> None:
        """Called after the task's last tuple of a batch."""

    def cleanup(self) -> None:
        """Called when the instance is let go: its topology stopped.

        ``handle.stop()``, or the end of an available-now run; in the Python worker that
        holds the instance. Like Storm's, not called when that process is killed.
        """


class BaseStatefulBolt(BaseRichBolt):
    """A bolt with checkpointed :class:`KeyValueState` (Storm ``IStatefulBolt``, seed 000).

    ``init_state`` is called with the task's state before each batch; the changes the batch
    makes are saved atomically with it, so a replayed batch sees the state as it was before
    its first attempt. Where the state lives is ``topology.state.provider``: Spark's state
    store (``spark``, versioned by batch id) or a provider with seed 000's protocol
    (``redis``: prepared by the task, committed by the driver after the batch's sinks).

    The hooks (seed 000's ``IStatefulComponent``) are optional; by default they do nothing:

    - ``pre_prepare(txid)``: in the task, just before its changes for ``txid`` are prepared
      (every provider);
    - ``pre_commit(txid)``: just before the state of ``txid`` commits: in the task with the
      ``spark`` provider (Spark commits the state store with the task); on the driver, once
      per task, with the other providers (on a driver-side copy of the bolt: ``prepare`` is
      not called on it);
    - ``pre_rollback()``: on the driver, per task, just before prepared changes are
      discarded or a commit is taken back (a failed batch attempt re-run in place, recovery
      at start). With the ``spark`` provider Spark discards a failed batch's state itself
      and the hook is not called.
    """

    def init_state(self, state: KeyValueState) -> None:
        """Receive the task's state."""
        msg = f"{type(self).__name__} must implement init_state(state)"
        raise NotImplementedError(msg)

    def pre_prepare(self, txid: int) -> None:
        """Called just before the framework prepares the state of ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Called just before the framework commits the state of ``txid``."""

    def pre_rollback(self) -> None:
        """Called just before the framework rolls the prepared state back."""


def run_basic(bolt: BaseBasicBolt, collector: BasicOutputCollector, out: OutputCollector,
              tuple_: Tuple) -> None:
    """Execute a basic bolt on one tuple: ack on return, fail on ``FailedException``."""
    collector.input = tuple_
    try:
        bolt.execute(tuple_, collector)
    except FailedException:
        out.fail(tuple_)
    else:
        out.ack(tuple_)
