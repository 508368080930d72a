"""Topologies writing to the Kafka sink, for its integration and kill tests.

``python -m kafka_eo_topology`` runs, in a process that a test can SIGKILL::

    KafkaSpout(JSON {id, value}) --shuffle--> Square (2 tasks) --> KafkaSink(out, key=id)

with the continuous trigger and small batches, and exits by itself (code 0) once the sink's
group has committed the input topic's end offsets (read at start). Each restart goes on
where the previous run stopped: Spark's checkpoint, and the sink's committed offsets.
``PYTHONPATH`` must hold the repo and ``integration_tests``::

    python -m kafka_eo_topology --bootstrap 127.0.0.1:9092 --input in --output out \\
        --checkpoint /tmp/ckpt --name keo1

Example:
    >>> [json.loads(r) for r in input_records(2)]
    [{'id': 0, 'value': 1}, {'id': 1, 'value': 2}]
    >>> expected_output(2)
    {0: 1, 1: 4}
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from eo_topology import TopologyProcess, topic_ends

from kstorm import BaseBasicBolt, Fields
from kstorm.bolt import BasicOutputCollector
from kstorm.component import OutputFieldsDeclarer
from kstorm.tuple import Tuple

SINK_ID = "out"
IN_FIELDS = {"id": int, "value": int}
OUT_FIELDS = {"id": int, "square": int}
log = logging.getLogger("kafka_eo_topology")


def input_records(n: int, start: int = 0) -> list[str]:
    """``n`` JSON records ``{"id": i, "value": i % 1000 + 1}`` (ids ``start``...)."""
    return [json.dumps({"id": i, "value": i % 1000 + 1}) for i in range(start, start + n)]


def expected_output(n: int, start: int = 0) -> dict[int, int]:
    """What the topology must write for :func:`input_records`: id -> square."""
    return {i: (i % 1000 + 1) ** 2 for i in range(start, start + n)}


class Square(BaseBasicBolt):
    """``(id, value, ...) -> (id, square)``."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``id``, ``square``."""
        declarer.declare(Fields("id", "square"))

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Square the value."""
        value = tuple_.get_value_by_field("value")
        collector.emit([tuple_.get_value_by_field("id"), value * value])


class Passthrough(BaseBasicBolt):
    """Re-emits ``fields`` of every tuple (e.g. the decoded fields of a spout)."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = list(fields)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The chosen fields."""
        declarer.declare(Fields(*self.fields))

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Emit them."""
        collector.emit([tuple_.get_value_by_field(f) for f in self.fields])


def build_topology(input_topic: str, output_topic: str, *, max_per_batch: int) -> Any:
    """The kill test's topology (module docstring)."""
    from kstorm import KafkaSpout, TopologyBuilder
    from serdes import JsonSerde
    from sinks.kafka import KafkaSink

    builder = TopologyBuilder()
    builder.set_spout("numbers", KafkaSpout(input_topic, value_serde=JsonSerde(IN_FIELDS),
                                            max_offsets_per_batch=max_per_batch))
    builder.set_bolt("square", Square(), 2).shuffle_grouping("numbers")
    builder.set_bolt(SINK_ID, KafkaSink(output_topic, key="id",
                                        value_serde=JsonSerde(OUT_FIELDS))
                     ).shuffle_grouping("square")
    return builder.create_topology()


def run(args: argparse.Namespace) -> int:
    """Run until the sink's group has committed the input's end offsets; 0 on success."""
    from kstorm import submit_topology
    from kstorm.errors import KstormError

    ends = topic_ends(args.bootstrap, args.input)
    log.info("keo: input %s ends %s", args.input, ends)
    conf = {"kafka.bootstrap.servers": args.bootstrap, "kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": args.trigger_ms,
            "kstorm.spark.master": "local[2]", "kstorm.shuffle.partitions": 2,
            "kstorm.commit.overlap": args.commit_overlap}
    handle = submit_topology(args.name, conf,
                             build_topology(args.input, args.output,
                                            max_per_batch=args.max_per_batch))
    sink = handle.sinks[SINK_ID]
    deadline, seen = time.monotonic() + args.timeout, None
    while time.monotonic() < deadline:
        if not handle.is_active:
            try:
                handle.await_termination(0)
            except KstormError as exc:
                log.error("keo: topology failed: %s", exc)
                return 1
            log.error("keo: topology stopped before reaching the input's ends")
            return 1
        record = sink.committed_offsets()
        if record != seen:
            seen = record
            log.info("keo: committed %s", record)
        if record is not None and record[1].get(args.input) == ends:
            handle.stop()
            return 0
        time.sleep(0.5)
    log.error("keo: not drained within %ss", args.timeout)
    handle.stop()
    return 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments (module docstring)."""
    parser = argparse.ArgumentParser(prog="kafka_eo_topology")
    for name in ("--bootstrap", "--input", "--output", "--checkpoint", "--name"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-per-batch", type=int, default=1000)
    parser.add_argument("--trigger-ms", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--commit-overlap", default="auto", choices=["auto", "true", "false"])
    return parser.parse_args(argv)


class KafkaTopologyProcess(TopologyProcess):
    """``python -m kafka_eo_topology`` in its own session (kill and reap as in eo_topology)."""

    @classmethod
    def start(cls, argv: list[str], log_dir: Path, label: str,  # type: ignore[override]
              env: dict[str, str] | None = None, module: str = "kafka_eo_topology"
              ) -> TopologyProcess:
        """Launch the runner; output to ``<log_dir>/<label>.log``."""
        return TopologyProcess.start(argv, log_dir, label, env, module=module)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m kafka_eo_topology``."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
