"""A transactional word count over Kafka that updates two Redis stores in one transaction.

Sentences on the topic ``sentences`` (one per record) are split into words; per batch,
``PartialCounts`` (a batch bolt, fields-grouped by word) counts each word of its share, and
two exactly-once Redis sinks add the counts under the batch's txid:

- ``word-count:<word>``: how often each word was seen;
- ``word-count:by-length`` (a hash, field = word length): how many words of each length.

Both sinks are committers of the same transaction (the Spark micro-batch): each records the
txid with its values in one atomic step, so a batch replayed after a crash between the two
commits is skipped by the one that has it and applied by the other -- both stay exact.

Run it with one command (an embedded broker and ``redis-server``; ``KSTORM_BOOTSTRAP_SERVERS``
and ``REDIS_URL`` point it at real ones)::

    python -m examples.transactional_word_count

It produces a few thousand sentences, runs until they are counted, and checks both stores.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile
from collections import Counter
from typing import Any

from kstorm import (
    BaseBasicBolt,
    BaseBatchBolt,
    Fields,
    KafkaSpout,
    TransactionalTopologyBuilder,
)
from kstorm.bolt import BasicOutputCollector
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.transactional import BatchOutputCollector
from kstorm.tuple import Tuple
from serdes import StringSerde
from sinks.redis import RedisConfig, RedisSink

TOPIC = "sentences"
WORDS = ["storm", "spark", "kafka", "redis", "stream", "batch", "exactly", "once", "tuple",
         "bolt", "spout", "window"]


class Split(BaseBasicBolt):
    """One tuple per word of a sentence."""

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """One tuple per word of the sentence."""
        for word in tuple_.get_string_by_field("value").split():
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The output fields."""
        declarer.declare(Fields("word"))


class PartialCounts(BaseBatchBolt):
    """Per batch: each word's count, and each word length's, emitted on two streams."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: BatchOutputCollector, id: Any) -> None:  # noqa: A002
        """A new instance for the batch ``id``."""
        self.collector, self.words = collector, Counter()

    def execute(self, tuple_: Tuple) -> None:
        """A new instance for the batch ``id``."""
        self.words[tuple_.get_string_by_field("word")] += 1

    def finish_batch(self) -> None:
        """The task has its whole batch."""
        lengths: Counter[int] = Counter()
        for word, n in sorted(self.words.items()):
            self.collector.emit([word, n])
            lengths[len(word)] += n
        for length, n in sorted(lengths.items()):
            self.collector.emit([length, n], stream="lengths")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The output fields."""
        declarer.declare(Fields("word", "count"))
        declarer.declare_stream("lengths", Fields("length", "count"))


def topology(redis_url: str | None = None, topic: str = TOPIC) -> TransactionalTopologyBuilder:
    """The topology (``kstorm run examples.transactional_word_count:topology``)."""
    redis = RedisConfig.from_url(redis_url or os.environ.get("REDIS_URL",
                                                             "redis://localhost:6379/0"))
    builder = TransactionalTopologyBuilder("word-count", "sentences",
                                           KafkaSpout(topic, value_serde=StringSerde()))
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", PartialCounts(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("words", RedisSink(redis, key="word-count:{word}", value="count",
                                        merge="add", mode="transactional", sink_id="words")
                     ).shuffle_grouping("count")
    builder.set_bolt("lengths", RedisSink(redis, key="word-count:by-length", field="{length}",
                                          value="count", merge="add", mode="transactional",
                                          sink_id="lengths")
                     ).shuffle_grouping("count", "lengths")
    return builder


def sentences(n: int, seed: int = 2) -> list[str]:
    """``n`` deterministic sentences of 3-8 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(n)]


def main() -> int:
    """Produce sentences, count them, check both stores; 0 if both are exact."""
    import redis

    from kstorm import submit_topology
    from kstorm._kafka.client import create_topic
    from kstorm.embedded import EmbeddedKafka, EmbeddedRedis

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with contextlib.ExitStack() as stack:
        bootstrap = (os.environ.get("KSTORM_BOOTSTRAP_SERVERS")
                     or stack.enter_context(EmbeddedKafka()).bootstrap_servers)
        url = os.environ.get("REDIS_URL") or stack.enter_context(EmbeddedRedis()).url
        topic = f"{TOPIC}-{random.randrange(1 << 30):x}"
        create_topic(bootstrap, topic, 2)
        text = sentences(3000)
        _produce(bootstrap, topic, text)
        checkpoint = stack.enter_context(tempfile.TemporaryDirectory(prefix="kstorm-wc-"))
        handle = submit_topology("word-count", {
            "kafka.bootstrap.servers": bootstrap, "kstorm.trigger": "available-now",
            "kstorm.checkpoint.dir": checkpoint}, topology(url, topic).build_topology())
        handle.await_termination()
        client = redis.Redis.from_url(url, decode_responses=True)
        words = Counter(w for s in text for w in s.split())
        stored = {w: int(client.get(f"word-count:{w}") or 0) for w in words}
        lengths = Counter()
        for w, n in words.items():
            lengths[str(len(w))] += n
        by_length = {k: int(v) for k, v in client.hgetall("word-count:by-length").items()}
        ok = stored == dict(words) and by_length == dict(lengths)
        print(f"{sum(words.values())} words in {len(text)} sentences; per word "
              f"{'exact' if stored == dict(words) else 'WRONG'}, per length "
              f"{'exact' if by_length == dict(lengths) else 'WRONG'}: {by_length}")
        return 0 if ok else 1


def _produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    from confluent_kafka import Producer

    from kstorm._kafka.client import client_config

    producer = Producer(client_config(bootstrap))
    for i, line in enumerate(lines):
        producer.produce(topic, line.encode(), partition=i % 2)
        producer.poll(0)
    if producer.flush(30):
        msg = f"could not produce to {topic} at {bootstrap}"
        raise SystemExit(msg)


if __name__ == "__main__":
    sys.exit(main())
