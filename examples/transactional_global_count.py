"""Seed 002's ``TransactionalGlobalCount``: count every tuple of a stream, exactly once.

A ``MemoryTransactionalSpout`` emits batches of at most ``PARTITION_TAKE_PER_BATCH`` words
per partition; ``BatchCount`` (a batch bolt, 3 tasks) counts its part of each batch;
``UpdateGlobalCount`` (a committer) adds the partial counts up in the ordered commit phase
and emits the batch's total; the exactly-once ``RedisSink`` adds it to ``global-count:total``
under the transaction's id, so a replayed transaction is never counted twice.

Run it with one command (an embedded ``redis-server`` unless ``REDIS_URL`` is set)::

    python -m examples.transactional_global_count

It prints each committed transaction and checks the stored total against the data.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from kstorm import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    Fields,
    ICommitter,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.transactional import BatchOutputCollector, TransactionAttempt
from kstorm.tuple import Tuple
from sinks.redis import RedisConfig, RedisSink

PARTITION_TAKE_PER_BATCH = 3
DATA = {
    0: [["cat"], ["dog"], ["chicken"], ["cat"], ["dog"], ["apple"]],
    1: [["cat"], ["dog"], ["apple"], ["banana"]],
    2: [["cat"], ["cat"], ["cat"], ["cat"], ["cat"], ["dog"], ["dog"], ["dog"], ["dog"]],
}
KEY = "global-count:total"


class BatchCount(BaseBatchBolt):
    """Counts the tuples of one batch (a new instance per batch and task)."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: BatchOutputCollector, id: TransactionAttempt) -> None:  # noqa: A002
        """A new instance for the batch ``id``."""
        self.collector, self.id, self.count = collector, id, 0

    def execute(self, tuple_: Tuple) -> None:
        """A new instance for the batch ``id``."""
        self.count += 1

    def finish_batch(self) -> None:
        """The task has its whole batch."""
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The output fields."""
        declarer.declare(Fields("id", "count"))


class UpdateGlobalCount(BaseTransactionalBolt, ICommitter):
    """Sums a batch's partial counts; ``finish_batch`` runs in txid order, in the commit."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: BatchOutputCollector, id: TransactionAttempt) -> None:  # noqa: A002
        """A new instance for the batch ``id``."""
        self.collector, self.id, self.sum = collector, id, 0

    def execute(self, tuple_: Tuple) -> None:
        """A new instance for the batch ``id``."""
        self.sum += tuple_.get_integer_by_field("count")

    def finish_batch(self) -> None:
        """The task has its whole batch."""
        print(f"txid {self.id.transaction_id}: +{self.sum}", flush=True)
        self.collector.emit([KEY, self.sum])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The output fields."""
        declarer.declare(Fields("key", "count"))


def topology(redis_url: str | None = None) -> TransactionalTopologyBuilder:
    """The topology (``kstorm run examples.transactional_global_count:topology``)."""
    url = redis_url or os.environ.get("REDIS_URL", "redis://localhost:6379/0")
    spout = MemoryTransactionalSpout(DATA, Fields("word"), PARTITION_TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder("global-count", "spout", spout)
    builder.set_bolt("partial-count", BatchCount(), 3).shuffle_grouping("spout")
    builder.set_committer_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(url), key="{key}", value="count",
                                        merge="add", mode="transactional")
                     ).shuffle_grouping("sum")
    return builder


def main() -> int:
    """Run the topology until the spout is drained; 0 if the stored total is right."""
    import contextlib

    import redis

    from kstorm import submit_topology
    from kstorm.embedded import EmbeddedRedis

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with contextlib.ExitStack() as stack:
        url = os.environ.get("REDIS_URL") or stack.enter_context(EmbeddedRedis()).url
        checkpoint = stack.enter_context(tempfile.TemporaryDirectory(prefix="kstorm-gc-"))
        handle = submit_topology("global-count", {"kstorm.trigger": "available-now",
                                                  "kstorm.checkpoint.dir": checkpoint},
                                 topology(url).build_topology())
        handle.await_termination()
        total = int(redis.Redis.from_url(url).get(KEY) or 0)
        expected = sum(len(rows) for rows in DATA.values())
        print(f"{KEY} = {total} (expected {expected})")
        return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
