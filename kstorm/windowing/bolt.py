"""User windowed bolts (Storm ``BaseWindowedBolt`` / ``BaseStatefulWindowedBolt``, seed 004).

Subclass :class:`BaseWindowedBolt`, implement ``execute(window)`` and declare the window with
the builder methods; the runtime calls ``execute`` with a :class:`TupleWindow` each time a
window fires::

    class SlidingSum(BaseWindowedBolt):
        def prepare(self, conf, context, collector):
            self.collector = collector

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("sum"))

        def execute(self, window):
            self.collector.emit([sum(t.get_value_by_field("n") for t in window.get())])

    builder.set_bolt("sum", SlidingSum().with_window(Count(30), Count(10)))

What ``execute`` emits without explicit anchors is anchored to the window's tuples (Storm's
``WindowedOutputCollector``). With :meth:`~WindowedBoltConfigMixin.with_late_tuple_stream`
the late-tuple stream is declared for you (one field, ``late_tuple``, holding the late
:class:`kstorm.Tuple` with its source and message id).

Example:
    >>> from kstorm.windowing import Duration
    >>> bolt = BaseWindowedBolt().with_tumbling_window(Duration.seconds(5))
    >>> bolt.window_config.window_length
    Duration.millis(5000)
"""

from __future__ import annotations

from typing import Any, ClassVar

from kstorm.bolt import (
    _NO,
    OutputCollector,
    _anchor_list,
    _is_anchors,
    _is_values,
    emit_form,
)
from kstorm.component import Component, TopologyContext
from kstorm.state import KeyValueState
from kstorm.tuple import DEFAULT_STREAM, Fields
from kstorm.windowing.builder import WindowedBoltConfigMixin
from kstorm.windowing.config import LATE_TUPLE_FIELD
from kstorm.windowing.durations import Count, Duration
from kstorm.windowing.window import TupleWindow


class WindowedOutputCollector(OutputCollector):
    """An :class:`OutputCollector` whose unanchored emits are anchored to the current window.

    Example:
        >>> c = WindowedOutputCollector(lambda s, v, a: print(s, v, len(a)), print, print)
        >>> c.window = TupleWindow.of(["t1", "t2"])
        >>> c.emit([42])
        default [42] 2
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window: TupleWindow | None = None
        self._anchors: list[Any] | None = None
        self._for: TupleWindow | None = None

    def emit(self, values: Any, anchors: Any = None, third: Any = _NO, *,
             stream: str = DEFAULT_STREAM) -> None:
        """Emit ``values``; without ``anchors``, anchored to the tuples of the window.

        Storm's positional forms as :meth:`kstorm.OutputCollector.emit` takes them.
        """
        if third is not _NO or not _is_values(values) or not (
                anchors is None or _is_anchors(anchors)):
            stream, values, anchors = emit_form(values, anchors, third, stream,
                                                "WindowedOutputCollector")
        if anchors is None and self.window is not None:
            if self._for is not self.window:
                self._for = self.window
                self._anchors = ([] if self.window._persistent  # noqa: SLF001
                                 else self.window.get())
            anchors = self._anchors
        self._emit(stream, list(values), _anchor_list(anchors))


class BaseWindowedBolt(WindowedBoltConfigMixin, Component):
    """A bolt that processes windows of tuples (Storm ``IWindowedBolt``).

    Like every kstorm bolt, an instance lives as long as its task's Python worker process:
    ``prepare`` is called once, before the instance's first window, and ``cleanup`` when the
    instance is let go (see :class:`kstorm.BaseRichBolt`). The window contents themselves are
    kept by the runtime across batches (in Spark's state store); keep your own state that
    must survive failures in a :class:`BaseStatefulWindowedBolt`.
    """

    is_windowed_bolt = True
    # Storm's nested value classes: BaseWindowedBolt.Count(30), BaseWindowedBolt.Duration...
    Count: ClassVar[type[Count]] = Count
    Duration: ClassVar[type[Duration]] = Duration

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Called once per instance, before its first window."""

    def execute(self, window: TupleWindow) -> None:
        """Process the tuples of one window (``window.get()``, ``get_new()``, ``get_expired()``)."""
        msg = f"{type(self).__name__} must implement execute(window)"
        raise NotImplementedError(msg)

    def finish_batch(self) -> None:
        """Called after the task's last window of a batch."""

    def cleanup(self) -> None:
        """Called when the instance is let go (its worker process stops with the topology)."""

    def implicit_streams(self) -> dict[str, Fields]:
        """The late-tuple stream, when one was configured (declared automatically)."""
        late = self._window_settings().get("late_tuple_stream")
        return {late: Fields(LATE_TUPLE_FIELD)} if late else {}


class BaseStatefulWindowedBolt(BaseWindowedBolt):
    """A windowed bolt with checkpointed :class:`KeyValueState` (Storm ``IStatefulWindowedBolt``).

    ``init_state`` is called with the task's state before its first window of each batch;
    changes are saved with the batch in Spark's state store, next to the window itself, so a
    replayed batch sees both as they were before its first attempt.
    """

    is_stateful_windowed_bolt = True

    def init_state(self, state: KeyValueState) -> None:
        """Receive the task's state."""
        msg = f"{type(self).__name__} must implement init_state(state)"
        raise NotImplementedError(msg)


def acks_on_arrival(bolt: Any) -> bool:
    """Whether a windowed bolt acks its tuples as they arrive, not when they expire.

    Storm's stateful windowing (and a persistent window) acks tuples once the checkpointed
    window holds them; a plain windowed bolt (seed 004) keeps them in their trees until
    they expire, its emits anchored to them.
    """
    return bool(getattr(bolt, "is_stateful_windowed_bolt", False)
                or bolt.window_config.persistent)
