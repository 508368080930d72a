"""The kstorm_kafka streaming source against the embedded broker and a real SparkSession."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kstorm._kafka import client as _kafka
from kstorm._kafka.client import create_topic
from kstorm._spark.kafka_source import read_stream
from kstorm.kafka.spout import KafkaSpout
from serdes.json import JsonSerde
from serdes.string import StringSerde

pytestmark = pytest.mark.integration

Rows = list[dict[str, Any]]


class Collector:
    """A ``foreachBatch`` function keeping each batch's rows (runs in the driver)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, Rows]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append((batch_id, df.toArrow().to_pylist()))

    @property
    def rows(self) -> Rows:
        return [row for _, rows in self.batches for row in rows]

    def wait_for(self, predicate: Callable[[Rows], bool], query: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.rows):
            if query.exception() is not None:
                raise query.exception()
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s; got {len(self.rows)} rows")
            time.sleep(0.1)


def start(spark: Any, spout: KafkaSpout, checkpoint: Path, collector: Collector, **trigger: Any):
    return (
        read_stream(spark, spout)
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )


def run_available_now(spark: Any, spout: KafkaSpout, checkpoint: Path) -> Collector:
    collector = Collector()
    query = start(spark, spout, checkpoint, collector)
    finished = query.awaitTermination(120)
    if not finished:
        query.stop()
        pytest.fail("available-now query did not finish within 120s")
    if query.exception() is not None:
        raise query.exception()
    return collector


def keyed(rows: Rows, *fields: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row[f] for f in fields) for row in rows)


def produce_spread(produce, bootstrap: str, topic: str, count: int, partitions: int, rounds: int):
    """``count`` records over ``partitions``, in ``rounds`` flushes (several record batches)."""
    expected = []
    per_round = count // rounds
    for r in range(rounds):
        for p in range(partitions):
            values = [f"r{r}-p{p}-{i}" for i in range(per_round // partitions)]
            acks = produce(bootstrap, topic, values, partition=p)
            expected += [(p, off, v) for (_, off), v in zip(acks, values, strict=True)]
    return sorted(expected)


def test_capped_available_now_reads_every_record_once_in_several_batches(
    spark, kafka, topic_name, checkpoint_dir, produce
):
    create_topic(kafka.bootstrap_servers, topic_name, partitions=4)
    expected = produce_spread(produce, kafka.bootstrap_servers, topic_name, 400, 4, rounds=5)
    spout = KafkaSpout(
        topic_name, bootstrap_servers=kafka.bootstrap_servers, max_offsets_per_batch=90
    )

    got = run_available_now(spark, spout, checkpoint_dir)

    assert keyed(got.rows, "partition", "offset", "value") == expected
    sizes = [len(rows) for _, rows in got.batches if rows]
    assert len(sizes) >= 5 and max(sizes) <= 90
    assert {row["topic"] for row in got.rows} == {topic_name}
    assert all(row["__error"] is None and row["kafka_timestamp"] > 0 for row in got.rows)


def test_restart_from_checkpoint_reads_only_new_records(
    spark, kafka, topic_name, checkpoint_dir, produce
):
    create_topic(kafka.bootstrap_servers, topic_name, partitions=2)
    first = produce(kafka.bootstrap_servers, topic_name, [f"a{i}" for i in range(30)])
    spout = KafkaSpout(topic_name, bootstrap_servers=kafka.bootstrap_servers)
    assert len(run_available_now(spark, spout, checkpoint_dir).rows) == len(first)

    produce(kafka.bootstrap_servers, topic_name, [f"b{i}" for i in range(12)])
    again = run_available_now(spark, spout, checkpoint_dir)

    assert sorted(row["value"] for row in again.rows) == sorted(f"b{i}" for i in range(12))


def test_starting_from_the_groups_committed_offsets(
    spark, kafka, topic_name, checkpoint_dir, produce
):
    create_topic(kafka.bootstrap_servers, topic_name, partitions=2)
    for p in (0, 1):
        produce(kafka.bootstrap_servers, topic_name, [f"p{p}-{i}" for i in range(10)], p)
    group = f"{topic_name}-group"
    committer = _kafka.driver_consumer(kafka.bootstrap_servers, group_id=group)
    assert _kafka.commit_offsets(committer, {(topic_name, 0): 7})  # partition 1: none
    spout = KafkaSpout(
        topic_name,
        bootstrap_servers=kafka.bootstrap_servers,
        starting_offsets="group",
        group_id=group,
    )

    rows = run_available_now(spark, spout, checkpoint_dir).rows

    assert keyed(rows, "partition", "offset") == [(0, 7), (0, 8), (0, 9)] + [
        (1, i) for i in range(10)
    ]


def test_group_offsets_follow_completed_batches(spark, kafka, topic_name, checkpoint_dir, produce):
    create_topic(kafka.bootstrap_servers, topic_name, partitions=4)
    produce_spread(produce, kafka.bootstrap_servers, topic_name, 200, 4, rounds=2)
    group = f"{topic_name}-group"
    spout = KafkaSpout(
        topic_name,
        bootstrap_servers=kafka.bootstrap_servers,
        group_id=group,
        max_offsets_per_batch=70,
    )

    rows = run_available_now(spark, spout, checkpoint_dir).rows

    reader = _kafka.driver_consumer(kafka.bootstrap_servers, group_id=group)
    committed = _kafka.committed_offsets(reader, [(topic_name, p) for p in range(4)])
    ends = {
        (topic_name, p): max(r["offset"] for r in rows if r["partition"] == p) + 1 for p in range(4)
    }
    assert committed == ends == {(topic_name, p): 50 for p in range(4)}


def test_malformed_json_becomes_an_error_row_and_the_query_goes_on(
    spark, kafka, topic_name, checkpoint_dir, produce
):
    create_topic(kafka.bootstrap_servers, topic_name, partitions=1)
    produce(kafka.bootstrap_servers, topic_name, ['{"n": 1}', "{not json", '{"n": 3}'])
    spout = KafkaSpout(
        topic_name,
        bootstrap_servers=kafka.bootstrap_servers,
        value_serde=JsonSerde({"n": int}),
        key_serde=StringSerde(field="key"),
    )

    rows = sorted(run_available_now(spark, spout, checkpoint_dir).rows, key=lambda r: r["offset"])

    assert [r["n"] for r in rows] == [1, None, 3]
    assert rows[1]["__error"].startswith("MalformedJSON: ")
    assert rows[1]["__raw"] == b"{not json"
    assert rows[0]["__error"] is None and rows[2]["__raw"] is None


def test_understated_high_watermark_misses_nothing(
    spark, kafka, topic_name, checkpoint_dir, produce
):
    create_topic(kafka.bootstrap_servers, topic_name, partitions=1)
    for batch in range(4):  # each produce call flushes one multi-record batch
        produce(kafka.bootstrap_servers, topic_name, [f"{batch}-{i}" for i in range(25)])
    consumer = _kafka.driver_consumer(kafka.bootstrap_servers)
    low, high = _kafka.watermarks(consumer, [(topic_name, 0)])[(topic_name, 0)]
    confirmed = _kafka.latest_offsets(consumer, {(topic_name, 0): high}, bootstrap="check")
    assert (low, confirmed[(topic_name, 0)]) == (0, 100)  # whatever the broker reported
    spout = KafkaSpout(topic_name, bootstrap_servers=kafka.bootstrap_servers)

    rows = run_available_now(spark, spout, checkpoint_dir).rows

    assert keyed(rows, "offset") == [(i,) for i in range(100)]


def test_new_topics_matching_the_pattern_are_picked_up_while_running(
    spark, kafka, topic_name, checkpoint_dir, produce
):
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    create_topic(kafka.bootstrap_servers, first, partitions=1)
    produce(kafka.bootstrap_servers, first, ["a0", "a1"])
    spout = KafkaSpout(
        pattern=f"{topic_name}-.*",
        bootstrap_servers=kafka.bootstrap_servers,
        metadata_refresh_secs=0.5,
    )
    collector = Collector()
    query = start(spark, spout, checkpoint_dir, collector, processingTime="200 milliseconds")
    try:
        collector.wait_for(lambda rows: len(rows) == 2, query)
        create_topic(kafka.bootstrap_servers, second, partitions=2)
        produce(kafka.bootstrap_servers, second, ["b0", "b1", "b2"])
        collector.wait_for(lambda rows: len(rows) == 5, query)
    finally:
        query.stop()

    assert keyed(collector.rows, "topic", "value") == [
        (first, "a0"), (first, "a1"), (second, "b0"), (second, "b1"), (second, "b2")
    ]  # fmt: skip


def test_headers_keys_and_split_tasks_are_read(spark, kafka, topic_name, checkpoint_dir, produce):
    create_topic(kafka.bootstrap_servers, topic_name, partitions=1)
    records = [(f"k{i}", f"v{i}") for i in range(50)]
    produce(kafka.bootstrap_servers, topic_name, records, 0, headers=[("trace", b"t1")])
    spout = KafkaSpout(
        topic_name,
        bootstrap_servers=kafka.bootstrap_servers,
        key_serde=StringSerde(field="key"),
        max_offsets_per_task=7,
    )

    rows = run_available_now(spark, spout, checkpoint_dir).rows

    assert keyed(rows, "offset", "key", "value") == [(i, f"k{i}", f"v{i}") for i in range(50)]
    assert all(r["kafka_key"] == r["key"].encode() for r in rows)
    assert all(r["kafka_headers"] == [{"key": "trace", "value": b"t1"}] for r in rows)


def test_the_same_range_reads_identically_and_a_missing_range_fails_clearly(
    kafka, topic_name, produce
):
    from kstorm._kafka.fetch import read_range
    from kstorm._kafka.offsets import OffsetRange
    from kstorm.errors import SourceError

    create_topic(kafka.bootstrap_servers, topic_name, partitions=1)
    produce(kafka.bootstrap_servers, topic_name, [f"v{i}" for i in range(30)])
    spout = KafkaSpout(topic_name, bootstrap_servers=kafka.bootstrap_servers, read_timeout=1)
    task = OffsetRange(topic_name, 0, 4, 26)

    first = list(read_range(spout, task, chunk_rows=8))
    second = list(read_range(spout, task, chunk_rows=8))

    assert [b.num_rows for b in first] == [8, 8, 6]
    assert all(a.equals(b) for a, b in zip(first, second, strict=True))
    assert [r["offset"] for b in first for r in b.to_pylist()] == list(range(4, 26))
    with pytest.raises(SourceError, match=rf"{topic_name}\[0\] offsets \[25, 40\).*offset 30"):
        list(read_range(spout, OffsetRange(topic_name, 0, 25, 40)))


def _reader(spout: KafkaSpout):
    from kstorm._spark.kafka_source import KafkaStreamReader, spark_schema

    return KafkaStreamReader(spout, spark_schema(spout))


def _read_all(reader, start: dict, end: dict) -> Rows:
    return [
        row
        for part in reader.partitions(start, end)
        for batch in reader.read(part)
        for row in batch.to_pylist()
    ]


def test_a_partition_appearing_mid_run_joins_at_earliest_and_is_read_next(
    kafka, topic_name, produce, monkeypatch
):
    # tansu has no CreatePartitions: the topic "grows" by hiding two partitions at first.
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    create_topic(kafka.bootstrap_servers, topic_name, partitions=4)
    for p in range(4):
        produce(kafka.bootstrap_servers, topic_name, [f"p{p}-{i}" for i in range(5)], p)
    visible = {0, 1}
    real = _kafka.partitions_of
    monkeypatch.setattr(
        _kafka,
        "partitions_of",
        lambda *args, **kw: [tp for tp in real(*args, **kw) if tp[1] in visible],
    )
    reader = _reader(
        KafkaSpout(topic_name, bootstrap_servers=kafka.bootstrap_servers, metadata_refresh_secs=0)
    )
    everything = ReadAllAvailable()

    start = reader.initialOffset()
    first = reader.latestOffset(start, everything)
    visible.update({2, 3})
    joined = reader.latestOffset(first, everything)
    after = reader.latestOffset(joined, everything)

    assert first == {topic_name: {"0": 5, "1": 5}}
    assert joined == {topic_name: {"0": 5, "1": 5, "2": 0, "3": 0}}
    assert reader.partitions(first, joined) == []
    assert after == {topic_name: {str(p): 5 for p in range(4)}}
    values = sorted(row["value"] for row in _read_all(reader, joined, after))
    assert values == [f"p{p}-{i}" for p in (2, 3) for i in range(5)]


def test_available_now_target_ignores_records_produced_after_it(kafka, topic_name, produce):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    create_topic(kafka.bootstrap_servers, topic_name, partitions=1)
    produce(kafka.bootstrap_servers, topic_name, [f"v{i}" for i in range(10)])
    reader = _reader(
        KafkaSpout(topic_name, bootstrap_servers=kafka.bootstrap_servers, max_offsets_per_batch=4)
    )
    offset = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    produce(kafka.bootstrap_servers, topic_name, [f"late{i}" for i in range(10)])

    ends = []
    while (end := reader.latestOffset(offset, ReadMaxRows(4))) != offset:
        ends.append(end[topic_name]["0"])
        offset = end

    assert ends == [4, 8, 10]
    assert reader.reportLatestOffset() == {topic_name: {"0": 20}}


def test_kept_read_consumers_read_the_same_rows_as_fresh_ones(kafka, topic_name, produce,
                                                              monkeypatch):
    """A worker's read consumer kept for the partition's next range (catching up: the batch
    was capped), one a range behind, one repositioned by assign: every range reads exactly
    its records."""
    from confluent_kafka import TopicPartition

    import kstorm._kafka.fetch as fetch
    from kstorm._kafka.offsets import OffsetRange

    kept = fetch._Kept()
    monkeypatch.setattr(fetch, "_KEPT", kept)
    create_topic(kafka.bootstrap_servers, topic_name, partitions=1)
    produce(kafka.bootstrap_servers, topic_name, [f"v{i}" for i in range(60)])
    spout = KafkaSpout(topic_name, bootstrap_servers=kafka.bootstrap_servers, read_timeout=5)

    def offsets(start: int, end: int, keep: bool = True) -> list[int]:
        task = OffsetRange(topic_name, 0, start, end)
        return [r["offset"] for b in fetch.read_range(spout, task, keep=keep)
                for r in b.to_pylist()]

    assert offsets(0, 10) == list(range(10))
    (consumer,) = [c.consumer for c in kept._consumers.values()]
    assert offsets(10, 20) == list(range(10, 20))  # the same consumer, straight on
    assert offsets(30, 40) == list(range(30, 40))  # a range behind: 20-29 dropped
    assert [c.consumer for c in kept._consumers.values()] == [consumer]
    consumer.assign([TopicPartition(topic_name, 0, 5)])  # what a consumer behind does on error
    assert [m.offset() for m in consumer.consume(3, 5.0)] == [5, 6, 7]
    kept._consumers.clear()
    consumer.close()
    assert offsets(40, 55, keep=False) == list(range(40, 55))  # the tail: closed
    assert not kept._consumers
