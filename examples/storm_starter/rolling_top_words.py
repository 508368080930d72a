"""storm-starter's ``RollingTopWords.java`` and its bolts, ported as written.

Ports ``RollingTopWords.java`` and ``bolt/RollingCountBolt.java``,
``bolt/AbstractRankerBolt.java``, ``bolt/IntermediateRankingsBolt.java``,
``bolt/TotalRankingsBolt.java`` (their helpers are in :mod:`.tools`).

``TestWordSpout`` (5 tasks) -> ``counter`` (``RollingCountBolt(9, 3)``, 4 tasks, fields
grouping on ``word``): a 9 s window sliding every 3 s, advanced by tick tuples every 3 s,
emitting ``(obj, count, actualWindowLengthInSeconds)`` for each word of the window ->
``intermediateRanker`` (``IntermediateRankingsBolt(5)``, 4 tasks, fields grouping on
``obj``) -> ``finalRanker`` (``TotalRankingsBolt(5)``, global grouping); both rankers emit
their ``Rankings`` on their own ticks (every 2 s).

Changes beyond syntax:

- ``new TestWordSpout()`` takes ``limit`` and ``seed`` (a finite, repeatable run;
  ``None`` keeps Storm's endless random words).
- ``AbstractRankerBolt``'s package-private abstract ``getLogger()`` is a class attribute
  ``LOG``; ``updateRankingsWithTuple`` is :meth:`AbstractRankerBolt.update_rankings_with_tuple`.
- ``ConfigurableTopology``'s ``run(args)`` is :func:`main`, which runs on kstorm's
  in-process ``TopologyTestDriver``, moving its clock 1 s per batch so that ticks fire
  (Storm's local cluster runs until killed).
- The rolling count's ``actualWindowLengthInSeconds`` is measured on the wall clock (see
  :mod:`.tools`: kstorm has no simulated ``Time``), so under the test driver it is not the
  driver's time.

Not a change, but it runs differently: kstorm runs a ``next_tuple`` spout as one
instance whatever its parallelism (``docs/limits.md``), so ``wordGenerator``'s 5 tasks emit what one
task would; the bolts' tasks are as written.

Run: ``python -m examples.storm_starter.rolling_top_words``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from examples.storm_starter.tools import (
    NthLastModifiedTimeTracker,
    RankableObjectWithFields,
    Rankings,
    SlidingWindowCounter,
)
from kstorm import BaseBasicBolt, BaseRichBolt, Config, Fields, TopologyBuilder, TupleUtils, Values
from kstorm.testing import TestWordSpout, TopologyTestDriver

TOP_N = 5


class RollingCountBolt(BaseRichBolt):
    """Rolling counts of incoming objects: a sliding window of counts, emitted on ticks.

    Configured by the window length and the emit frequency in seconds: the bolt emits the
    latest window's count of each object every ``emit_frequency_in_seconds``, with the
    window's actual length.
    """

    LOG = logging.getLogger("examples.storm_starter.RollingCountBolt")
    NUM_WINDOW_CHUNKS = 5
    DEFAULT_SLIDING_WINDOW_IN_SECONDS = NUM_WINDOW_CHUNKS * 60
    DEFAULT_EMIT_FREQUENCY_IN_SECONDS = DEFAULT_SLIDING_WINDOW_IN_SECONDS // NUM_WINDOW_CHUNKS
    WINDOW_LENGTH_WARNING_TEMPLATE = (
        "Actual window length is %d seconds when it should be %d seconds"
        " (you can safely ignore this warning during the startup phase)")

    def __init__(self, window_length_in_seconds: int = DEFAULT_SLIDING_WINDOW_IN_SECONDS,
                 emit_frequency_in_seconds: int = DEFAULT_EMIT_FREQUENCY_IN_SECONDS) -> None:
        self.window_length_in_seconds = window_length_in_seconds
        self.emit_frequency_in_seconds = emit_frequency_in_seconds
        self.counter: SlidingWindowCounter[Any] = SlidingWindowCounter(
            self._derive_num_window_chunks_from(self.window_length_in_seconds,
                                                self.emit_frequency_in_seconds))

    @staticmethod
    def _derive_num_window_chunks_from(window_length_in_seconds: int,
                                       window_update_frequency_in_seconds: int) -> int:
        return window_length_in_seconds // window_update_frequency_in_seconds

    def prepare(self, topo_conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector; track the window's actual length."""
        self.collector = collector
        self.last_modified_tracker = NthLastModifiedTimeTracker(
            self._derive_num_window_chunks_from(self.window_length_in_seconds,
                                                self.emit_frequency_in_seconds))

    def execute(self, tuple: Any) -> None:  # noqa: A002 - Storm's parameter name
        """A tick emits the window's counts; any other tuple is counted and acked."""
        if TupleUtils.is_tick(tuple):
            self.LOG.debug("Received tick tuple, triggering emit of current window counts")
            self._emit_current_window_counts()
        else:
            self._count_obj_and_ack(tuple)

    def _emit_current_window_counts(self) -> None:
        counts = self.counter.get_counts_then_advance_window()
        actual_window_length_in_seconds = \
            self.last_modified_tracker.seconds_since_oldest_modification()
        self.last_modified_tracker.mark_as_modified()
        if actual_window_length_in_seconds != self.window_length_in_seconds:
            self.LOG.warning(self.WINDOW_LENGTH_WARNING_TEMPLATE,
                             actual_window_length_in_seconds, self.window_length_in_seconds)
        self._emit(counts, actual_window_length_in_seconds)

    def _emit(self, counts: dict[Any, int], actual_window_length_in_seconds: int) -> None:
        for obj, count in counts.items():
            self.collector.emit(Values(obj, count, actual_window_length_in_seconds))

    def _count_obj_and_ack(self, tuple: Any) -> None:  # noqa: A002 - Storm's name
        obj = tuple.get_value(0)
        self.counter.increment_count(obj)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        """``obj``, ``count``, ``actualWindowLengthInSeconds``."""
        declarer.declare(Fields("obj", "count", "actualWindowLengthInSeconds"))

    def get_component_configuration(self) -> dict[str, Any]:
        """A tick every emit frequency."""
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.emit_frequency_in_seconds}


class AbstractRankerBolt(BaseBasicBolt):
    """The basic behaviour of bolts that rank objects by their count.

    :meth:`execute` is a template method: a tick emits a copy of the rankings, any other
    tuple goes to :meth:`update_rankings_with_tuple`.
    """

    LOG = logging.getLogger("examples.storm_starter.AbstractRankerBolt")
    DEFAULT_EMIT_FREQUENCY_IN_SECONDS = 2
    DEFAULT_COUNT = 10

    def __init__(self, top_n: int = DEFAULT_COUNT,
                 emit_frequency_in_seconds: int = DEFAULT_EMIT_FREQUENCY_IN_SECONDS) -> None:
        if top_n < 1:
            msg = f"topN must be >= 1 (you requested {top_n})"
            raise ValueError(msg)
        if emit_frequency_in_seconds < 1:
            msg = ("The emit frequency must be >= 1 seconds (you requested "
                   f"{emit_frequency_in_seconds} seconds)")
            raise ValueError(msg)
        self.count = top_n
        self.emit_frequency_in_seconds = emit_frequency_in_seconds
        self.rankings = Rankings(self.count)

    def get_rankings(self) -> Rankings:
        """The bolt's rankings."""
        return self.rankings

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002 - Storm's name
        """A tick emits the rankings; any other tuple updates them."""
        if TupleUtils.is_tick(tuple):
            self.LOG.debug("Received tick tuple, triggering emit of current rankings")
            self._emit_rankings(collector)
        else:
            self.update_rankings_with_tuple(tuple)

    def update_rankings_with_tuple(self, tuple: Any) -> None:  # noqa: A002 - Storm's name
        """How a tuple updates the rankings (the subclass's)."""
        raise NotImplementedError

    def _emit_rankings(self, collector: Any) -> None:
        collector.emit(Values(self.rankings.copy()))
        self.LOG.debug("Rankings: %s", self.rankings)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``rankings``."""
        declarer.declare(Fields("rankings"))

    def get_component_configuration(self) -> dict[str, Any]:
        """A tick every emit frequency."""
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.emit_frequency_in_seconds}


class IntermediateRankingsBolt(AbstractRankerBolt):
    """Ranks incoming ``(object, count, ...)`` tuples by their count."""

    LOG = logging.getLogger("examples.storm_starter.IntermediateRankingsBolt")

    def update_rankings_with_tuple(self, tuple: Any) -> None:  # noqa: A002 - Storm's name
        """Add or replace the tuple's object with its count."""
        rankable = RankableObjectWithFields.from_tuple(tuple)
        self.get_rankings().update_with(rankable)


class TotalRankingsBolt(AbstractRankerBolt):
    """Merges incoming ``Rankings`` (global grouping on the intermediate rankers)."""

    LOG = logging.getLogger("examples.storm_starter.TotalRankingsBolt")

    def update_rankings_with_tuple(self, tuple: Any) -> None:  # noqa: A002 - Storm's name
        """Merge the tuple's rankings; drop zero counts."""
        rankings_to_be_merged = tuple.get_value(0)
        self.get_rankings().update_with(rankings_to_be_merged)
        self.get_rankings().prune_zero_counts()


def build(limit: int | None = None, seed: int | None = None) -> TopologyBuilder:
    """``run``'s topology."""
    builder = TopologyBuilder()
    spout_id = "wordGenerator"
    counter_id = "counter"
    intermediate_ranker_id = "intermediateRanker"
    builder.set_spout(spout_id, TestWordSpout(limit, seed=seed), 5)
    builder.set_bolt(counter_id, RollingCountBolt(9, 3), 4).fields_grouping(
        spout_id, Fields("word"))
    builder.set_bolt(intermediate_ranker_id, IntermediateRankingsBolt(TOP_N), 4) \
        .fields_grouping(counter_id, Fields("obj"))
    total_ranker_id = "finalRanker"
    builder.set_bolt(total_ranker_id, TotalRankingsBolt(TOP_N)).global_grouping(
        intermediate_ranker_id)
    return builder


def main(args: list[str] | None = None) -> int:
    """Run locally for 30 s of driver time (a batch of words a second); print the rankings."""
    topology_name = args[0] if args else "slidingWindowCounts"
    logging.getLogger(__name__).info("Topology name: %s", topology_name)
    with TopologyTestDriver(build().create_topology(), {"kstorm.spout.max.batch.tuples": 20},
                            name=topology_name) as cluster:
        for _ in range(30):
            cluster.run(max_batches=1)
            cluster.advance_time(1_000)
        for (rankings,) in cluster.output("finalRanker"):
            print(rankings)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
