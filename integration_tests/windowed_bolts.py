"""User windowed bolts shared by the windowing integration tests (importable by workers).

Example:
    >>> WindowIds().with_tumbling_window  # doctest: +ELLIPSIS
    <bound method WindowedBoltConfigMixin.with_tumbling_window of ...>
"""

from __future__ import annotations

from typing import Any

from kstorm import BaseBasicBolt, BaseStatefulWindowedBolt, BaseWindowedBolt, Fields
from kstorm.bolt import OutputCollector
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.state import KeyValueState
from kstorm.windowing import TupleWindow


class WindowIds(BaseWindowedBolt):
    """Emits ``(start, end, ids, size)`` per window: the ``id`` fields of its tuples, in order.

    ``ids`` is the ids joined by ``,``; with ``streamed=True`` the tuples are read through
    ``get_iter()`` (persistent windows) and ``size`` counts them.
    """

    def __init__(self, streamed: bool = False) -> None:
        self.streamed = streamed

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Keep the collector."""
        self.collector = collector

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``start``, ``end``, ``ids``, ``size``."""
        declarer.declare(Fields("start", "end", "ids", "size"))

    def execute(self, window: TupleWindow) -> None:
        """One tuple per window."""
        tuples = window.get_iter() if self.streamed else window.get()
        ids = [str(t.get_value_by_field("id")) for t in tuples]
        self.collector.emit([window.get_start_timestamp(), window.get_end_timestamp(),
                             ",".join(ids), len(ids)])


class CountingWindows(BaseStatefulWindowedBolt):
    """Per window ``(start, end, count, total, seq)``; ``seq`` numbers the task's windows.

    ``seq`` lives in the checkpointed ``KeyValueState``: after kills and restarts the
    windows still come out numbered 1, 2, 3... with no gap and no repeat.
    """

    def init_state(self, state: KeyValueState) -> None:
        """The task's window counter."""
        self.state = state

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Keep the collector."""
        self.collector = collector

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``start``, ``end``, ``count``, ``total``, ``seq``."""
        declarer.declare(Fields("start", "end", "count", "total", "seq"))

    def execute(self, window: TupleWindow) -> None:
        """Count and sum the window's ``value`` fields."""
        seq = self.state.get("seq", 0) + 1
        self.state.put("seq", seq)
        values = [t.get_value_by_field("value") for t in window.get()]
        self.collector.emit([window.get_start_timestamp(), window.get_end_timestamp(),
                             len(values), sum(values), seq])


class ValueWindows(BaseWindowedBolt):
    """Emits ``(values,)`` per window: the ``value`` field of its tuples joined by ``,``."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Keep the collector."""
        self.collector = collector

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``values``."""
        declarer.declare(Fields("values"))

    def execute(self, window: TupleWindow) -> None:
        """One tuple per window."""
        self.collector.emit([",".join(str(t.get_value_by_field("value"))
                                      for t in window.get())])


class Relay(BaseBasicBolt):
    """Passes on each Kafka event's identity: ``partition * 10**9 + offset``."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit([tuple_.get_integer_by_field("partition") * 10**9
                        + tuple_.get_integer_by_field("offset")])


class RelayWindows(BaseWindowedBolt):
    """Emits the id of every tuple of each window (a sink counts each id's windows)."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id"))

    def execute(self, window: TupleWindow) -> None:
        for tuple_ in window.get():
            self.collector.emit([tuple_.get_value(0)], [tuple_])


class RunningSum(BaseWindowedBolt):
    """storm-starter's ``SlidingWindowSumBolt``: a running sum kept in an instance field.

    Emits ``(task, sum, truth, prepares)``: the field's sum (``get_new`` added,
    ``get_expired`` subtracted) and the window's own sum, which must agree; ``prepares``: how
    often this instance's task was prepared in the process that ran it.
    """

    def __init__(self) -> None:
        self.sum = 0

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Keep the collector and the task."""
        self.collector = collector
        self.task = context.get_this_task_index()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``task``, ``sum``, ``truth``."""
        declarer.declare(Fields("task", "sum", "truth"))

    def execute(self, window: TupleWindow) -> None:
        """Add the new tuples, subtract the expired ones."""
        self.sum += sum(t.get_value(1) for t in window.get_new())
        self.sum -= sum(t.get_value(1) for t in window.get_expired())
        self.collector.emit([self.task, self.sum, sum(t.get_value(1) for t in window.get())])
