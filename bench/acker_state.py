"""Acker state per pending spout tuple, measured in the running runtime (Spark state store).

Run: ``PYTHONPATH=. python -m bench.acker_state``  (about 2-3 min on 2 cores)

For tree sizes 10, 1,000 and 10,000 (10 spout tuples each) and one tree of 100,000, a
topology at least once runs ``KafkaSpout -> Fan(n) -> HoldLast`` on the embedded broker:
each spout tuple fans out into ``n`` tuples, all acked except the last child of each tree,
so every tree stays pending in the acker operator (message timeout 10 min). Once the spout
reports its trees pending, the acker operator's state is read from Spark's progress
(``stateOperators``: rows in the state store and the RocksDB bytes it reports) and divided
by the pending trees. Storm's claim: a fixed amount per spout tuple whatever the tree size.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from typing import Any

from kstorm import BaseBasicBolt, BaseRichBolt, Fields, KafkaSpout, TopologyBuilder, submit_topology
from kstorm.bolt import BasicOutputCollector, OutputCollector
from kstorm.component import OutputFieldsDeclarer
from kstorm.tuple import Tuple

CASES = ((10, 10), (1_000, 10), (10_000, 10), (100_000, 1))  # (tree size, spout tuples)


class Fan(BaseBasicBolt):
    """``n`` children ``(root, i)`` per input, anchored to it (acked on return)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``root``, ``i``."""
        declarer.declare(Fields("root", "i"))

    def execute(self, tuple_: Tuple, collector: BasicOutputCollector) -> None:
        """Fan out."""
        for i in range(self.n):
            collector.emit([tuple_.get_value_by_field("value"), i])


class HoldLast(BaseRichBolt):
    """Acks every child except the last of each tree, which then stays pending."""

    def __init__(self, n: int) -> None:
        self.n = n

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Nothing."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: OutputCollector) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, tuple_: Tuple) -> None:
        """Ack, except the last child."""
        if tuple_.get_value_by_field("i") != self.n - 1:
            self.collector.ack(tuple_)


def measure(kafka: Any, n: int, roots: int) -> dict[str, Any]:
    """Run one case; returns the acker operator's state figures."""
    from bench import acker_state  # workers import the bolts by this module's name
    from kstorm._kafka.client import create_topic

    topic = f"acker-state-{n}-{uuid.uuid4().hex[:6]}"
    create_topic(kafka.bootstrap_servers, topic, 1)
    _produce(kafka.bootstrap_servers, topic, [f"root{i}" for i in range(roots)])
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic))
    builder.set_bolt("fan", acker_state.Fan(n)).shuffle_grouping("events")
    builder.set_bolt("hold", acker_state.HoldLast(n), 2).fields_grouping("fan", Fields("i"))
    checkpoint = tempfile.mkdtemp(prefix="acker-state-")  # removed once the run stopped
    conf = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.checkpoint.dir": checkpoint,
            "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": 500,
            "kstorm.spark.master": "local[2]", "kstorm.shuffle.partitions": 2,
            "topology.guarantee": "at-least-once", "topology.message.timeout.secs": 600}
    handle = submit_topology(f"acker-state-{n}", conf, builder.create_topology())
    try:
        deadline = time.monotonic() + 600
        while handle.progress["components"].get("events", {}).get("pending", 0) < roots:
            if time.monotonic() > deadline or not handle.is_active:
                msg = f"tree size {n}: no pending trees; progress {handle.progress}"
                raise RuntimeError(msg)
            time.sleep(0.5)
        time.sleep(2)  # one more (empty) progress report after the batch
        acker = _acker_operator(handle)
        figures = {"tree": n, "roots": roots,
                   "rows": acker["numRowsTotal"],
                   "memory_bytes": acker.get("memoryUsedBytes"),
                   "custom": acker.get("customMetrics", {}),
                   "acker_pending": handle.progress["components"]["__acker"]["pending"]}
    finally:
        handle.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    return figures


def _acker_operator(handle: Any) -> dict[str, Any]:
    for report in reversed(handle.recent_batches):
        for op in report.get("stateOperators", []):
            if str(op.get("operatorName")).startswith("transformWithState") and op["numRowsTotal"]:
                return op
    msg = "no state operator report with rows"
    raise RuntimeError(msg)


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value.encode())
    producer.flush(30)


def main() -> None:
    """Print one line per case."""
    from kstorm.embedded import EmbeddedKafka

    with EmbeddedKafka() as kafka:
        print(f"{'tree tuples':>11} {'pending roots':>13} {'state rows':>10} "
              f"{'RocksDB memory B':>16} {'snapshot B':>10} {'acker entries':>13}")
        for n, roots in CASES:
            f = measure(kafka, n, roots)
            print(f"{n:>11,} {roots:>13} {f['rows']:>10} {f['memory_bytes']:>16} "
                  f"{f['custom'].get('rocksdbBytesCopied', 0):>10} {f['acker_pending']:>13}")


if __name__ == "__main__":
    main()
