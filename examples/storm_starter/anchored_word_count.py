r"""storm-starter's ``AnchoredWordCount.java`` and Storm's *Guaranteeing message processing*.

Two reliable word counts, run at least once (``topology.guarantee``):

- :func:`anchored_word_count`: ``AnchoredWordCount.java`` (``ReliableWordCount.java`` is
  the same code under another class name). Its ``RandomSentenceSpout`` emits each sentence
  with a message id (a random UUID), ``SplitSentence`` and ``WordCount`` are
  ``BaseBasicBolt`` bolts: every emit is anchored to the input, which is acked when
  ``execute`` returns.
- :func:`guaranteed_word_count`: the same counting with the guide's explicit
  ``SplitSentence`` (a ``BaseRichBolt``: ``_collector.emit(tuple, new Values(word))`` for
  each word, then ``_collector.ack(tuple)``) -- the guide's own example, so a word tuple failed
  downstream fails its sentence at the spout.

Changes beyond syntax:

- The spout takes ``limit``, ``seed`` and ``sleep_ms`` (Storm's sleeps 10 ms and picks from
  ``new Random()`` forever), and its message ids come from that seeded generator instead
  of ``UUID.randomUUID()``: a finite, repeatable run. Defaults keep Storm's behaviour
  except the ids (any unique id will do: Storm only hands them back to ``ack``/``fail``).
- ``sentence.split("\\s+")`` is ``re.split(r"\s+", sentence)`` (Java drops trailing empty
  strings, Python keeps them; the five sentences have none).
- ``conf.setMaxTaskParallelism(3)`` is ``set_max_task_parallelism(3)`` on each declarer
  (kstorm caps parallelism per component only); ``topology.guarantee`` is set to
  at-least-once, which is Storm's only mode with ackers (kstorm's default is exactly once).
- ``main`` runs on kstorm's in-process ``TopologyTestDriver`` for ``LocalCluster``
  (100 sentences a spout task instead of 10 minutes).
- The guide's topology reads a ``KestrelSpout``; here it reads the same spout as
  ``AnchoredWordCount`` (no Kestrel in kstorm; Kafka is its queue).

Not a change, but it runs differently: kstorm runs a ``next_tuple`` spout as one
instance whatever its parallelism (``docs/limits.md``), so ``spout``'s 4 tasks emit what one
task would; the bolts' tasks are as written.

Run: ``python -m examples.storm_starter.anchored_word_count``.
"""

from __future__ import annotations

import random
import re
import sys
import time
from typing import Any

from kstorm import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseRichSpout,
    Config,
    Fields,
    TopologyBuilder,
    Values,
)
from kstorm.testing import TopologyTestDriver

SENTENCES = ("the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs",
             "i am at two with nature")


class RandomSentenceSpout(BaseRichSpout):
    """A random sentence every 10 ms, with a message id so that its tree is tracked."""

    def __init__(self, limit: int | None = None, seed: int | None = None,
                 sleep_ms: int = 10) -> None:
        self.limit, self.seed, self.sleep_ms = limit, seed, sleep_ms

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector; a generator seeded per task."""
        self._collector = collector
        self._rand = random.Random(None if self.seed is None  # noqa: S311 - sample data
                                   else self.seed + context.task_index)
        self._emitted = 0

    def next_tuple(self) -> None:
        """Sleep, then emit a random sentence with a message id."""
        if self.limit is not None and self._emitted >= self.limit:
            return
        self._emitted += 1
        time.sleep(self.sleep_ms / 1000)
        sentences = [self.sentence(s) for s in SENTENCES]
        sentence = sentences[self._rand.randrange(len(sentences))]

        self._collector.emit(Values(sentence), f"{self._rand.getrandbits(128):032x}")

    def sentence(self, input: str) -> str:  # noqa: A002 - Storm's parameter name
        """The sentence as emitted (a subclass may decorate it)."""
        return input

    def ack(self, id: Any) -> None:  # noqa: A002 - Storm's parameter name
        """Nothing (as Storm's)."""

    def fail(self, id: Any) -> None:  # noqa: A002 - Storm's parameter name
        """Nothing (as Storm's)."""

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``word`` (Storm's name for the sentence)."""
        declarer.declare(Fields("word"))


class SplitSentence(BaseBasicBolt):
    """``AnchoredWordCount.SplitSentence``: ``(word, 1)`` per word, anchored for us."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002 - Storm's name
        """Split on whitespace; emit each word with 1."""
        sentence = tuple.get_string(0)
        for word in re.split(r"\s+", sentence):
            collector.emit(Values(word, 1))

    def declare_output_fields(self, declarer: Any) -> None:
        """``word`` and ``count``."""
        declarer.declare(Fields("word", "count"))


class AnchoringSplitSentence(BaseRichBolt):
    """The guide's ``SplitSentence``: each word anchored to the sentence, then an ack."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self._collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002 - Storm's parameter name
        """Emit each word anchored to ``tuple``, then ack ``tuple``."""
        sentence = tuple.get_string(0)
        for word in sentence.split(" "):
            self._collector.emit(tuple, Values(word))
        self._collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``word``."""
        declarer.declare(Fields("word"))


class WordCount(BaseBasicBolt):
    """Counts each word and emits it with its count so far."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002 - Storm's name
        """One more of ``word``; emit ``(word, count)``."""
        word = tuple.get_string(0)
        count = self.counts.get(word)
        if count is None:
            count = 0
        count += 1
        self.counts[word] = count
        collector.emit(Values(word, count))

    def declare_output_fields(self, declarer: Any) -> None:
        """``word`` and ``count``."""
        declarer.declare(Fields("word", "count"))


def anchored_word_count(spout: BaseRichSpout | None = None) -> TopologyBuilder:
    """``AnchoredWordCount.main``'s topology (``spout``: default a sentence spout)."""
    builder = TopologyBuilder()

    declarers = [builder.set_spout("spout", spout or RandomSentenceSpout(), 4)]

    declarers.append(builder.set_bolt("split", SplitSentence(), 4).shuffle_grouping("spout"))
    declarers.append(builder.set_bolt("count", WordCount(), 4).fields_grouping(
        "split", Fields("word")))

    for declarer in declarers:  # conf.setMaxTaskParallelism(3)
        declarer.set_max_task_parallelism(3)
    return builder


def guaranteed_word_count(spout: BaseRichSpout | None = None,
                          count: BaseBasicBolt | None = None) -> TopologyBuilder:
    """The guide's topology: ``split`` (10 tasks) anchors, ``count`` (20 tasks) counts."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout or RandomSentenceSpout())
    builder.set_bolt("split", AnchoringSplitSentence(), 10) \
        .shuffle_grouping("sentences")
    builder.set_bolt("count", count or WordCount(), 20) \
        .fields_grouping("split", Fields("word"))
    return builder


def conf() -> Config:
    """Storm's defaults for these examples: ackers on (kstorm: at least once)."""
    config = Config()
    config.set_guarantee("at-least-once")
    return config


def main(args: list[str] | None = None) -> int:
    """Run ``AnchoredWordCount`` locally and print the counts."""
    topology = anchored_word_count(RandomSentenceSpout(limit=100)).create_topology()
    with TopologyTestDriver(topology, conf(), name="word-count") as cluster:
        cluster.run()
        for word, count in cluster.output("count"):
            print(word, count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
