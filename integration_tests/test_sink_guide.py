"""The sink guide's third sink (docs/sinks.md: SQLite, from the guide only) on Spark, exactly once.

A Kafka spout feeds ``SqliteSink``, which *adds* each record's ``n`` to its key's total: a
replayed batch applied twice would double count, so the totals only match the ground truth
if the txid rule holds. The checkpoint is deleted between two runs: the second run must
resume from the sink's record (offsets and txid), not from the topic's start.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter

import pytest
from sqlite_sink import SqliteSink

from kstorm import KafkaSpout, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from serdes.json import JsonSerde

pytestmark = pytest.mark.integration


def topology(topic: str, db: str):
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic, value_serde=JsonSerde({"key": str, "n": int}),
                                           max_offsets_per_batch=40))
    builder.set_bolt("totals", SqliteSink(db, key="key", value="n")).shuffle_grouping("events")
    return builder.create_topology()


def records(start: int, stop: int) -> list[str]:
    return [json.dumps({"key": f"k{i % 7}", "n": i}) for i in range(start, stop)]


def run(spark, kafka, topic, db, checkpoint) -> None:
    handle = submit_topology("sink-guide", {"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                            "kstorm.checkpoint.dir": str(checkpoint),
                                            "kstorm.trigger": "available-now"},
                             topology(topic, db))
    handle.await_termination(120)


def test_the_guides_sink_is_exact_across_a_deleted_checkpoint(spark, kafka, topic_name,
                                                              produce, tmp_path):
    create_topic(kafka.bootstrap_servers, topic_name, 2)
    db, checkpoint = str(tmp_path / "totals.db"), tmp_path / "checkpoint"
    first, second = records(0, 150), records(150, 300)
    produce(kafka.bootstrap_servers, topic_name, first)
    run(spark, kafka, topic_name, db, checkpoint)
    with sqlite3.connect(db) as conn:
        (txid_before,) = conn.execute("SELECT txid FROM record").fetchone()
    assert txid_before >= 3  # 150 records at 40 per batch: several batches

    shutil.rmtree(checkpoint)  # lost: the next run must resume from the sink's record
    produce(kafka.bootstrap_servers, topic_name, second)
    run(spark, kafka, topic_name, db, checkpoint)

    truth: Counter[str] = Counter()
    for record in first + second:
        value = json.loads(record)
        truth[value["key"]] += value["n"]
    with sqlite3.connect(db) as conn:
        totals = dict(conn.execute("SELECT k, v FROM totals").fetchall())
        txid_after, offsets = conn.execute("SELECT txid, offsets FROM record").fetchone()
    assert totals == dict(truth)
    assert txid_after > txid_before  # txids continued past the sink's record
    ends = json.loads(offsets)[topic_name]
    assert sum(ends.values()) == 300  # the record holds the topic's ends
