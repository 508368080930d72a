"""Storm's windowing examples (storm-starter), ported as written.

Storm's *Windowing* guide points to its sliding window sample topologies:

- ``SlidingWindowTopology``: a ``RandomIntegerSpout`` -> ``SlidingWindowSumBolt`` (a sum
  over the last 30 tuples every 10, kept up to date from ``get_new()`` and
  ``get_expired()``) -> ``TumblingWindowAvgBolt`` (the average of every 3 sums) -> a
  printer;
- ``SlidingTupleTsTopology``: the same spout -> ``SlidingWindowSumBolt`` over a 5 s window
  every 3 s of the tuples' own ``ts``, with a 5 s lag -> a printer.

and to two for state kept beside a window:

- ``StatefulWindowingTopology``: a ``RandomIntegerSpout`` -> ``WindowSumBolt`` (a
  ``BaseStatefulWindowedBolt`` over a sliding count window of 5 tuples every 3, with
  ``withMessageIdField("msgid")``) adding every window's values to a running ``sum`` kept in
  its ``KeyValueState``, and emitting it -> a printer;
- ``PersistentWindowingTopology``: the same spout -> ``AvgBolt`` (a sliding time window of
  10 s every 2 s, ``withPersistence()``, ``withMaxEventsInMemory(25000)``) emitting the
  window's average and the global average kept in its state -> a printer.

Java syntax became Python (Java's ``int / int`` is ``//``), nothing else, with the additions
a finite, repeatable run needs: the spout's ``limit`` (Storm's spout never stops; ``None``
keeps it so), its ``seed``, its ``sleep_ms`` and its ``clock`` (``time.time`` by default).
The printer is a sink (kstorm's printers run where sinks commit, on the driver, so the
lines show in this process). Run one with::

    python -m examples.storm_windowing sliding      # or: tuple-ts, stateful, persistent

``tests/windowing/test_storm_windowing_examples.py`` runs them on the test driver and checks
every emitted value against Storm's window rules computed independently.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from kstorm import (
    BaseSink,
    BaseStatefulWindowedBolt,
    BaseWindowedBolt,
    Fields,
    SinkBatch,
    TopologyBuilder,
    Values,
)
from kstorm.spout import BaseRichSpout
from kstorm.windowing import Count, Duration, TimeUnit

DAY_MS = 24 * 60 * 60 * 1000
log = logging.getLogger(__name__)


class RandomIntegerSpout(BaseRichSpout):
    """storm-starter's ``RandomIntegerSpout``: ``(value, ts, msgid)`` every 100 ms."""

    def __init__(self, limit: int | None = None, seed: int | None = None,
                 sleep_ms: int = 100, clock: Callable[[], float] = time.time) -> None:
        self.limit, self.seed, self.sleep_ms, self.clock = limit, seed, sleep_ms, clock

    def declare_output_fields(self, declarer: Any) -> None:
        """Storm's fields: the number, a timestamp a day back, the message id."""
        declarer.declare(Fields("value", "ts", "msgid"))

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector; a seeded generator."""
        self.collector = collector
        self.rand = random.Random(self.seed)
        self.msg_id = 0

    def next_tuple(self) -> None:
        """Sleep, then emit the next number with its message id (Storm's order)."""
        if self.limit is not None and self.msg_id >= self.limit:
            return
        time.sleep(self.sleep_ms / 1000)
        self.msg_id += 1
        self.collector.emit(Values(self.rand.randrange(1000), int(self.clock() * 1000) - DAY_MS,
                                   self.msg_id), self.msg_id)

    def ack(self, msg_id: Any) -> None:
        """Storm's spout logs "Got ACK for msgId" at DEBUG."""

    def fail(self, msg_id: Any) -> None:
        """Storm's spout logs "Got FAIL for msgId" at DEBUG."""


class SlidingWindowSumBolt(BaseWindowedBolt):
    """storm-starter's ``SlidingWindowSumBolt``: computes sliding window sum."""

    def __init__(self) -> None:
        super().__init__()
        self.sum = 0

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, input_window: Any) -> None:
        """Add the new tuples' values, subtract the expired ones', emit the sum."""
        # The inputWindow gives a view of (a) all the events in the window, (b) events that
        # expired since last activation of the window, (c) events that newly arrived since
        # last activation of the window
        tuples_in_window = input_window.get()
        new_tuples = input_window.get_new()
        expired_tuples = input_window.get_expired()
        log.debug("Events in current window: %d", len(tuples_in_window))
        for tuple_ in new_tuples:
            self.sum += tuple_.get_value(0)
        for tuple_ in expired_tuples:
            self.sum -= tuple_.get_value(0)
        self.collector.emit(Values(self.sum))

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``sum``."""
        declarer.declare(Fields("sum"))


class TumblingWindowAvgBolt(BaseWindowedBolt):
    """``SlidingWindowTopology.TumblingWindowAvgBolt``: computes tumbling window average."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, input_window: Any) -> None:
        """The average of the window's values (all of them: it is a tumbling window)."""
        total = 0
        tuples_in_window = input_window.get()
        log.debug("Events in current window: %d", len(tuples_in_window))
        if len(tuples_in_window) > 0:
            for tuple_ in tuples_in_window:
                total += tuple_.get_value(0)
            self.collector.emit(Values(total // len(tuples_in_window)))

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``avg``."""
        declarer.declare(Fields("avg"))


class WindowSumBolt(BaseStatefulWindowedBolt):
    """``StatefulWindowingTopology.WindowSumBolt``: a running sum over the windows."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The running sum from the last saved state."""
        self.state = state
        self.sum = state.get("sum", 0)

    def execute(self, input_window: Any) -> None:
        """Add the window's values to the sum, save it, emit it."""
        for tuple_ in input_window.get():
            self.sum += tuple_.get_integer_by_field("value")
        self.state.put("sum", self.sum)
        self.collector.emit(Values(self.sum))

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``sum``."""
        declarer.declare(Fields("sum"))


class AvgBolt(BaseStatefulWindowedBolt):
    """``PersistentWindowingTopology.AvgBolt``: the window's and the global average."""

    STATE_KEY = "avg"

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The global (sum, count) from the last saved state."""
        self.state = state
        self.global_avg = state.get(self.STATE_KEY, (0, 0))

    def execute(self, window: Any) -> None:
        """The window's average and the global one, saved and emitted."""
        total = count = 0
        for tuple_ in window.get_iter():  # iterate over tuples in the current window
            total += tuple_.get_integer(0)
            count += 1
        self.global_avg = (self.global_avg[0] + total, self.global_avg[1] + count)
        self.state.put(self.STATE_KEY, self.global_avg)  # update the value in state
        # emit the averages downstream
        self.collector.emit(Values({"global": self.global_avg[0] / self.global_avg[1],
                                    "window": total / count}))

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``avg``."""
        declarer.declare(Fields("avg"))


class PrinterBolt(BaseSink):
    """storm-starter's ``PrinterBolt``, as a sink: prints each tuple it receives."""

    def __init__(self) -> None:
        self.values: list[list[Any]] = []

    def commit(self, batch: SinkBatch) -> None:
        """Print each tuple's first value."""
        for tuple_ in batch.tuples:
            print(tuple_.values[0], flush=True)
            self.values.append(list(tuple_.values))


def sliding_window(limit: int | None = None, seed: int | None = None,
                   sleep_ms: int = 100) -> Any:
    """``SlidingWindowTopology``'s topology."""
    builder = TopologyBuilder()
    builder.set_spout("integer", RandomIntegerSpout(limit, seed, sleep_ms), 1)
    builder.set_bolt("slidingsum", SlidingWindowSumBolt().with_window(Count.of(30), Count.of(10)),
                     1).shuffle_grouping("integer")
    builder.set_bolt("tumblingavg", TumblingWindowAvgBolt().with_tumbling_window(Count.of(3)),
                     1).shuffle_grouping("slidingsum")
    builder.set_bolt("printer", PrinterBolt(), 1).shuffle_grouping("tumblingavg")
    return builder.create_topology()


def sliding_tuple_ts(limit: int | None = None, seed: int | None = None, sleep_ms: int = 100,
                     clock: Callable[[], float] = time.time) -> Any:
    """``SlidingTupleTsTopology``'s topology."""
    builder = TopologyBuilder()
    bolt = (SlidingWindowSumBolt()
            .with_window(Duration(5, TimeUnit.SECONDS), Duration(3, TimeUnit.SECONDS))
            .with_timestamp_field("ts")
            .with_lag(Duration(5, TimeUnit.SECONDS)))
    builder.set_spout("integer", RandomIntegerSpout(limit, seed, sleep_ms, clock), 1)
    builder.set_bolt("slidingsum", bolt, 1).shuffle_grouping("integer")
    builder.set_bolt("printer", PrinterBolt(), 1).shuffle_grouping("slidingsum")
    return builder.create_topology()


def stateful_windowing(limit: int | None = None, seed: int | None = None,
                       sleep_ms: int = 100) -> Any:
    """``StatefulWindowingTopology``'s topology."""
    builder = TopologyBuilder()
    builder.set_spout("spout", RandomIntegerSpout(limit, seed, sleep_ms))
    builder.set_bolt("sumbolt", WindowSumBolt().with_window(Count(5), Count(3))
                     .with_message_id_field("msgid"), 1).shuffle_grouping("spout")
    builder.set_bolt("printer", PrinterBolt(), 1).shuffle_grouping("sumbolt")
    return builder.create_topology()


def persistent_windowing(limit: int | None = None, seed: int | None = None,
                         sleep_ms: int = 100) -> Any:
    """``PersistentWindowingTopology``'s topology."""
    builder = TopologyBuilder()
    builder.set_spout("spout", RandomIntegerSpout(limit, seed, sleep_ms))  # random numbers
    # emits sliding window and global averages
    builder.set_bolt("avgbolt", AvgBolt()
                     .with_window(Duration(10, TimeUnit.SECONDS), Duration(2, TimeUnit.SECONDS))
                     .with_persistence()  # persist the window in state
                     .with_max_events_in_memory(25000), 1  # events cached in memory
                     ).shuffle_grouping("spout")
    builder.set_bolt("printer", PrinterBolt(), 1).shuffle_grouping("avgbolt")  # to stdout
    return builder.create_topology()


def main(argv: list[str] | None = None) -> int:
    """Run one of the four for 150 tuples (100 ms apart) on local Spark."""
    import os
    import tempfile

    from kstorm import submit_topology

    which = (argv if argv is not None else sys.argv[1:]) or ["stateful"]
    build = {"sliding": sliding_window, "tuple-ts": sliding_tuple_ts,
             "stateful": stateful_windowing, "persistent": persistent_windowing}.get(which[0])
    if build is None:
        print("usage: python -m examples.storm_windowing sliding|tuple-ts|stateful|persistent",
              file=sys.stderr)
        return 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="kstorm-windowing-") as checkpoint:
        handle = submit_topology(f"storm-{which[0]}-windowing", {
            "kstorm.trigger": "available-now", "kstorm.checkpoint.dir": checkpoint,
            "topology.state.checkpoint.interval.ms": 5000}, build(limit=150))
        handle.await_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
