"""Transactional topologies (seed 002) for the integration tests, and a killable runner.

Components (importable by Spark's Python workers, so defined here and not in a test):

- :class:`BatchCount`: seed 002's partial count, a batch bolt: counts its batch's tuples,
  emits ``(id, count)`` in ``finish_batch``. With a ``fail_dir`` it raises
  ``FailedException`` on the first attempt of the txids in ``fail_txids`` (a marker file
  per txid remembers the first attempt across Python workers and processes), or on every
  attempt (``always``).
- :class:`UpdateGlobalCount`: seed 002's committer: sums the partial counts of a batch and
  emits ``("global", sum)`` in ``finish_batch``, for a RedisSink that adds it under the txid.
- :class:`Relay` and :class:`Recorder`: seed 002's C and D downstream of the committer B.
- :class:`KeyedCount`: per-word counts of a batch (word count over two stores).
- :class:`RangeSpout`: a coordinated ``ITransactionalSpout`` over a list of words (each
  transaction the next ``take``, split over the emitter tasks); its emitters write what
  they emitted and each ``cleanup_before`` call to a journal folder.

The runner, ``python -m tx_topology``, runs the global count over a
``MemoryTransactionalSpout`` (``--spout memory``, data from :func:`memory_data`) or a
``KafkaSpout`` (``--spout kafka``) or a coordinated :class:`RangeSpout` with two emitter
tasks (``--spout range``, words from :func:`range_words`, its journal beside the
checkpoint) into Redis with the continuous trigger and small
batches, and exits 0 once everything was counted (the stored count equals the expected
total; 2 if it passes it). The kill tests SIGKILL it and start it again.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

from _runner import count_reached, watch

from kstorm import Fields
from kstorm.errors import FailedException
from kstorm.transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    ICommitter,
    ITransactionalSpout,
    MemoryTransactionalSpout,
    TransactionalCoordinator,
    TransactionalEmitter,
    TransactionalTopologyBuilder,
)

log = logging.getLogger("tx_topology")
GLOBAL_KEY = "global"
PARTITIONS = 4


def memory_data(rows_per_partition: int = 400) -> dict[int, list[list[str]]]:
    """Deterministic words for the memory spout: partition p holds ``rows + 13 p`` rows."""
    return {p: [[f"w{(p * 7919 + i * 31) % 97}"] for i in range(rows_per_partition + 13 * p)]
            for p in range(PARTITIONS)}


class BatchCount(BaseBatchBolt):
    """Counts the tuples of its batch (seed 002's ``BatchCount``)."""

    def __init__(self, fail_dir: str | None = None, fail_txids: tuple[int, ...] = (),
                 always: bool = False) -> None:
        self.fail_dir, self.fail_txids, self.always = fail_dir, fail_txids, always

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.count = collector, id, 0
        self.task = context.task_index

    def execute(self, tuple_: Any) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        txid = self.id.transaction_id
        if self.fail_dir and txid in self.fail_txids and self.task == 0:
            marker = Path(self.fail_dir) / f"failed-{txid}"
            if self.always or not marker.exists():
                marker.write_text(f"attempt {self.id.attempt_id}\n")
                raise FailedException(f"first attempt of txid {txid} fails on purpose")
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "count"))


ORDER: list[tuple[str, int]] = []  # (component, txid) as finish_batch ran (driver)
ATTEMPTS: list[tuple[int, int]] = []  # (txid, attempt id) each committer instance saw


class UpdateGlobalCount(BaseTransactionalBolt, ICommitter):
    """Seed 002's committer: the batch's total, emitted once the batch commits."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.sum = collector, id, 0
        ATTEMPTS.append((id.transaction_id, id.attempt_id))

    def execute(self, tuple_: Any) -> None:
        self.sum += tuple_.get_integer_by_field("count")

    def finish_batch(self) -> None:
        ORDER.append(("B", self.id.transaction_id))
        self.collector.emit([GLOBAL_KEY, self.sum])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("key", "count"))


class Relay(BaseBatchBolt):
    """Seed 002's C: receives the committer's output, passes it on in ``finish_batch``."""

    name: ClassVar[str] = "C"

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.rows = collector, id, []

    def execute(self, tuple_: Any) -> None:
        self.rows.append(list(tuple_.values))

    def finish_batch(self) -> None:
        ORDER.append((self.name, self.id.transaction_id))
        for row in self.rows:
            self.collector.emit(row)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("key", "count"))


class Recorder(Relay):
    """Seed 002's D."""

    name: ClassVar[str] = "D"


class KeyedCount(BaseBatchBolt):
    """Per-word counts of one batch, emitted as ``(word, count)`` in ``finish_batch``."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.counts = collector, {}

    def execute(self, tuple_: Any) -> None:
        word = tuple_.get_string_by_field("word")
        self.counts[word] = self.counts.get(word, 0) + 1

    def finish_batch(self) -> None:
        for word, n in sorted(self.counts.items()):
            self.collector.emit([word, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "count"))


class _RangeCoordinator(TransactionalCoordinator):
    def __init__(self, size: int, take: int) -> None:
        self.size, self.take, self.next = size, take, 0

    def is_ready(self) -> bool:
        return self.next < self.size  # after a restart 0: the next meta says where it is

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        start = 0 if prev_metadata is None else prev_metadata["end"]
        self.next = min(start + self.take, self.size)
        return {"start": start, "end": self.next}


class _RangeEmitter(TransactionalEmitter):
    def __init__(self, words: list[str], journal: str, task: int, tasks: int) -> None:
        self.words, self.journal, self.task, self.tasks = words, journal, task, tasks
        self.cleaned: int | None = None

    def cleanup_before(self, txid: int) -> None:
        self.cleaned = txid

    def emit_batch(self, tx: Any, coordinator_meta: Any, collector: Any) -> None:
        rows = [i for i in range(coordinator_meta["start"], coordinator_meta["end"])
                if i % self.tasks == self.task]
        for i in rows:
            collector.emit([tx, self.words[i]])
        with open(Path(self.journal) / f"task-{self.task}", "a") as f:
            f.write(f"{tx.transaction_id} {self.cleaned} {len(rows)}\n")


class RangeSpout(ITransactionalSpout):
    """A coordinated transactional spout: each transaction takes the next ``take`` words."""

    def __init__(self, words: list[str], take: int, journal: str) -> None:
        self.words, self.take, self.journal = words, take, journal

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("tx", "word"))

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> _RangeCoordinator:
        return _RangeCoordinator(len(self.words), self.take)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> _RangeEmitter:
        return _RangeEmitter(self.words, self.journal, context.task_index, context.num_tasks)


def global_count(spout: Any, redis_url: str, prefix: str, *, topology_id: str = "global-count",
                 partial_tasks: int = 3, fail_dir: str | None = None,
                 fail_txids: tuple[int, ...] = (), mode: str = "transactional",
                 downstream: bool = False, always_fail: bool = False,
                 spout_tasks: int = 1) -> Any:
    """Seed 002's TransactionalGlobalCount, its total stored at ``<prefix>:global``.

    ``downstream``: B's output goes through C and D (seed 002's A -> B -> C -> D) first.
    """
    from sinks.redis import RedisConfig, RedisSink

    builder = TransactionalTopologyBuilder(topology_id, "spout", spout, spout_tasks)
    builder.set_bolt("partial-count", BatchCount(fail_dir, fail_txids, always_fail),
                     partial_tasks).shuffle_grouping("spout")
    builder.set_committer_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    last = "sum"
    if downstream:
        builder.set_bolt("C", Relay()).global_grouping("sum")
        builder.set_bolt("D", Recorder()).global_grouping("C")
        last = "D"
    sink = RedisSink(RedisConfig.from_url(redis_url), key=prefix + ":{key}", value="count",
                     merge="add", mode=mode)  # type: ignore[arg-type]
    builder.set_bolt("store", sink).shuffle_grouping(last)
    return builder.build_topology()


# -- the runner ------------------------------------------------------------------------------


def range_words(rows: int) -> list[str]:
    """Deterministic words for the coordinated :class:`RangeSpout` (``--spout range``)."""
    return [f"w{(i * 31) % 97}" for i in range(rows)]


def _spout(args: argparse.Namespace) -> Any:
    if args.spout == "memory":
        return MemoryTransactionalSpout(memory_data(args.rows), Fields("word"),
                                        args.max_per_partition)
    if args.spout == "range":
        journal = Path(args.checkpoint).parent / f"{args.name}-journal"
        journal.mkdir(parents=True, exist_ok=True)
        return RangeSpout(range_words(args.rows), args.max_per_partition * PARTITIONS,
                          str(journal))
    from kstorm import KafkaSpout
    from serdes import StringSerde

    return KafkaSpout(args.topic, value_serde=StringSerde(), max_offsets_per_batch=
                      args.max_per_partition * PARTITIONS, group_id=f"{args.name}-group")


def expected_total(args: argparse.Namespace) -> int:
    """How many tuples the spout emits in all."""
    if args.spout == "memory":
        return sum(len(rows) for rows in memory_data(args.rows).values())
    if args.spout == "range":
        return len(range_words(args.rows))
    return args.expected


def run(args: argparse.Namespace) -> int:
    """Run until the stored global count reaches the expected total (0), or passes it (2)."""
    import redis

    from kstorm import submit_topology

    expected = expected_total(args)
    conf = {"kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": 100,
            "kstorm.spark.master": "local[2]", "kstorm.shuffle.partitions": 2}
    if args.bootstrap:
        conf["kafka.bootstrap.servers"] = args.bootstrap
    topology = global_count(_spout(args), args.redis_url, args.name, topology_id=args.name,
                            spout_tasks=2 if args.spout == "range" else 1)
    handle = submit_topology(args.name, conf, topology)
    client = redis.Redis.from_url(args.redis_url)

    def counted() -> int | None:
        raw = client.get(f"{args.name}:{GLOBAL_KEY}")
        return count_reached(0 if raw is None else int(raw), expected)

    return watch(handle, "tx", counted, args.timeout, retry_on=(redis.RedisError,))


def main(argv: list[str] | None = None) -> int:
    """``python -m tx_topology --spout memory|kafka|range --redis-url U --checkpoint D``..."""
    parser = argparse.ArgumentParser(prog="tx_topology")
    parser.add_argument("--spout", choices=("memory", "kafka", "range"), default="memory")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--topic", default=None)
    parser.add_argument("--expected", type=int, default=0, help="records in --topic")
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--max-per-partition", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300.0)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
