"""kstorm.commit.overlap on Spark: a sink that fails after Spark recorded its batch.

With the overlap (``kstorm.commit.overlap = true``, for a Kafka spout feeding sinks that
record offsets; ``auto`` leaves it off under a ``local`` master on every core), a batch's
sinks commit on their own thread while Spark records the batch and runs the next.
A sink that then fails for good must stop the topology with its error, not be lost: the
handle raises it, Spark's checkpoint is one batch ahead of the sink, and the next start
runs that batch again from its logged offsets -- every value exactly once.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlite_sink import SqliteSink

from kstorm import KafkaSpout, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from kstorm._spark.offset_log import last_committed_batch
from kstorm.errors import ConfigError, SinkError
from serdes.json import JsonSerde

pytestmark = pytest.mark.integration


class BrokenAfter(SqliteSink):
    """SqliteSink whose commits of txid >= 2 fail while ``flag`` exists (a full disk)."""

    def __init__(self, path: str, key: str, value: str, flag: str) -> None:
        super().__init__(path, key, value)
        self.flag = flag

    def commit(self, batch: Any) -> None:
        if batch.txid >= 2 and Path(self.flag).exists():
            raise OSError(f"database or disk is full (test), txid {batch.txid}")
        super().commit(batch)


def topology(topic: str, db: str, flag: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic, value_serde=JsonSerde({"key": str, "n": int}),
                                           max_offsets_per_batch=40))
    builder.set_bolt("totals", BrokenAfter(db, "key", "n", flag)).shuffle_grouping("events")
    return builder.create_topology()


def conf(kafka: Any, checkpoint: Path, **more: Any) -> dict[str, Any]:
    return {"kafka.bootstrap.servers": kafka.bootstrap_servers,
            "kstorm.checkpoint.dir": str(checkpoint), "kstorm.trigger": "available-now",
            "kstorm.transaction.max.attempts": 2, "kstorm.transaction.backoff.ms": 0,
            "kstorm.commit.overlap": True, **more}


def test_a_sink_failing_after_spark_recorded_its_batch_stops_and_the_batch_runs_again(
        spark: Any, kafka: Any, topic_name: str, produce: Any, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    create_topic(kafka.bootstrap_servers, topic_name, 2)
    db, checkpoint, flag = str(tmp_path / "t.db"), tmp_path / "ck", tmp_path / "full"
    values = [json.dumps({"key": f"k{i % 5}", "n": i}) for i in range(300)]
    produce(kafka.bootstrap_servers, topic_name, values)
    flag.touch()
    caplog.set_level(logging.INFO, logger="kstorm")
    handle = submit_topology("overlap-fail", conf(kafka, checkpoint),
                             topology(topic_name, db, str(flag)))
    try:
        with pytest.raises(SinkError, match=r"txid 2 failed in component 'totals' after 2 "
                                            r"attempt\(s\).*disk is full"):
            handle.await_termination(180)
    finally:
        handle.stop()
    assert any("each batch's sinks commit while the next batch runs" in r.getMessage()
               for r in caplog.records)
    with sqlite3.connect(db) as conn:
        (txid,) = conn.execute("SELECT txid FROM record").fetchone()
    assert txid == 1
    assert last_committed_batch(checkpoint) == 2  # Spark recorded the batch its sink lost

    flag.unlink()  # the disk has room again
    caplog.clear()
    handle = submit_topology("overlap-fail", conf(kafka, checkpoint),
                             topology(topic_name, db, str(flag)))
    try:
        assert handle.await_termination(180)
    finally:
        handle.stop()
    assert any("batch 2 (txid 2) runs again from its logged offsets" in r.getMessage()
               for r in caplog.records)
    truth: Counter[str] = Counter()
    for value in values:
        row = json.loads(value)
        truth[row["key"]] += row["n"]
    with sqlite3.connect(db) as conn:
        totals = dict(conn.execute("SELECT k, v FROM totals").fetchall())
        _, offsets = conn.execute("SELECT txid, offsets FROM record").fetchone()
    assert totals == dict(truth)  # exactly once: nothing lost, nothing twice
    assert sum(json.loads(offsets)[topic_name].values()) == 300


def test_overlap_true_is_refused_where_the_commit_must_stay_in_the_batch(
        spark: Any, kafka: Any, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafka.bootstrap_servers, topic_name, 1)
    with pytest.raises(ConfigError, match=r"kstorm.commit.overlap = true.*dead-letter"):
        submit_topology("overlap-refused", conf(
            kafka, tmp_path / "ck", **{"kstorm.commit.overlap": True,
                                       "kstorm.transaction.failure.policy": "dead-letter"}),
            topology(topic_name, str(tmp_path / "t.db"), str(tmp_path / "never")))


def test_auto_overlaps_only_where_the_driver_has_cores_of_its_own(
        spark: Any, kafka: Any, topic_name: str, produce: Any, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    from kstorm._spark.overlap import shares_cores

    create_topic(kafka.bootstrap_servers, topic_name, 1)
    produce(kafka.bootstrap_servers, topic_name,
            [json.dumps({"key": "a", "n": i}) for i in range(50)])
    caplog.set_level(logging.INFO, logger="kstorm")
    handle = submit_topology("overlap-auto", conf(
        kafka, tmp_path / "ck", **{"kstorm.commit.overlap": "auto"}),
        topology(topic_name, str(tmp_path / "t.db"), str(tmp_path / "never")))
    try:
        assert handle.await_termination(180)
    finally:
        handle.stop()
    overlapped = any("each batch's sinks commit while the next batch runs" in r.getMessage()
                     for r in caplog.records)
    assert overlapped is not shares_cores(spark.sparkContext.master)
    with sqlite3.connect(tmp_path / "t.db") as conn:
        assert conn.execute("SELECT v FROM totals").fetchall() == [(sum(range(50)),)]
