"""The conformance topologies: each runs on Spark and on ``TopologyTestDriver``, same outputs.

Every topology reads ``ListSpout``s (so both runtimes see the same batches; but
``free_form_failures``, whose spout's ``next_tuple`` both runtimes call) and ends in
``CaptureSink``s; :data:`TOPOLOGIES` maps a name to ``build(directory) -> (topology, conf)``
(``directory``: a scratch directory of the run, for bolts that fail once). Bolts that show
their ``task_index`` make the comparison cover task placement too.

Example:
    >>> sorted(TOPOLOGIES)[:2]
    ['acking_failures', 'aggregate']
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kstorm import (
    BaseBasicBolt,
    BaseBatchBolt,
    BaseRichBolt,
    BaseStatefulBolt,
    BaseTransactionalBolt,
    BaseWindowedBolt,
    Fields,
    ICommitter,
    TopologyBuilder,
)
from kstorm.acking import RetryPolicy
from kstorm.errors import FailedException
from kstorm.testing import CaptureSink, ListSpout
from kstorm.windowing import Count, Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate

Built = tuple[Any, dict[str, Any]]

SENTENCES = [
    [("the cow jumped over the moon",), ("an apple a day",)],
    [("the man went to the store",), ("four score and seven",)],
    [("snow white and the seven dwarfs",), ("i am at two with nature",), ("the end",)],
]
IDS = [[(i, f"k{i % 5}", i * 10) for i in range(b * 7, b * 7 + 7)] for b in range(4)]
EVENTS = [  # (id, key, ts ms, value): the last batch has a late event (ts 1_000)
    [(0, "a", 1_000, 1), (1, "b", 4_000, 2), (2, "a", 9_000, 3)],
    [(3, "a", 12_000, 4), (4, "b", 15_500, 5), (5, "c", 19_000, 6)],
    [(6, "a", 23_000, 7), (7, "c", 26_000, 8), (8, "a", 1_000, 100)],
    [(9, "b", 41_000, 9)],
]

SESSION_EVENTS = [  # (id, key, ts ms, value) for sessions with gap 5 s, max 6 s, lag 10 s
    [(0, "a", 1_000, 1), (1, "b", 2_000, 2), (2, "a", 4_000, 3), (3, "a", 12_000, 4)],
    # 8 s bridges a's [1 s, 4 s] and [12 s]; the run is then cut at 1 s + max: [1, 4], [8, 12]
    [(4, "a", 8_000, 5), (5, "c", 9_000, 6), (6, "b", 30_000, 7)],
    # 2.5 s is late; 48 s is past 40 s + max: a new session
    [(7, "a", 2_500, 100), (8, "c", 31_000, 8), (9, "a", 40_000, 9), (10, "a", 44_000, 1),
     (11, "a", 48_000, 2)],
    [(12, "b", 90_000, 3)],
]


class Split(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        for word in tuple_.values[0].split():
            collector.emit([word])


class KeyCount(BaseStatefulBolt):
    """``(task, key, running count)``; the key is a word or a spout's ``key`` field."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.task = context.task_index

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "key", "count"))

    def execute(self, tuple_: Any) -> None:
        key = tuple_.values[0] if tuple_.source_component != "ids" else tuple_.values[1]
        n = self.state.get(key, 0) + 1
        self.state.put(key, n)
        self.collector.emit([self.task, key, n], anchors=tuple_)
        self.collector.ack(tuple_)


class Tag(BaseRichBolt):
    """``(task, id)`` per tuple: where it ran."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.task = collector, context.task_index

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("task", "id"))

    def execute(self, tuple_: Any) -> None:
        self.collector.emit([self.task, tuple_.values[0]], anchors=tuple_)
        self.collector.ack(tuple_)


class EvenOdd(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare_stream("even", Fields("id"))
        declarer.declare_stream("odd", Fields("id", "square"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        n = tuple_.values[0]
        if n % 2:
            collector.emit([n, n * n], stream="odd")
        else:
            collector.emit([n], stream="even")


class Picky(BaseBasicBolt):
    """Raises on ids divisible by 4 (dead letters under the default policy)."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        if tuple_.values[0] % 4 == 0:
            raise ValueError(f"no multiples of 4: {tuple_.values[0]}")
        collector.emit([tuple_.values[0]])


class FailsOnce(BaseBasicBolt):
    """Fails the first attempt of the batch holding id 10 (``always``: every attempt)."""

    def __init__(self, always: bool = False) -> None:
        self.always = always

    def prepare(self, conf: Any, context: Any) -> None:
        self.marker = Path(conf["user.dir"]) / "failed-once"

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "key"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        if tuple_.values[0] == 10 and (self.always or not self.marker.exists()):
            self.marker.touch()
            raise FailedException("id 10 fails")
        collector.emit([tuple_.values[0], tuple_.values[1]])


class Fails(BaseRichBolt):
    """At least once: fails (``collector.fail``) ids divisible by 3, acks the others."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id"))

    def execute(self, tuple_: Any) -> None:
        if tuple_.values[0] % 3 == 0:
            self.collector.fail(tuple_)
            return
        self.collector.emit([tuple_.values[0]], anchors=tuple_)
        self.collector.ack(tuple_)


class FailsXOnce(BaseRichBolt):
    """At least once: fails each ``x...`` word on its first attempt (marker files in
    ``user.dir``, so every process agrees), passes the rest."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.dir = collector, Path(conf["user.dir"])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any) -> None:
        word = tuple_.values[0]
        marker = self.dir / f"failed-{word}"
        if word.startswith("x") and not marker.exists():
            marker.touch()
            self.collector.fail(tuple_)
            return
        self.collector.emit([word], anchors=tuple_)
        self.collector.ack(tuple_)


class FailsNewOnce(BaseRichBolt):
    """At least once: fails the first attempt of each spout tuple whose id is 1 mod 4 (a
    marker file per message id in ``user.dir``, so every process agrees); emits
    ``(key, id, message id)`` anchored, for the others and for the replays."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.dir = collector, Path(conf["user.dir"])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("key", "id", "msg"))

    def execute(self, tuple_: Any) -> None:
        marker = self.dir / f"failed-{tuple_.message_id}"
        if tuple_.values[0] % 4 == 1 and not marker.exists():
            marker.touch()
            self.collector.fail(tuple_)
            return
        self.collector.emit([tuple_.values[1], tuple_.values[0], tuple_.message_id],
                            anchors=tuple_)
        self.collector.ack(tuple_)


class Ids(BaseWindowedBolt):
    """``(ids, size)`` per window (start and end only where time is the event time)."""

    def __init__(self, times: bool = False) -> None:
        self.times = times

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("start", "end", "ids", "size"))

    def execute(self, window: Any) -> None:
        ids = sorted(t.values[0] for t in window.get())
        start, end = ((window.get_start_timestamp(), window.get_end_timestamp())
                      if self.times else (None, None))
        self.collector.emit([start, end, ",".join(map(str, ids)), len(ids)])


class PartialCount(BaseBatchBolt):
    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.count = collector, id, 0

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "count"))

    def execute(self, tuple_: Any) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.count])


class Total(BaseTransactionalBolt, ICommitter):
    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.sum = collector, id, 0

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("txid", "total"))

    def execute(self, tuple_: Any) -> None:
        self.sum += tuple_.values[1]

    def finish_batch(self) -> None:
        self.collector.emit([self.id.transaction_id, self.sum])


# -- the topologies ---------------------------------------------------------------------------


def word_count(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("sentences", ListSpout(SENTENCES, Fields("sentence"), partitions=2))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", KeyCount(), 3).fields_grouping("split", Fields("word"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("count")
    return b.create_topology(), {}


def task_placement(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n"), partitions=2))
    b.set_bolt("shuffled", Tag(), 4).shuffle_grouping("ids")
    b.set_bolt("keyed", KeyCount(), 3).fields_grouping("ids", Fields("key"))
    b.set_bolt("global", Tag(), 2).global_grouping("ids")
    b.set_bolt("everywhere", Tag(), 2).all_grouping("ids")
    b.set_bolt("after", Tag(), 3).fields_grouping("shuffled", Fields("id"))
    for bolt in ("shuffled", "keyed", "global", "everywhere", "after"):
        b.set_bolt(f"{bolt}-out", CaptureSink()).shuffle_grouping(bolt)
    return b.create_topology(), {}


def streams(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n")))
    b.set_bolt("parity", EvenOdd(), 2).fields_grouping("ids", Fields("key"))
    b.set_bolt("evens", CaptureSink()).shuffle_grouping("parity", "even")
    b.set_bolt("odds", CaptureSink()).shuffle_grouping("parity", "odd")
    return b.create_topology(), {}


def dead_letters(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n")))
    b.set_bolt("picky", Picky(), 2).shuffle_grouping("ids")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("picky")
    return b.create_topology(), {}


def count_windows(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n")))
    b.set_bolt("tumbling", Ids().with_tumbling_window(Count(3))).global_grouping("ids")
    b.set_bolt("sliding", Ids().with_window(Count(4), Count(2)), 2).fields_grouping(
        "ids", Fields("key"))
    b.set_bolt("tumbling-out", CaptureSink()).shuffle_grouping("tumbling")
    b.set_bolt("sliding-out", CaptureSink()).shuffle_grouping("sliding")
    return b.create_topology(), {}


def event_time_windows(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(EVENTS, Fields("id", "key", "ts", "value")))
    b.set_bolt("windows", Ids(times=True).with_window(Duration.seconds(10), Duration.seconds(5))
               .with_timestamp_field("ts").with_lag(Duration.seconds(2))
               .with_late_tuple_stream("late")).global_grouping("events")
    b.set_bolt("windows-out", CaptureSink()).shuffle_grouping("windows")
    b.set_bolt("late-out", CaptureSink()).shuffle_grouping("windows", "late")
    return b.create_topology(), {}


def aggregate(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(EVENTS, Fields("id", "key", "ts", "value")))
    b.set_bolt("agg", WindowedAggregate(key="key", count=Agg.count(), total=Agg.sum("value"))
               .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
               .with_lag(Duration.seconds(2)).with_late_tuple_stream("late")
               ).fields_grouping("events", Fields("key"))
    b.set_bolt("agg-out", CaptureSink()).shuffle_grouping("agg")
    b.set_bolt("late-out", CaptureSink()).shuffle_grouping("agg", "late")
    return b.create_topology(), {}


def aggregate_sessions(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(SESSION_EVENTS, Fields("id", "key", "ts", "value")))
    b.set_bolt("sessions", WindowedAggregate(
        key="key", count=Agg.count(), total=Agg.sum("value"), mean=Agg.mean("value"),
        distinct=Agg.count_distinct("value"), top=Agg.top_k("value", 2))
               .with_session_window(Duration.seconds(5), Duration.seconds(6))
               .with_timestamp_field("ts").with_lag(Duration.seconds(10))
               .with_late_tuple_stream("late"), 2).fields_grouping("events", Fields("key"))
    b.set_bolt("sessions-out", CaptureSink()).shuffle_grouping("sessions")
    b.set_bolt("late-out", CaptureSink()).shuffle_grouping("sessions", "late")
    return b.create_topology(), {}


def stateful_windows(directory: str) -> Built:
    from windowed_bolts import CountingWindows

    b = TopologyBuilder()
    b.set_spout("events", ListSpout(EVENTS, Fields("id", "key", "ts", "value")))
    b.set_bolt("counting", CountingWindows().with_tumbling_window(Duration.seconds(10))
               .with_timestamp_field("ts"), 2).fields_grouping("events", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("counting")
    return b.create_topology(), {}


def retried_batch(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n")))
    b.set_bolt("flaky", FailsOnce(), 2).shuffle_grouping("ids")
    b.set_bolt("count", KeyCount(), 2).fields_grouping("flaky", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("count")
    return b.create_topology(), {"user.dir": directory, "kstorm.transaction.backoff.ms": 10}


def given_up_batch(directory: str) -> Built:
    topology, conf = retried_batch(directory)
    topology.components["flaky"].component.always = True
    return topology, {**conf, "kstorm.transaction.max.attempts": 2,
                      "kstorm.transaction.failure.policy": "dead-letter"}


def batch_and_committer(directory: str) -> Built:
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n")))
    b.set_bolt("partial", PartialCount(), 3).shuffle_grouping("ids")
    b.set_bolt("total", Total()).global_grouping("partial")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("total")
    return b.create_topology(), {}


def acking_failures(directory: str) -> Built:
    """At least once, a bolt fails every id divisible by 3: replayed once, then dead-lettered."""
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n"),
                                 retry=RetryPolicy(max_retries=1)))
    b.set_bolt("fails", Fails(), 2).shuffle_grouping("ids")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("fails")
    return b.create_topology(), {"topology.guarantee": "at-least-once"}


def list_replays(directory: str) -> Built:
    """At least once, a bolt fails some ListSpout tuples on their first attempt: they are
    replayed (same message ids) and counted by a stateful bolt, as if they never failed."""
    b = TopologyBuilder()
    b.set_spout("ids", ListSpout(IDS, Fields("id", "key", "n"), partitions=2))
    b.set_bolt("first", FailsNewOnce(), 2).shuffle_grouping("ids")
    b.set_bolt("count", KeyCount(), 2).fields_grouping("first", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("count")
    b.set_bolt("passed", CaptureSink()).shuffle_grouping("first")
    return b.create_topology(), {"topology.guarantee": "at-least-once", "user.dir": directory}


def free_form_failures(directory: str) -> Built:
    """At least once, a free-form spout (``next_tuple``, as ``run()`` polls it on both
    runtimes) whose tuples a bolt fails on their first attempt: the spout's ``fail`` runs and
    it re-emits them."""
    from spouts import FailFirst, ReliableNumbers

    b = TopologyBuilder()
    b.set_spout("numbers", ReliableNumbers(40, directory, per_call=4))
    b.set_bolt("work", FailFirst(directory, 5), 2).fields_grouping("numbers", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    return b.create_topology(), {"topology.guarantee": "at-least-once",
                                 "kstorm.spout.max.batch.tuples": 12}


TOPOLOGIES: dict[str, Callable[[str], Built]] = {
    f.__name__: f for f in (word_count, task_placement, streams, dead_letters, count_windows,
                            event_time_windows, aggregate, aggregate_sessions,
                            stateful_windows, retried_batch,
                            given_up_batch, batch_and_committer, acking_failures,
                            list_replays, free_form_failures)
}


def sinks_of(topology: Any) -> list[str]:
    """The topology's capture sinks."""
    return [c for c, spec in topology.components.items()
            if isinstance(spec.component, CaptureSink)]


def normalized(values: list[list[Any]]) -> list[str]:
    """Values in a comparable order (task scheduling orders them differently)."""
    return sorted(repr([_plain(v) for v in row]) for row in values)


def dead_letter_view(records: list[dict[str, Any]]) -> list[str]:
    """Dead letters by what they say (the traceback text differs between processes)."""
    return sorted(repr((r["component"], r["stream"], r["error_type"], r["values"],
                        r["message"].splitlines()[0] if r["message"] else None))
                  for r in records)


def _plain(value: Any) -> Any:
    if hasattr(value, "transaction_id"):
        return ("tx", value.transaction_id)
    return value


def kafka_acking(spout: Any, directory: str) -> Built:
    """At least once over a ``KafkaSpout``: failed tuples replayed (not in TOPOLOGIES: it
    needs a broker on Spark; ``test_conformance`` runs it with one)."""
    b = TopologyBuilder()
    b.set_spout("words", spout)
    b.set_bolt("work", FailsXOnce(), 2).shuffle_grouping("words")
    b.set_bolt("count", KeyCount(), 2).fields_grouping("work", Fields("word"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("count")
    return b.create_topology(), {"topology.guarantee": "at-least-once", "user.dir": directory}
