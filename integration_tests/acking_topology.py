"""Bolts and a topology for the at-least-once tests (seeds 001 and 003).

Spark's Python workers unpickle bolts by reference, so they live in this importable module.
Every execution of :class:`Flaky` is appended to ``<dir>/executions.log`` (one line per
execution: the record's value), so a test can see exactly which spout tuples were re-run.
Whether an execution is a record's first is decided by a marker file created with
``O_EXCL`` (executors are processes of this machine).

Example:
    >>> bolt = Flaky("/tmp/x", {"v3"}, mode="fail")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from kstorm import BaseRichBolt, Fields, TopologyBuilder
from kstorm.bolt import BaseBasicBolt, BasicOutputCollector, OutputCollector
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.tuple import Tuple

MODES = ("fail", "hold", "always")


def executions(directory: str | Path) -> Counter[str]:
    """How many times each value was executed by :class:`Flaky`."""
    path = Path(directory) / "executions.log"
    if not path.exists():
        return Counter()
    return Counter(path.read_text().split())


def _first_time(directory: str, value: str) -> bool:
    try:
        os.close(os.open(os.path.join(directory, f"seen-{value}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class Flaky(BaseRichBolt):
    """Passes ``value`` on (anchored) and acks, except for ``targets``.

    Modes for a target value: ``fail`` fails its first attempt; ``hold`` neither acks nor
    fails its first attempt (it times out); ``always`` fails every attempt.
    """

    def __init__(self, directory: str, targets: set[str] | frozenset[str], mode: str) -> None:
        if mode not in MODES:
            msg = f"mode must be one of {MODES}, got {mode!r}"
            raise ValueError(msg)
        self.directory = directory
        self.targets = frozenset(targets)
        self.mode = mode

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``value``."""
        declarer.declare(Fields("value"))

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, tuple_: Tuple) -> None:
        """See the class docstring."""
        value = tuple_.get_value_by_field("value")
        fd = os.open(os.path.join(self.directory, "executions.log"),
                     os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        try:
            os.write(fd, f"{value}\n".encode())
        finally:
            os.close(fd)
        if value in self.targets:
            if self.mode == "always":
                self.collector.fail(tuple_)
                return
            if _first_time(self.directory, value):
                if self.mode == "fail":
                    self.collector.fail(tuple_)
                return  # hold: never acked, the tree times out
        self.collector.emit([value], anchors=tuple_)
        self.collector.ack(tuple_)


class Fan(BaseBasicBolt):
    """Emits ``n`` children ``(value, i)`` per input, anchored to it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``value``, ``i``."""
        declarer.declare(Fields("value", "i"))

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Fan out."""
        value = tuple_.get_value_by_field("value")
        for i in range(self.n):
            collector.emit([value, i])


class Leaf(BaseBasicBolt):
    """Acks its input; emits ``(value, count)`` once per batch task (in finish_batch)."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Start counting."""
        self.seen: Counter[str] = Counter()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``value``, ``n``."""
        declarer.declare(Fields("value", "n"))

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Count (acked on return)."""
        self.seen[tuple_.get_value_by_field("value")] += 1

    def finish_batch(self, collector: BasicOutputCollector) -> None:
        """One tuple per value seen."""
        for value, n in sorted(self.seen.items()):
            collector.emit([value, n])


def flaky_topology(spout: Any, bolt: Flaky, sink: Any) -> Any:
    """spout --shuffle--> work (``bolt``) --shuffle--> out (``sink``)."""
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("work", bolt).shuffle_grouping("events")
    builder.set_bolt("out", sink).shuffle_grouping("work")
    return builder.create_topology()
