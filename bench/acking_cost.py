"""What at-least-once costs: the word count run exactly-once and at-least-once, same data.

Run: ``python -m bench.acking_cost [--sentences N]`` (default 40,000; about 2 min on 2 cores)

The integration tests' word count (``sentences --shuffle--> split --fields(word)--> count
(stateful) --fields(word)--> out``) runs available-now over one 4-partition topic twice in
one Spark session, alternating guarantees (exactly-once first, then at-least-once, then
both again), each from a fresh checkpoint. At least once, every sentence is a tuple tree of
~17 tuples (the sentence, its words, their counts), tracked by one acker task. Reported:
wall time per run (Spark already started) and words per second; counts are checked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "integration_tests"):  # the bolts' module, for Spark's workers too
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
    [str(REPO), str(REPO / "integration_tests"),
     *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))

GUARANTEES = ("exactly-once", "at-least-once", "exactly-once", "at-least-once")


def run_once(bootstrap: str, topic: str, guarantee: str) -> dict[str, Any]:
    """One available-now run; returns wall time, the final counts and the spout counters."""
    from topologies import LatestCounts, word_count

    from kstorm import KafkaSpout, submit_topology
    from serdes.json import JsonSerde

    spout = KafkaSpout(topic, value_serde=JsonSerde({"id": int, "sentence": str}),
                       max_offsets_per_batch=20_000)
    with tempfile.TemporaryDirectory(prefix="acking-cost-") as checkpoint:
        conf = {"kafka.bootstrap.servers": bootstrap, "kstorm.trigger": "available-now",
                "kstorm.checkpoint.dir": checkpoint,
                "kstorm.spark.master": "local[2]", "topology.guarantee": guarantee}
        started = time.monotonic()
        handle = submit_topology(f"cost-{uuid.uuid4().hex[:6]}", conf,
                                 word_count(spout, LatestCounts()))
        handle.await_termination()
        wall = time.monotonic() - started
        progress = handle.progress
        handle.stop()
    return {"wall_s": wall, "counts": dict(handle.sinks["out"].counts),
            "spout": progress["components"].get("sentences", {})}


def main() -> None:
    """Produce, warm Spark up, run each guarantee twice, print a table."""
    from topologies import sentence_records

    from kstorm._kafka.client import create_topic
    from kstorm._spark.session import get_session
    from kstorm.config import TopologyConfig
    from kstorm.embedded import EmbeddedKafka

    parser = argparse.ArgumentParser(prog="bench.acking_cost")
    parser.add_argument("--sentences", type=int, default=40_000)
    args = parser.parse_args()
    records = sentence_records(args.sentences, seed=11)
    expected = Counter(w for r in records for w in json.loads(r)["sentence"].split())
    with EmbeddedKafka() as kafka:
        topic = f"acking-cost-{uuid.uuid4().hex[:6]}"
        create_topic(kafka.bootstrap_servers, topic, 4)
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 20})
        for i, record in enumerate(records):
            producer.produce(topic, record.encode(), partition=i % 4)
            if i % 10_000 == 0:
                producer.poll(0)
        producer.flush(60)
        get_session(TopologyConfig.from_conf({"kstorm.spark.master": "local[2]"}))
        words = sum(expected.values())
        print(f"{args.sentences:,} sentences, {words:,} words; load {os.getloadavg()[0]:.1f}")
        print(f"{'guarantee':>14} {'wall s':>7} {'words/s':>9}  spout counters")
        for guarantee in GUARANTEES:
            result = run_once(kafka.bootstrap_servers, topic, guarantee)
            assert result["counts"] == dict(expected), f"{guarantee}: wrong counts"
            print(f"{guarantee:>14} {result['wall_s']:>7.1f} {words / result['wall_s']:>9,.0f}"
                  f"  {result['spout']}")


if __name__ == "__main__":
    main()
