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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstorm import BaseRichBolt, Fields, KafkaSpout, TopologyBuilder
from kstorm.bolt import BaseBasicBolt, BasicOutputCollector, OutputCollector
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.sink import BaseSink, SinkBatch
from kstorm.testing import ListSpout
from kstorm.tuple import Tuple

MODES = ("fail", "hold", "always")


@dataclass(frozen=True, repr=False)
class AckLoggingKafkaSpout(KafkaSpout):
    """A KafkaSpout whose ``ack`` appends ``topic partition offset`` to ``<ack_dir>/acks.log``.

    (Read tasks run in other processes: a file is what the test can see.)
    """

    ack_dir: str = ""

    def ack(self, msg_id: Any) -> None:
        """Log the acked record."""
        with open(os.path.join(self.ack_dir, "acks.log"), "a") as f:
            f.write("{} {} {}\n".format(*msg_id))


class AckLoggingListSpout(ListSpout):
    """A ListSpout whose ``ack`` appends its ``"b:i"`` message id to ``<ack_dir>/acks.log``."""

    ack_dir: str = ""

    def ack(self, msg_id: Any) -> None:
        """Log the acked row."""
        with open(os.path.join(self.ack_dir, "acks.log"), "a") as f:
            f.write(f"{msg_id}\n")


def acks(directory: str | Path) -> Counter[tuple[str, int, int]]:
    """How many times each (topic, partition, offset) was acked by AckLoggingKafkaSpout."""
    path = Path(directory) / "acks.log"
    if not path.exists():
        return Counter()
    return Counter((t, int(p), int(o)) for t, p, o in
                   (line.split() for line in path.read_text().splitlines()))


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

    def mode_for(self, value: str) -> str | None:
        """How ``value`` misbehaves (None: it is processed normally)."""
        return self.mode if value in self.targets else None

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
        mode = self.mode_for(value)
        if mode is not None:
            if mode == "always":
                self.collector.fail(tuple_)
                return
            if _first_time(self.directory, value):
                if mode == "fail":
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
        self.seen.clear()  # the instance lives on into the next batch


class Chaotic(Flaky):
    """For the kill test: ``r<i>`` fails its first attempt when ``i % 20 == 7`` and is never
    acked on its first attempt (times out) when ``i % 97 == 3``."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, frozenset(), "fail")

    def mode_for(self, value: str) -> str | None:
        """See the class docstring."""
        i = int(value[1:])
        if i % 20 == 7:
            return "fail"
        if i % 97 == 3:
            return "hold"
        return None


class AppendSink(BaseSink):
    """Appends every value it receives to a file, one line each, fsynced per batch.

    Deliberately not idempotent: at least once, a replayed batch appends its values again.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def commit(self, batch: SinkBatch) -> None:
        """Append the batch's values."""
        tuples = batch.tuples
        if tuples:
            append_lines(self.path, [str(t.values[0]) for t in tuples])


class SplitAppendSink(AppendSink):
    """An :class:`AppendSink` for window results: one line per value of ``"a,b,c"``."""

    def commit(self, batch: SinkBatch) -> None:
        """Append each window's values."""
        lines = [v for t in batch.tuples for v in t.values[0].split(",") if v]
        if lines:
            append_lines(self.path, lines)


def append_lines(path: str, lines: list[str]) -> None:
    """Append ``lines`` to ``path`` and fsync.

    A SIGKILL can tear a write in the middle of a line (the test kills these processes), and
    the next run's first line would then be glued to the fragment (``1714`` + ``84``): the
    partial line of a batch that never finished is dropped first (its batch is replayed).
    """
    with open(path, "a+b") as f:
        end = f.seek(0, os.SEEK_END)
        if end:
            f.seek(end - 1)
            if f.read(1) != b"\n":
                f.seek(0)
                f.truncate(f.read().rfind(b"\n") + 1)
        f.write("".join(f"{v}\n" for v in lines).encode())
        f.flush()
        os.fsync(f.fileno())


class FailsSomeWindows(BaseRichBolt):
    """Fails a window result holding, for the first time, a value ``r<i>`` with
    ``i % 50 == 11`` (seed 004: the window's tuples must be replayed), passes the rest."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``values``."""
        declarer.declare(Fields("values"))

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, tuple_: Tuple) -> None:
        """See the class docstring."""
        values = tuple_.values[0].split(",")
        firsts = [_first_time(self.directory, "window-" + v) for v in values
                  if int(v[1:]) % 50 == 11]  # (a list: every marker is written)
        if any(firsts):
            self.collector.fail(tuple_)
            return
        self.collector.emit(tuple_.values, anchors=tuple_)
        self.collector.ack(tuple_)


def windowed_topology(spout: Any, bolt: Flaky, directory: str, sink: Any) -> Any:
    """spout -> work (``bolt``) -> 1 s tumbling windows -> check -> out (``sink``)."""
    from windowed_bolts import ValueWindows

    from kstorm.windowing import Duration

    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("work", bolt).shuffle_grouping("events")
    builder.set_bolt("windows", ValueWindows().with_tumbling_window(Duration.seconds(1))
                     ).global_grouping("work")
    builder.set_bolt("check", FailsSomeWindows(directory)).shuffle_grouping("windows")
    builder.set_bolt("out", sink).shuffle_grouping("check")
    return builder.create_topology()


def flaky_topology(spout: Any, bolt: Flaky, sink: Any) -> Any:
    """spout --shuffle--> work (``bolt``) --shuffle--> out (``sink``)."""
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("work", bolt).shuffle_grouping("events")
    builder.set_bolt("out", sink).shuffle_grouping("work")
    return builder.create_topology()


# -- the kill test's runner: ``python -m acking_topology ...`` ---------------------------


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (-1001 where none)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        answer = consumer.committed([KafkaTopicPartition(topic, p) for p in range(partitions)],
                                    timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in answer}


def run(argv: list[str] | None = None) -> int:
    """Run at least once until the group's offsets reach the topic's ends (all acked)."""
    import argparse
    import json
    import logging
    import sys
    import time

    from kstorm import KafkaSpout, submit_topology
    from kstorm.acking import RetryPolicy

    parser = argparse.ArgumentParser(prog="acking_topology")
    for name in ("--bootstrap", "--topic", "--checkpoint", "--name", "--dir", "--ends"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-per-batch", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--windowed", action="store_true",
                        help="values go through 1 s tumbling windows (windowed_topology)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    ends = {int(p): o for p, o in json.loads(args.ends).items()}
    group = f"{args.name}-group"
    spout = KafkaSpout(args.topic, group_id=group, max_offsets_per_batch=args.max_per_batch,
                       first_batch_max_offsets=args.max_per_batch,
                       retry=RetryPolicy(initial_delay_ms=200, delay_period_ms=200))
    if args.windowed:
        topology = windowed_topology(spout, Chaotic(args.dir), args.dir,
                                     SplitAppendSink(f"{args.dir}/out.txt"))
    else:
        topology = flaky_topology(spout, Chaotic(args.dir), AppendSink(f"{args.dir}/out.txt"))
    conf = {"kafka.bootstrap.servers": args.bootstrap, "kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": 200,
            "kstorm.spark.master": "local[2]", "kstorm.shuffle.partitions": 2,
            "topology.guarantee": "at-least-once", "topology.message.timeout.secs": 4}
    handle = submit_topology(args.name, conf, topology)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not handle.is_active:
            handle.await_termination(0)
            return 1
        if group_offsets(args.bootstrap, group, args.topic, len(ends)) == ends:
            logging.info("drained; progress %s", handle.progress["components"])
            handle.stop()
            return 0
        time.sleep(0.3)
    handle.stop()
    return 3


if __name__ == "__main__":
    raise SystemExit(run())
