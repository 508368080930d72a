"""storm-starter's ``WordCountTopology.java`` (and ``spout/RandomSentenceSpout.java``).

``RandomSentenceSpout`` (5 tasks) -> ``split`` (8 tasks, shuffle) -> ``count`` (12 tasks,
fields grouping on ``word``); ``WordCount`` emits each word with its running count.

Changes beyond syntax:

- ``SplitSentence`` is a Python ``BaseBasicBolt`` doing what Storm's multilang
  ``splitsentence.py`` does (``tup.values[0].split(" ")``, one ``[word]`` each): Storm's is a
  ``ShellBolt`` running that script in a subprocess; kstorm has no multilang protocol, and
  its bolts are Python already.
- ``RandomSentenceSpout`` takes ``limit``, ``seed`` and ``sleep_ms`` (Storm's emits a random
  sentence every 100 ms forever, from ``new Random()``): each task seeds ``seed`` plus its
  index, for a finite, repeatable run; the defaults keep Storm's behaviour.
- ``ConfigurableTopology``'s ``run(args)`` is :func:`main`; its local mode's
  ``conf.setMaxTaskParallelism(3)`` is ``set_max_task_parallelism(3)`` on each component's
  declarer, which is the same cap: kstorm refuses the topology-wide key
  (``topology.max.task.parallelism``) and asks for it per component.
- Local mode runs on kstorm's in-process ``TopologyTestDriver`` (for ``LocalCluster`` with a
  10 s ttl: 20 sentences a spout task) and prints the counts.

Not a change, but it runs differently: kstorm runs a ``next_tuple`` spout as one
instance whatever its parallelism (``docs/limits.md``), so ``spout``'s 5 tasks emit what one
task would; the bolts' tasks are as written.

Run: ``python -m examples.storm_starter.word_count``.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from kstorm import BaseBasicBolt, BaseRichSpout, Config, Fields, TopologyBuilder, Values
from kstorm.testing import TopologyTestDriver

SENTENCES = ("the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs",
             "i am at two with nature")


class RandomSentenceSpout(BaseRichSpout):
    """One of five sentences at random every 100 ms, on a field Storm names ``word``."""

    def __init__(self, limit: int | None = None, seed: int | None = None,
                 sleep_ms: int = 100) -> None:
        self.limit, self.seed, self.sleep_ms = limit, seed, sleep_ms

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector; a generator seeded per task."""
        self._collector = collector
        self._rand = random.Random(None if self.seed is None  # noqa: S311 - sample data
                                   else self.seed + context.task_index)
        self._emitted = 0

    def next_tuple(self) -> None:
        """Sleep, then emit a random sentence (unanchored: no message id)."""
        if self.limit is not None and self._emitted >= self.limit:
            return
        self._emitted += 1
        time.sleep(self.sleep_ms / 1000)
        sentences = [self.sentence(s) for s in SENTENCES]
        sentence = sentences[self._rand.randrange(len(sentences))]
        self._collector.emit(Values(sentence))

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
    """``splitsentence.py``'s ``SplitSentenceBolt`` (a ``ShellBolt`` in Storm)."""

    def execute(self, tup: Any, collector: Any) -> None:
        """One ``[word]`` per word split on single spaces."""
        words = tup.values[0].split(" ")
        for word in words:
            collector.emit([word])

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


def build(limit: int | None = None, seed: int | None = None, sleep_ms: int = 100,
          is_local: bool = False) -> TopologyBuilder:
    """``run``'s topology (``is_local``: the local mode's parallelism cap of 3)."""
    builder = TopologyBuilder()

    spout = builder.set_spout("spout", RandomSentenceSpout(limit, seed, sleep_ms), 5)

    split = builder.set_bolt("split", SplitSentence(), 8).shuffle_grouping("spout")
    count = builder.set_bolt("count", WordCount(), 12).fields_grouping("split", Fields("word"))

    if is_local:
        for declarer in (spout, split, count):
            declarer.set_max_task_parallelism(3)
    return builder


def main(args: list[str] | None = None) -> int:
    """``run(args)``: submit as ``args[0]``, or run locally and print the counts."""
    conf = Config()
    conf.set_debug(True)

    topology_name = "word-count"
    is_local = not args
    if is_local:
        with TopologyTestDriver(build(limit=20, is_local=True).create_topology(), conf,
                                name=topology_name) as cluster:
            cluster.run()
            for word, count in cluster.output("count"):
                print(word, count)
        return 0
    from kstorm import submit_topology

    conf.set_num_workers(3)
    topology_name = args[0]
    submit_topology(topology_name, conf, build().create_topology()).await_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
