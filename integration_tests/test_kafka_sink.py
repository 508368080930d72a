"""The exactly-once Kafka sink against the embedded broker (issue 6, items 2 and 3).

- sinks driven directly, as the commit phase does: a replayed batch id writes nothing; a
  zombie (an older instance with the same transactional id) is fenced, before or during its
  transaction; a failed batch is aborted and its replay commits; the window state and
  offsets come back for a restart without a checkpoint;
- topologies in this process: ListSpout -> bolt -> KafkaSink; 10,000 Avro records with 1%
  corrupted -> exactly the good ones out, exactly the bad ones in ``<topology>.dead-letters``;
- ``slow``: ``python -m kafka_eo_topology`` SIGKILLed three times (right after a commit, so
  the restart replays a batch the sink has; inside the Kafka transaction; at a random moment
  before a restart without the checkpoint), the output checked against the ground truth.

What a reader with ``isolation.level=read_committed`` sees is checked twice: with a librdkafka
consumer, and with ``kafka_txn_log`` (the raw log read over the protocol, with Kafka's
read_committed rules applied to its COMMIT/ABORT markers). tansu 0.6 writes those markers
but does not tell consumers which transactions aborted, so on tansu librdkafka also shows
records of aborted transactions: where a test aborts a transaction that had produced
records, it asserts the librdkafka view equals the oracle's when the broker hides aborted
records (``hides_aborted``: Apache Kafka), and otherwise that the only extra records are
exactly those the log marks aborted.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _services import KafkaService
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka_eo_topology import SINK_ID, Square, expected_output
from kafka_txn_log import read_log

from kstorm import Fields, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from kstorm._runtime import reconcile
from kstorm._runtime.batch import BatchOffsets
from kstorm.errors import SinkError
from kstorm.failpoints import PAUSE_AFTER_ENV, PAUSE_ENV
from kstorm.sink import SinkBatch
from kstorm.testing import ListSpout, sink_context
from kstorm.tuple import Tuple
from serdes import JsonSerde
from sinks.kafka import KafkaSink

pytestmark = pytest.mark.integration

OUT = JsonSerde({"id": int, "square": int})
RUN_TIMEOUT = 120.0


# -- reading the output ---------------------------------------------------------------------


def consume(bootstrap: str, topic: str, isolation: str = "read_committed",
            timeout: float = 30.0) -> list[Any]:
    """Every record librdkafka delivers from every partition of ``topic``, from offset 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in partitions])
    out, pending = [], set(partitions)
    deadline = time.monotonic() + timeout
    try:
        while pending:
            assert time.monotonic() < deadline, f"{topic}: partitions {pending} not read to EOF"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is None:
                out.append(message)
            elif message.error().code() == KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
            else:
                raise AssertionError(f"{topic}: {message.error()}")
    finally:
        consumer.close()
    return out


def values(messages: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in messages]


def oracle(bootstrap: str, topic: str, partitions: int) -> tuple[list[Any], list[Any]]:
    """(committed, aborted) records of ``topic``, by Kafka's read_committed rules."""
    logs = [read_log(bootstrap, topic, p) for p in range(partitions)]
    assert not any(log.fate.get(r.offset) == "open" for log in logs for r in log.records)
    return ([r for log in logs for r in log.committed()],
            [r for log in logs for r in log.aborted()])


@pytest.fixture(scope="module")
def hides_aborted(kafka: KafkaService) -> bool:
    """Whether this broker hides aborted records from read_committed consumers."""
    topic = f"probe-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "transactional.id": f"probe-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(10)
    producer.abort_transaction(10)
    return not consume(kafka.bootstrap_servers, topic)


# -- sinks driven directly, as the runtime's commit phase does ------------------------------


def opened(sink: KafkaSink, bootstrap: str, topology: str, sink_id: str = "out") -> KafkaSink:
    sink.open(sink_context(topology, sink_id, {"kafka.bootstrap.servers": bootstrap}))
    return sink


def batch(batch_id: int, tuples: list[Tuple], offsets: dict[str, Any] | None = None,
          state: dict[str, bytes] | None = None) -> SinkBatch:
    """A batch as the commit phase builds it (``offsets`` per spout, as Spark logs them)."""
    ends = BatchOffsets.parse(batch_id, 0, offsets or {}, kafka_spouts=set(offsets or {}))
    return SinkBatch(batch_id, batch_id, tuples, ends.kafka_ends(), state or {})


def squares(ids: range) -> list[Tuple]:
    return [Tuple([i, i * i], Fields("id", "square"), "square") for i in ids]


@pytest.fixture
def output(kafka: KafkaService, topic_name: str) -> str:
    create_topic(kafka.bootstrap_servers, topic_name, 3)
    return topic_name


@pytest.fixture
def source(kafka: KafkaService) -> str:
    """An input topic (2 partitions) whose offsets the batches report."""
    name = f"in-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, name, 2)
    return name


@pytest.fixture
def topology() -> str:
    return f"ks{uuid.uuid4().hex[:8]}"


@pytest.fixture
def sinks() -> Iterator[list[KafkaSink]]:
    made: list[KafkaSink] = []
    yield made
    for sink in made:
        sink.close()


def new_sink(sinks: list[KafkaSink], kafka: KafkaService, output: str, topology: str,
             timeout_s: float = 10.0) -> KafkaSink:
    sink = opened(KafkaSink(output, key="id", value_serde=OUT, timeout_s=timeout_s),
                  kafka.bootstrap_servers, topology)
    sinks.append(sink)
    return sink


def test_a_replayed_batch_id_writes_nothing_the_second_time(kafka, output, source, topology,
                                                            sinks):
    bootstrap = kafka.bootstrap_servers
    sink = new_sink(sinks, kafka, output, topology)
    sink.commit(batch(0, squares(range(0, 50)), {"numbers": {source: {"0": 10, "1": 40}}}))
    sink.commit(batch(0, squares(range(0, 50)), {"numbers": {source: {"0": 10, "1": 40}}}))
    sink.close()
    restarted = new_sink(sinks, kafka, output, topology)  # a restarted driver replays 0
    restarted.commit(batch(0, squares(range(0, 50)), {"numbers": {source: {"0": 10, "1": 40}}}))
    restarted.commit(batch(1, squares(range(50, 80)), {"numbers": {source: {"0": 25, "1": 55}}}))

    seen = values(consume(bootstrap, output))
    assert sorted(r["id"] for r in seen) == list(range(80))
    assert all(r["square"] == r["id"] ** 2 for r in seen)
    committed, aborted = oracle(bootstrap, output, 3)
    assert len(committed) == 80 and not aborted  # the replays sent nothing at all
    assert restarted.committed_offsets() == (1, {source: {0: 25, 1: 55}})
    by_partition: dict[int, set[bytes]] = {}
    for m in consume(bootstrap, output):
        by_partition.setdefault(m.partition(), set()).add(m.key())
    keys = [k for ks in by_partition.values() for k in ks]
    assert len(keys) == len(set(keys)) == 80  # a key lives in exactly one partition


def test_a_zombie_is_fenced_and_writes_nothing(kafka, output, topology, sinks):
    bootstrap = kafka.bootstrap_servers
    older = new_sink(sinks, kafka, output, topology)
    older.commit(batch(0, squares(range(0, 10)), {}))
    newer = new_sink(sinks, kafka, output, topology)  # same transactional id: fences older

    with pytest.raises(SinkError, match="fenced") as fenced:
        older.commit(batch(1, squares(range(100, 120)), {}))
    assert f"kstorm.{topology}.out" in str(fenced.value)
    with pytest.raises(SinkError, match="fenced"):  # and it stays a zombie
        older.commit(batch(2, squares(range(200, 220)), {}))
    newer.commit(batch(1, squares(range(10, 20)), {}))

    assert sorted(r["id"] for r in values(consume(bootstrap, output))) == list(range(20))
    committed, aborted = oracle(bootstrap, output, 3)
    assert sorted(json.loads(r.value)["id"] for r in committed) == list(range(20))
    assert not aborted  # the broker refused the zombie's records outright
    assert newer.committed_offsets() == (1, {})


def test_a_failed_batch_is_aborted_and_its_replay_commits_it(kafka, output, topology, sinks,
                                                             hides_aborted):
    bootstrap = kafka.bootstrap_servers
    sink = opened(KafkaSink(output, key="id", value_serde=JsonSerde(), timeout_s=10,
                            producer_config={"message.max.bytes": 2000}), bootstrap, topology)
    sinks.append(sink)
    huge = Tuple([7, "x" * 5000], Fields("id", "blob"), "square")
    with pytest.raises(SinkError, match="txid 0 was not committed.*MSG_SIZE_TOO_LARGE"):
        sink.commit(batch(0, [*squares(range(5)), huge], {}))
    with pytest.raises(SinkError, match=r"cannot serialize tuple \{'id': 1, 'blob': b'"):
        sink.commit(batch(0, [Tuple([1, b"\x00"], Fields("id", "blob"), "square")], {}))
    assert sink.committed_offsets() is None
    sink.commit(batch(0, squares(range(5)), {}))  # the replay, without the bad tuple
    committed, aborted = oracle(bootstrap, output, 3)
    assert sorted(json.loads(r.value)["id"] for r in committed) == list(range(5))
    seen = sorted(r["id"] for r in values(consume(bootstrap, output)))
    shown = [] if hides_aborted else [json.loads(r.value)["id"] for r in aborted]
    assert seen == sorted([*range(5), *shown])  # (the abort usually purged them unsent)
    assert sink.committed_offsets() == (0, {})


def test_a_missing_output_topic_is_reported_when_the_sink_opens(kafka, topology):
    with pytest.raises(SinkError, match="output topic 'no-such-topic' does not exist"):
        opened(KafkaSink("no-such-topic"), kafka.bootstrap_servers, topology)


def test_resuming_inside_the_brokers_last_record_batch_reads_on(kafka, topic_name, produce):
    """tansu reports the base offset of a partition's last record batch + 1 as its high
    watermark: a topology resuming (from a checkpoint or the sink's offsets) at an offset
    inside that batch must still see the records after it (kstorm/_kafka/client.py)."""
    from kstorm._kafka import client as _kafka

    bootstrap = kafka.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [f"a{i}" for i in range(30)], partition=0)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000,
                         "batch.num.messages": 100_000})
    for i in range(3000):  # one record batch
        producer.produce(topic_name, f"b{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe"})
    try:
        _, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic_name, 0), timeout=10)
        start = min(high + 500, 3029)  # tansu: above the reported high watermark
        ends = _kafka.latest_offsets(consumer, {(topic_name, 0): high},
                                     {(topic_name, 0): start}, bootstrap=f"fresh-{topic_name}")
    finally:
        consumer.close()
    assert ends == {(topic_name, 0): 3030}


def paused_commit(sink: KafkaSink, marker: Path, *args: Any) -> tuple[threading.Thread, list]:
    """Run ``sink.commit(*args)`` in a thread until it pauses before commit_transaction."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sink.commit(*args)
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline and thread.is_alive(), f"no pause: {errors}"
        time.sleep(0.02)
    return thread, errors


def test_a_zombie_fenced_mid_transaction_leaves_only_aborted_records(
        kafka, output, topology, sinks, tmp_path, monkeypatch, hides_aborted):
    bootstrap = kafka.bootstrap_servers
    older = new_sink(sinks, kafka, output, topology, timeout_s=4)  # tansu: EndTxn times out
    older.commit(batch(0, squares(range(0, 10)), {}))
    marker = tmp_path / "pause"
    monkeypatch.setenv(PAUSE_ENV, str(marker))
    thread, errors = paused_commit(older, marker, batch(1, squares(range(100, 130)), {}))
    monkeypatch.delenv(PAUSE_ENV)
    newer = new_sink(sinks, kafka, output, topology)  # the restarted driver
    marker.unlink()
    thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], SinkError)
    assert "fenced" in str(errors[0])
    newer.commit(batch(1, squares(range(10, 20)), {}))

    committed, aborted = oracle(bootstrap, output, 3)
    assert sorted(json.loads(r.value)["id"] for r in committed) == list(range(20))
    assert sorted(json.loads(r.value)["id"] for r in aborted) == list(range(100, 130))
    seen = Counter(r["id"] for r in values(consume(bootstrap, output)))
    if hides_aborted:
        assert sorted(seen) == list(range(20)) and set(seen.values()) == {1}
    else:  # tansu: the gap is the broker's, and exactly the aborted transaction
        assert seen == Counter([*range(20), *range(100, 130)])


def test_window_state_and_offsets_come_back_when_the_checkpoint_is_lost(
        kafka, output, source, topology, sinks, tmp_path, monkeypatch):
    big = bytes(range(256)) * 5000  # 1.28 MB: three chunks
    sink = new_sink(sinks, kafka, output, topology, timeout_s=4)
    sink.commit(batch(0, [], {"numbers": {source: {"0": 5}}}, {"window:agg": b"first"}))
    sink.commit(batch(1, squares(range(3)), {"numbers": {source: {"0": 9}}},
                      {"window:agg": big, "window:other": b""}))
    marker = tmp_path / "pause"
    monkeypatch.setenv(PAUSE_ENV, str(marker))
    thread, errors = paused_commit(sink, marker, batch(2, [], {"numbers": {source: {"0": 12}}},
                                                       {"window:agg": b"never committed"}))
    monkeypatch.delenv(PAUSE_ENV)
    restarted = new_sink(sinks, kafka, output, topology)
    marker.unlink()
    thread.join(30)
    assert errors and "fenced" in str(errors[0])

    assert restarted.committed_offsets() == (1, {source: {0: 9}})
    assert restarted.committed_state() == {"window:agg": big, "window:other": b""}
    resume = reconcile.decide(None, 0, False, {"out": restarted.committed_offsets()})
    assert (resume.txid_base, resume.from_sink, resume.offsets) == (2, "out", {source: {0: 9}})


# -- topologies -----------------------------------------------------------------------------


def test_a_topology_writes_every_output_once_and_a_replay_adds_nothing(
        spark, kafka, output, topology, tmp_path):
    bootstrap = kafka.bootstrap_servers
    batches = [[[i, i % 1000 + 1] for i in range(b * 40, b * 40 + 40)] for b in range(3)]
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout(batches, Fields("id", "value"), partitions=2))
    builder.set_bolt("square", Square(), 2).shuffle_grouping("numbers")
    builder.set_bolt(SINK_ID, KafkaSink(output, key="id", value_serde=OUT)
                     ).shuffle_grouping("square")
    conf = {"kafka.bootstrap.servers": bootstrap, "kstorm.checkpoint.dir": str(tmp_path),
            "kstorm.trigger": "available-now", "kstorm.spark.master": "local[2]"}
    handle = submit_topology(topology, conf, builder.create_topology())
    try:
        assert handle.await_termination(RUN_TIMEOUT)
    finally:
        handle.stop()
    expected = expected_output(120)
    seen = values(consume(bootstrap, output))
    assert Counter(r["id"] for r in seen) == Counter(expected.keys())
    assert {r["id"]: r["square"] for r in seen} == expected
    replay = opened(KafkaSink(output, key="id", value_serde=OUT), bootstrap, topology, SINK_ID)
    try:
        txid, _ = replay.committed_offsets() or (None, None)
        assert txid == 2  # three batches: txids 0, 1, 2
        replay.commit(batch(1, squares(range(40, 80)), {}))  # a replay of batch 1
    finally:
        replay.close()
    assert len(consume(bootstrap, output)) == 120


# -- issue 6: bad Avro input goes to the dead-letter topic, good input to the sink exactly ----

AVRO_SCHEMA = {"type": "record", "name": "Payment", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"}]}


def avro_dataset(n: int, bad_every: int, seed: int = 6) -> tuple[list[bytes], dict[int, str]]:
    """``n`` Avro bodies; every ``bad_every``-th is corrupted. Returns (values, {index: kind}).

    A corrupted body is truncated, has junk after the record, or is random bytes; each is
    checked to be unreadable with fastavro itself (the ground truth does not use kstorm).
    """
    import io
    import random

    import fastavro

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    rng = random.Random(seed)

    def body(i: int) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"id": i, "name": f"user-{i % 97}",
                                                 "amount": i / 4})
        return out.getvalue()

    def readable(data: bytes) -> bool:
        source = io.BytesIO(data)
        try:
            fastavro.schemaless_reader(source, parsed)
        except Exception:
            return False
        return source.tell() == len(data)

    values, bad = [], {}
    for i in range(n):
        data = body(i)
        if i % bad_every == bad_every // 2:
            kind = ("truncated", "junk-after", "garbage")[len(bad) % 3]
            while True:
                if kind == "truncated":
                    data = body(i)[:-rng.randint(1, 6)]
                elif kind == "junk-after":
                    data = body(i) + bytes([rng.randint(1, 255)])
                else:
                    data = rng.randbytes(rng.randint(1, 30))
                if not readable(data):
                    break
            bad[i] = kind
        values.append(data)
    return values, bad


def test_corrupted_avro_records_go_to_the_dead_letter_topic_and_the_rest_out_exactly_once(
        spark, kafka, produce, output, topology, tmp_path):
    from kafka_eo_topology import Passthrough

    from kstorm import KafkaSpout
    from serdes import AvroSerde

    bootstrap = kafka.bootstrap_servers
    source = f"payments-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, 2)
    data, bad = avro_dataset(10_000, bad_every=100)
    placed: dict[tuple[int, int], int] = {}  # (partition, offset) -> index
    for p in (0, 1):
        indices = list(range(p, len(data), 2))
        acks = produce(bootstrap, source, [data[i] for i in indices], partition=p)
        placed.update({ack: i for ack, i in zip(acks, indices, strict=True)})
    assert len(bad) == 100

    builder = TopologyBuilder()
    builder.set_spout("payments", KafkaSpout(source, value_serde=AvroSerde(AVRO_SCHEMA),
                                             max_offsets_per_batch=4000))
    builder.set_bolt("pass", Passthrough(["id", "name", "amount"]), 2
                     ).shuffle_grouping("payments")
    builder.set_bolt(SINK_ID, KafkaSink(output, key="id", value_serde=JsonSerde(
        {"id": int, "name": str, "amount": float}))).shuffle_grouping("pass")
    conf = {"kafka.bootstrap.servers": bootstrap, "kstorm.checkpoint.dir": str(tmp_path),
            "kstorm.trigger": "available-now", "kstorm.spark.master": "local[2]"}
    handle = submit_topology(topology, conf, builder.create_topology())
    try:
        assert handle.await_termination(RUN_TIMEOUT)
    finally:
        handle.stop()

    good = {i for i in range(len(data)) if i not in bad}
    seen = values(consume(bootstrap, output))
    assert len(seen) == len(good) == 9_900
    assert Counter(r["id"] for r in seen) == Counter(good)
    assert all(r["amount"] == r["id"] / 4 and r["name"] == f"user-{r['id'] % 97}" for r in seen)

    letters = consume(bootstrap, f"{topology}.dead-letters", isolation="read_uncommitted")
    assert len(letters) == 100
    found = {}
    for letter in letters:
        headers = {k: v.decode() for k, v in letter.headers()}
        where = (int(headers["partition"]), int(headers["offset"]))
        index = placed[where]
        assert headers["topic"] == source
        assert headers["component"] == "payments"
        assert letter.value() == data[index]  # the original bytes
        assert headers["error_type"] == {"truncated": "Truncated",
                                         "junk-after": "SchemaMismatch"}.get(
            bad.get(index, "?"), headers["error_type"])
        assert headers["message"]
        found[index] = headers["error_type"]
    assert set(found) == set(bad)
    assert handle.progress["dead_letters"] == 100


# -- kill -9 ----------------------------------------------------------------------------------

KILL_RECORDS = 24_000
KILL_PER_BATCH = 1_200  # 20 batches: room for three kills before the input drains
START_TIMEOUT = 180.0  # Spark start-up on two busy cores, then the first commit


class KillScenario:
    """Runs ``python -m kafka_eo_topology``, kills it, restarts it; keeps a timeline."""

    def __init__(self, bootstrap: str, source: str, output: str, workdir: Path,
                 overlap: str = "auto") -> None:
        from kafka_eo_topology import KafkaTopologyProcess

        self.process_type = KafkaTopologyProcess
        self.bootstrap, self.source, self.output, self.dir = bootstrap, source, output, workdir
        self.name = f"keo{uuid.uuid4().hex[:6]}"
        self.overlap = overlap  # kstorm.commit.overlap
        self.runs: list[Any] = []
        self.kills = 0
        self.timeline: list[str] = []
        self.started = time.monotonic()

    def note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.started:7.1f}s {what}")

    def txid(self) -> int:
        """The sink group's last committed txid (-1 before any), read without a producer."""
        from sinks.kafka._book import txid_of_marker
        from sinks.kafka._read import read_group_offsets

        marker, _ = read_group_offsets(self.bootstrap, f"kstorm.{self.name}.{SINK_ID}", 10)
        found = txid_of_marker(marker)
        return -1 if found is None else found

    def start(self, env: dict[str, str] | None = None) -> Any:
        argv = ["--bootstrap", self.bootstrap, "--input", self.source, "--output", self.output,
                "--checkpoint", str(self.dir / "checkpoint"), "--name", self.name,
                "--max-per-batch", str(KILL_PER_BATCH), "--timeout", "240",
                "--commit-overlap", self.overlap]
        run = self.process_type.start(argv, self.dir, f"run{len(self.runs) + 1}", env)
        self.runs.append(run)
        self.note(f"run{len(self.runs)} started (sink txid {self.txid()})")
        return run

    def kill(self, run: Any, how: str) -> None:
        run.kill()
        self.kills += 1
        self.note(f"run{len(self.runs)} SIGKILLed {how}; sink txid {self.txid()}")

    def kill_after_a_commit(self, delay: float, commits: int = 1) -> None:
        before = self.txid()
        run = self.start()
        deadline = time.monotonic() + START_TIMEOUT
        while self.txid() < before + commits:
            assert run.exited() is None, f"run exited early\n{self.report()}"
            assert time.monotonic() < deadline, f"no commit\n{self.report()}"
            time.sleep(0.1)
        time.sleep(delay)
        self.kill(run, f"{delay:.2f}s after {commits} commit(s)")

    def checkpoint_txid(self) -> int:
        """The txid of the checkpoint's last committed batch (-1: none)."""
        from kstorm._runtime.checkpoint import CheckpointLayout
        from kstorm._spark.offset_log import last_committed_batch

        checkpoint = self.dir / "checkpoint"
        last = last_committed_batch(checkpoint)
        return -1 if last is None else CheckpointLayout(checkpoint).txid_base() + last

    def kill_paused(self, env: str, where: str, passes: int = 0,
                    spark_ahead: bool = False) -> str:
        """Kill a run whose sink is held by the test hook ``env`` after ``passes`` commits
        went through (``spark_ahead``: once Spark's commit log is past the sink); returns
        what was held."""
        marker = self.dir / "hook.marker"
        marker.unlink(missing_ok=True)
        run = self.start({env: str(marker)})
        for left in range(passes, -1, -1):
            deadline = time.monotonic() + START_TIMEOUT
            while not marker.exists():
                assert run.exited() is None, f"run exited early\n{self.report()}"
                assert time.monotonic() < deadline, f"no commit paused\n{self.report()}"
                time.sleep(0.02)
            held = marker.read_text().strip()
            if left:
                marker.unlink()  # let this commit go on
        deadline = time.monotonic() + 60
        while spark_ahead and self.checkpoint_txid() <= self.txid():
            assert time.monotonic() < deadline, f"Spark did not go on\n{self.report()}"
            time.sleep(0.02)
        self.kill(run, f"{where} ({held})")
        return held

    def delete_checkpoint(self) -> None:
        shutil.rmtree(self.dir / "checkpoint")
        self.note("checkpoint deleted")

    def finish(self) -> None:
        run = self.start()
        code = run.wait(300)
        self.note(f"run{len(self.runs)} exited with {code}")
        assert code == 0, f"the last run failed\n{self.report()}"

    def report(self) -> str:
        lines = ["timeline:", *self.timeline]
        for i, run in enumerate(self.runs, 1):
            lines += [f"--- run{i} (exit {run.exited()}) {run.log}:", run.tail()]
        return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("overlap", ["false", "true"])
def test_killed_three_times_every_output_is_read_committed_exactly_once(
        kafka, produce, output, tmp_path, hides_aborted, overlap):
    """Killed right after the sink's commit, inside it, and at a random moment.

    ``kstorm.commit.overlap = false``: the sink commits inside the batch, so a kill right
    after its commit leaves it a batch ahead of Spark's commit log (the next run skips that
    txid). On (``true``): the sink commits while Spark records the batch and runs the next,
    so a kill inside the sink's transaction leaves Spark's commit log a batch ahead (the next
    run runs that batch again from its logged offsets).
    """
    from kafka_eo_topology import input_records

    bootstrap = kafka.bootstrap_servers
    source = f"numbers-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, source, 4)
    records = input_records(KILL_RECORDS)
    for p in range(4):
        produce(bootstrap, source, records[p::4], partition=p)
    s = KillScenario(bootstrap, source, output, tmp_path, overlap)
    try:
        held = s.kill_paused(PAUSE_AFTER_ENV, "right after commit_transaction"
                             + (", before Spark's commit log: the sink is one batch ahead"
                                if overlap == "false" else ""), passes=2)
        s.kill_paused(PAUSE_ENV, "inside the transaction, after producing the batch",
                      spark_ahead=overlap != "false")
        s.kill_after_a_commit(delay=0.3, commits=3)
        s.delete_checkpoint()  # the last run resumes from the sink's committed offsets
        s.finish()
    finally:
        for run in s.runs:
            run.kill()

    expected = expected_output(KILL_RECORDS)
    committed, aborted = oracle(bootstrap, output, 3)
    got = Counter(json.loads(r.value)["id"] for r in committed)
    duplicated = {i: n for i, n in got.items() if n > 1}
    missing = set(expected) - set(got)
    assert not duplicated and not missing, (
        f"{len(duplicated)} duplicated, {len(missing)} missing\n{s.report()}")
    assert {json.loads(r.value)["id"]: json.loads(r.value)["square"] for r in committed} == expected
    assert aborted, "the kill inside the transaction left no aborted records"
    seen = Counter(r["id"] for r in values(consume(bootstrap, output)))
    if hides_aborted:
        assert seen == got
    else:  # tansu: librdkafka also shows the aborted records, and nothing else
        assert seen == got + Counter(json.loads(r.value)["id"] for r in aborted)
    _, offsets = read_group_offsets_of(bootstrap, s.name)
    assert offsets[source] == {p: KILL_RECORDS // 4 for p in range(4)}
    assert s.kills == 3
    if overlap == "false":
        ahead = int(held.split(" txid ")[1].split()[0])
        assert f"txid {ahead} is already committed" in s.runs[1].log.read_text(
            errors="replace")
    else:  # killed inside the transaction while Spark had recorded its batch
        assert "runs again from its logged offsets" in s.runs[2].log.read_text(
            errors="replace"), s.report()
    assert "resumes from sink 'out'" in s.runs[-1].log.read_text(errors="replace")
    print(f"\n{s.name}: {len(committed)} outputs exactly once; {len(aborted)} aborted records "
          f"in the log (hidden by Kafka{'' if hides_aborted else ', shown by tansu'})\n"
          + "\n".join(s.timeline))


def read_group_offsets_of(bootstrap: str, topology: str) -> tuple[int | None, dict]:
    from sinks.kafka._read import read_group_offsets

    return read_group_offsets(bootstrap, f"kstorm.{topology}.{SINK_ID}", 10)
