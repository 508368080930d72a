"""Bolts and topologies shared by the Kafka integration tests and the throughput benchmark.

Spark's Python workers unpickle bolts by reference, so they live in this importable module
(``integration_tests/`` is on the workers' ``PYTHONPATH``; see ``conftest.py``'s ``spark``).

The word count is Storm's canonical topology::

    sentences (KafkaSpout) --shuffle--> split (SplitSentence)
              --fields("word")--> count (WordCount, stateful) --fields("word")--> out (sink)

Example:
    >>> spout = KafkaSpout("lines", value_serde=JsonSerde({"id": int, "sentence": str}))
    ... # doctest: +SKIP
    >>> topology = word_count(spout, CaptureSink())          # doctest: +SKIP
    >>> len(sentence_records(3)), sorted(json.loads(sentence_records(1)[0]))
    (3, ['id', 'sentence'])
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from kstorm import BaseBasicBolt, BaseStatefulBolt, Fields, TopologyBuilder
from kstorm.bolt import BasicOutputCollector, OutputCollector
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.sink import BaseSink, SinkBatch
from kstorm.state import KeyValueState
from kstorm.topology import StormTopology
from kstorm.tuple import Tuple
from serdes.base import DecodeResult, Serde

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima")


def sentence_records(n: int, *, seed: int = 7, start: int = 0, words: int = 8,
                     vocabulary: Sequence[str] = WORDS, zipf: float = 0.0) -> list[str]:
    """``n`` JSON records ``{"id": i, "sentence": "..."}`` of ``words`` +- 3 words each.

    Words are drawn from ``vocabulary``, uniformly, or with weight ``1 / rank**zipf``
    (``zipf=1.0`` is close to word frequencies in text).
    """
    rng = random.Random(f"{seed}:{start}")
    cum = list(itertools.accumulate(1 / (rank + 1) ** zipf for rank in range(len(vocabulary))))
    return [json.dumps({"id": start + i,
                        "sentence": " ".join(rng.choices(vocabulary, cum_weights=cum,
                                                         k=rng.randint(words - 3, words + 3)))})
            for i in range(n)]


def synthetic_vocabulary(size: int) -> list[str]:
    """``size`` distinct words: ``w0``, ``w1``, ... (rank order for ``zipf``)."""
    return [f"w{i}" for i in range(size)]


class SplitSentence(BaseBasicBolt):
    """One ``(word,)`` tuple per whitespace-separated word of the ``field`` string field."""

    def __init__(self, field: str = "sentence") -> None:
        self.field = field

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``word``."""
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Split the sentence."""
        for word in tuple_.get_string_by_field(self.field).split():
            collector.emit([word])


class WordCount(BaseStatefulBolt):
    """Counts words in checkpointed state; emits ``(word, running count)`` per input tuple."""

    def init_state(self, state: KeyValueState) -> None:
        """The task's counts (restored from the last committed batch)."""
        self.state = state

    def prepare(self, conf: dict[str, Any], context: TopologyContext,
                collector: OutputCollector) -> None:
        """Keep the collector."""
        self.collector = collector

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``word``, ``count``."""
        declarer.declare(Fields("word", "count"))

    def execute(self, tuple_: Tuple) -> None:
        """Increment the word's count and emit the new total."""
        word = tuple_.get_value_by_field("word")
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        self.collector.emit([word, count], anchors=tuple_)
        self.collector.ack(tuple_)


class LatestCounts(BaseSink):
    """A sink keeping the highest ``count`` per ``word`` and when each batch committed.

    A light stand-in for an upsert store (the benchmark's sink: CaptureSink would keep
    every tuple in driver memory).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.counts: dict[str, int] = {}
        self.commits: list[tuple[int, int, float]] = []  # (batch id, tuples, clock())

    def commit(self, batch: SinkBatch) -> None:
        """Fold the batch's ``(word, count)`` tuples in (a replay folds to the same)."""
        counts = self.counts
        for tuple_ in batch.tuples:
            word, count = tuple_.values
            if count > counts.get(word, 0):
                counts[word] = count
        self.commits.append((batch.batch_id, batch.size, self.clock()))


def word_count(spout: Any, sink: BaseSink, *, split_tasks: int = 2,
               count_tasks: int = 3) -> StormTopology:
    """The word-count topology over ``spout`` (fields ``sentence``...) into ``sink``."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout)
    builder.set_bolt("split", SplitSentence(), split_tasks).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), count_tasks).fields_grouping("split", Fields("word"))
    builder.set_bolt("out", sink).fields_grouping("count", Fields("word"))
    return builder.create_topology()


# -- a test seam: partitions that appear later --------------------------------------------
#
# tansu (the embedded broker) has no CreatePartitions API, so a topic cannot really grow.
# A topic is created with all its partitions and some are hidden from the spout's metadata
# until the test reveals them. The spout plans batches in a Python process Spark starts for
# the stream reader, so the hiding has to happen in that process: unpickling a
# ``GatedSerde`` (which the spout carries to every process that plans or reads batches)
# wraps ``kstorm._kafka.partitions_of`` there with a filter that reads the gate file.


class PartitionGate:
    """A JSON file ``{topic: [hidden partition, ...]}`` every gated process reads."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def hide(self, topic: str, partitions: Sequence[int]) -> None:
        """Hide ``partitions`` of ``topic`` (replaces what was hidden for it)."""
        hidden = self.hidden()
        hidden[topic] = sorted(partitions)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(hidden))
        tmp.replace(self.path)  # atomic: readers see the old or the new file

    def reveal(self, topic: str) -> None:
        """Show every partition of ``topic`` again."""
        self.hide(topic, [])

    def hidden(self) -> dict[str, list[int]]:
        """What is hidden now."""
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}


_GATES: set[str] = set()


def _install_gate(path: str) -> None:
    """Filter ``kstorm._kafka.partitions_of`` through the gate at ``path`` in this process."""
    from kstorm._kafka import client as _kafka

    if path in _GATES:
        return
    _GATES.add(path)
    if getattr(_kafka.partitions_of, "gated", False):
        return
    real = _kafka.partitions_of

    def partitions_of(*args: Any, **kwargs: Any) -> list[tuple[str, int]]:
        hidden: dict[str, set[int]] = {}
        for gate in _GATES:
            for topic, parts in PartitionGate(Path(gate)).hidden().items():
                hidden.setdefault(topic, set()).update(parts)
        return [(t, p) for t, p in real(*args, **kwargs) if p not in hidden.get(t, ())]

    partitions_of.gated = True  # type: ignore[attr-defined]
    _kafka.partitions_of = partitions_of


class GatedSerde:
    """``inner``'s behaviour; where it is unpickled, the gate at ``gate`` hides partitions."""

    def __init__(self, inner: Serde, gate: PartitionGate) -> None:
        self.inner = inner
        self.gate = str(gate.path)

    def __getstate__(self) -> dict[str, Any]:
        return {"inner": self.inner, "gate": self.gate}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.inner, self.gate = state["inner"], state["gate"]
        _install_gate(self.gate)

    def fields(self) -> list[str]:
        """The inner serde's fields."""
        return self.inner.fields()

    def arrow_schema(self) -> pa.Schema:
        """The inner serde's schema."""
        return self.inner.arrow_schema()

    def deserialize(self, data: bytes | None) -> tuple[Any, ...]:
        """One record, by the inner serde."""
        return self.inner.deserialize(data)

    def deserialize_batch(self, values: Sequence[bytes | None]) -> DecodeResult:
        """Many records, by the inner serde."""
        return self.inner.deserialize_batch(values)

    def serialize(self, values: Sequence[Any]) -> bytes:
        """Field values to bytes, by the inner serde."""
        return self.inner.serialize(values)
