"""Storm's stateful and persistent windowing examples (storm-starter), ported as written.

Storm's *Windowing* guide points to two sample topologies for state kept beside a window:

- ``StatefulWindowingTopology``: a ``RandomIntegerSpout`` -> ``WindowSumBolt`` (a
  ``BaseStatefulWindowedBolt`` over a sliding count window of 5 tuples every 3, with
  ``withMessageIdField("msgid")``) adding every window's values to a running ``sum`` kept in
  its ``KeyValueState``, and emitting it -> a printer;
- ``PersistentWindowingTopology``: the same spout -> ``AvgBolt`` (a sliding time window of
  10 s every 2 s, ``withPersistence()``, ``withMaxEventsInMemory(25000)``) emitting the
  window's average and the global average kept in its state -> a printer.

Java syntax became Python, nothing else, with two additions a finite run needs: the spout's
``limit`` (Storm's spout never stops; ``None`` keeps it so) and its ``seed``. The printer is
a sink (kstorm's printers run where sinks commit, on the driver, so the lines show in this
process). Run one with::

    python -m examples.storm_windowing stateful     # or: persistent

``tests/windowing/test_storm_windowing_examples.py`` runs both on the test driver and checks every
emitted value against Storm's window rules computed independently.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from kstorm import BaseSink, BaseStatefulWindowedBolt, Fields, SinkBatch, TopologyBuilder, Values
from kstorm.spout import BaseRichSpout
from kstorm.windowing import Count, Duration, TimeUnit

DAY_MS = 24 * 60 * 60 * 1000


class RandomIntegerSpout(BaseRichSpout):
    """storm-starter's ``RandomIntegerSpout``: ``(value, ts, msgid)`` every 100 ms."""

    def __init__(self, limit: int | None = None, seed: int | None = None,
                 sleep_ms: int = 100) -> None:
        self.limit, self.seed, self.sleep_ms = limit, seed, sleep_ms

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
        self.collector.emit(Values(self.rand.randrange(1000), int(time.time() * 1000) - DAY_MS,
                                   self.msg_id), self.msg_id)

    def ack(self, msg_id: Any) -> None:
        """Storm's spout logs "Got ACK for msgId" at DEBUG."""

    def fail(self, msg_id: Any) -> None:
        """Storm's spout logs "Got FAIL for msgId" at DEBUG."""


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
    """Run one of the two for ``limit`` tuples (100 ms apart) on local Spark."""
    import os
    import tempfile

    from kstorm import submit_topology

    which = (argv if argv is not None else sys.argv[1:]) or ["stateful"]
    build = {"stateful": stateful_windowing, "persistent": persistent_windowing}.get(which[0])
    if build is None:
        print("usage: python -m examples.storm_windowing stateful|persistent", file=sys.stderr)
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
