"""storm-starter's ``ExclamationTopology.java``, ported as written.

``TestWordSpout`` (10 tasks) -> ``exclaim1`` (3 tasks, shuffle) -> ``exclaim2`` (2 tasks,
shuffle); each ``ExclamationBolt`` emits its word with ``"!!!"`` appended, anchored, and
acks the input: every word comes out of ``exclaim2`` as ``word + "!!!!!!"``.

Changes beyond syntax:

- ``new TestWordSpout()`` takes ``limit`` and ``seed`` (kstorm's ``TestWordSpout``): Storm's
  spout emits random words forever; a test needs a finite, repeatable run (``None``, the
  default, keeps Storm's endless random words).
- Local mode (no arguments) runs on kstorm's in-process ``TopologyTestDriver`` instead of a
  ``LocalCluster`` for 10 s (20 words a spout task), and prints what ``exclaim2`` emitted;
  with a name it submits to Spark (``submit_topology`` for ``StormSubmitter``).

Not a change, but it runs differently: kstorm runs a ``next_tuple`` spout as one
instance whatever its parallelism (``docs/limits.md``), so ``word``'s 10 tasks emit what one
task would; the bolts' tasks are as written.

Run: ``python -m examples.storm_starter.exclamation``.
"""

from __future__ import annotations

import sys
from typing import Any

from kstorm import BaseRichBolt, Config, Fields, TopologyBuilder, Values
from kstorm.testing import TestWordSpout, TopologyTestDriver


class ExclamationBolt(BaseRichBolt):
    """Appends ``"!!!"`` to the word (anchored), then acks the input."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self._collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002 - Storm's parameter name
        """Emit ``word + "!!!"`` anchored to the input, and ack it."""
        self._collector.emit(tuple, Values(tuple.get_string(0) + "!!!"))
        self._collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field, ``word``."""
        declarer.declare(Fields("word"))


def build(limit: int | None = None, seed: int | None = None) -> TopologyBuilder:
    """The topology of ``main`` (``limit``/``seed``: see the module docstring)."""
    builder = TopologyBuilder()

    builder.set_spout("word", TestWordSpout(limit, seed=seed), 10)
    builder.set_bolt("exclaim1", ExclamationBolt(), 3).shuffle_grouping("word")
    builder.set_bolt("exclaim2", ExclamationBolt(), 2).shuffle_grouping("exclaim1")
    return builder


def main(args: list[str] | None = None) -> int:
    """Submit as ``args[0]``, or run locally and print ``exclaim2``'s words."""
    conf = Config()
    conf.set_debug(True)

    if args:
        from kstorm import submit_topology

        conf.set_num_workers(3)
        submit_topology(args[0], conf, build().create_topology()).await_termination()
    else:
        with TopologyTestDriver(build(limit=20).create_topology(), conf) as cluster:
            cluster.run()
            for values in cluster.output("exclaim2"):
                print(values[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
