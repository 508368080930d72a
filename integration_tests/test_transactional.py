"""Transactional topologies (seed 002) on a real Spark session, real Redis and a real broker.

- seed 002's global count over a ``MemoryTransactionalSpout``, with B's output through C
  and D: the total is exact and C and D finish each batch only after B, in txid order;
- a batch bolt raising ``FailedException`` on the first attempt of chosen transactions:
  those replay with the same txid and a new attempt id, the topology goes on, exact;
- Redis killed and restarted within the retry budget: exact, nothing stops;
- an opaque spout whose replay emits a different batch: the opaque Redis sink converges to
  the replay's content (seed 002's prevCount story), and the next transaction goes on
  where the replay stopped, not where the first attempt did (seed 002's A/B story);
- a coordinated spout of your own (``ITransactionalSpout``): its coordinator chains the
  metadata and ends the run (``is_ready``), each of its emitter tasks emits its part,
  ``cleanup_before`` hears of committed txids only;
- a 1 MB undecodable record: dead-lettered (truncated, with headers saying so), every good
  record counted once.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
import tx_topology
from tx_topology import GLOBAL_KEY, KeyedCount, RangeSpout, global_count, memory_data

from kstorm import Fields, KafkaSpout, submit_topology
from kstorm.embedded import EmbeddedRedis
from kstorm.errors import KstormError, SinkError
from kstorm.sink import BaseSink, SinkBatch
from kstorm.transactional import (
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

pytestmark = pytest.mark.integration

ROWS = 60
TAKE = 10  # rows per partition and batch: 8 transactions over memory_data(ROWS)


def _conf(checkpoint: Path, **extra: Any) -> dict[str, Any]:
    return {"kstorm.checkpoint.dir": str(checkpoint), "kstorm.trigger": "available-now",
            **extra}


def _run(name: str, conf: dict[str, Any], topology: Any, timeout: float = 300) -> Any:
    handle = submit_topology(name, conf, topology)
    assert handle.await_termination(timeout), f"{name} did not finish in {timeout}s"
    return handle


def _total() -> int:
    return sum(len(rows) for rows in memory_data(ROWS).values())


def test_global_count_commits_in_txid_order_through_c_and_d(
        spark: Any, redis_server: Any, checkpoint_dir: Path) -> None:
    """Seed 002: "the first batch has id "1", the second has id "2", and so on"."""
    prefix = f"gc-{uuid.uuid4().hex[:6]}"
    tx_topology.ORDER.clear()
    spout = MemoryTransactionalSpout(memory_data(ROWS), Fields("word"), TAKE)
    topology = global_count(spout, redis_server.url, prefix, topology_id=prefix,
                            downstream=True)
    _run(prefix, _conf(checkpoint_dir), topology)

    client = redis.Redis.from_url(redis_server.url)
    assert int(client.get(f"{prefix}:{GLOBAL_KEY}")) == _total()
    order = list(tx_topology.ORDER)
    txids = [txid for who, txid in order if who == "B"]
    assert len(txids) >= 8, order
    assert txids[0] == 1, order
    assert txids == sorted(txids) and len(set(txids)) == len(txids), order
    # each transaction: B (the committer) finishes, then C, then D, before the next starts
    assert order == [(who, txid) for txid in txids for who in ("B", "C", "D")], order


def test_failed_exception_replays_the_batch_with_a_new_attempt(
        spark: Any, redis_server: Any, checkpoint_dir: Path, tmp_path: Path) -> None:
    prefix = f"gcf-{uuid.uuid4().hex[:6]}"
    tx_topology.ATTEMPTS.clear()
    fails = tmp_path / "fails"
    fails.mkdir()
    spout = MemoryTransactionalSpout(memory_data(ROWS), Fields("word"), TAKE)
    topology = global_count(spout, redis_server.url, prefix, topology_id=prefix,
                            fail_dir=str(fails), fail_txids=(1, 4))
    handle = _run(prefix, _conf(checkpoint_dir, **{"kstorm.transaction.backoff.ms": 50}),
                  topology)

    client = redis.Redis.from_url(redis_server.url)
    assert int(client.get(f"{prefix}:{GLOBAL_KEY}")) == _total()
    assert sorted(p.name for p in fails.iterdir()) == ["failed-1", "failed-4"]
    seen: dict[int, list[int]] = {}
    for txid, attempt in tx_topology.ATTEMPTS:
        seen.setdefault(txid, []).append(attempt)
    # the failed transactions reached the committer once, on their second attempt
    first_attempts = {txid: attempts[0] for txid, attempts in seen.items()}
    assert first_attempts[1] != first_attempts[2] and first_attempts[4] != first_attempts[3]
    assert all(len(a) == 1 for a in seen.values()), seen
    counters = handle.progress["components"]["__transactions"]
    assert counters == {"failed": 2}, counters


def test_a_batch_failing_every_attempt_is_dead_lettered_and_the_topology_goes_on(
        spark: Any, redis_server: Any, checkpoint_dir: Path, tmp_path: Path) -> None:
    prefix = f"gcd-{uuid.uuid4().hex[:6]}"
    data = memory_data(ROWS)
    spout = MemoryTransactionalSpout(data, Fields("word"), TAKE)
    topology = global_count(spout, redis_server.url, prefix, topology_id=prefix,
                            fail_dir=str(tmp_path), fail_txids=(2,), always_fail=True)
    handle = _run(prefix, _conf(checkpoint_dir, **{
        "kstorm.transaction.max.attempts": 2, "kstorm.transaction.backoff.ms": 10,
        "kstorm.transaction.failure.policy": "dead-letter"}), topology)

    in_txid_2 = [row for rows in data.values() for row in rows[1 * TAKE:2 * TAKE]]  # 2nd batch
    assert 2 not in {txid for txid, _ in tx_topology.ATTEMPTS[-1:]}  # no committer for it
    client = redis.Redis.from_url(redis_server.url)
    assert int(client.get(f"{prefix}:{GLOBAL_KEY}")) == _total() - len(in_txid_2)
    dead = handle.dead_letters
    assert len(dead) == len(in_txid_2)
    # each dead letter is one spout tuple: (its TransactionAttempt, the word)
    assert sorted(re.findall(r"'(w\d+)'", d["values"])[0] for d in dead) == \
        sorted(r[0] for r in in_txid_2)
    assert all("transaction 2 failed 2 times" in d["message"] for d in dead), dead[0]
    counters = handle.progress["components"]["__transactions"]
    assert counters == {"failed": 2, "dead_lettered": 1}, counters


def test_redis_outage_shorter_than_the_retry_budget(spark: Any, checkpoint_dir: Path) -> None:
    prefix = f"gco-{uuid.uuid4().hex[:6]}"
    with EmbeddedRedis(appendonly=True) as server:
        spout = MemoryTransactionalSpout(memory_data(ROWS * 3), Fields("word"), TAKE)
        topology = global_count(spout, server.url, prefix, topology_id=prefix)
        conf = _conf(checkpoint_dir, **{"kstorm.trigger": "continuous",
                                        "kstorm.trigger.interval.ms": 100,
                                        "kstorm.transaction.max.attempts": 30,
                                        "kstorm.transaction.backoff.ms": 200})
        handle = submit_topology(prefix, conf, topology)
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        expected = sum(len(r) for r in memory_data(ROWS * 3).values())
        try:
            _wait(lambda: _int(client, f"{prefix}:{GLOBAL_KEY}") > 0, 180)
            server.kill()
            time.sleep(3.0)
            server.start()
            _wait(lambda: _int(client, f"{prefix}:{GLOBAL_KEY}") >= expected, 240)
            time.sleep(1.0)  # a double count would show up now
            assert _int(client, f"{prefix}:{GLOBAL_KEY}") == expected
            assert handle.is_active
        finally:
            handle.stop()


class GateSink(BaseSink):
    """Fails txid ``fail_txid`` while ``marker`` exists (a crash between two sinks' commits)."""

    def __init__(self, marker: str, fail_txid: int) -> None:
        self.marker, self.fail_txid = marker, fail_txid

    def commit(self, batch: SinkBatch) -> None:
        if batch.txid == self.fail_txid and Path(self.marker).exists():
            raise SinkError(f"sink 'verify' refuses txid {batch.txid} (test)")


def _word_counts(spout: Any, redis_url: str, prefix: str, gate: GateSink) -> Any:
    builder = TransactionalTopologyBuilder(prefix, "spout", spout)
    builder.set_bolt("count", KeyedCount(), 2).fields_grouping("spout", Fields("word"))
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(redis_url),
                                        key=prefix + ":{word}", value="count", merge="add",
                                        mode="opaque")).shuffle_grouping("count")
    builder.set_bolt("verify", gate).shuffle_grouping("count")
    topology = builder.build_topology()
    assert [b.id for b in topology.bolts()][-2:] == ["store", "verify"]  # sinks commit in order
    return topology


def test_opaque_replay_of_a_different_batch_converges(
        spark: Any, redis_server: Any, checkpoint_dir: Path, tmp_path: Path) -> None:
    prefix = f"op-{uuid.uuid4().hex[:6]}"
    fail_txid = 2
    before = fail_txid - 1  # whole batches before it (txids start at 1)
    first = {p: [["x"] for _ in range(40)] for p in range(2)}
    # what the partitions hold when txid 2 is replayed: its rows and all later ones changed
    # (seed 002's prevCount story: the replayed batch counts x differently, and adds y)
    second = {p: rows[:before * 5] + [["x"] if i % 2 else ["y"] for i in range(30)]
              for p, rows in first.items()}
    marker = tmp_path / "gate-closed"
    marker.write_text("")
    gate = GateSink(str(marker), fail_txid)
    conf = _conf(checkpoint_dir, **{"kstorm.transaction.max.attempts": 1})

    topology = _word_counts(OpaqueMemoryTransactionalSpout(first, Fields("word"), 5),
                            redis_server.url, prefix, gate)
    handle = submit_topology(prefix, conf, topology)
    with pytest.raises(KstormError, match=r"txid 2 .*'verify'"):
        handle.await_termination(300)
    client = redis.Redis.from_url(redis_server.url)
    # the opaque store committed txid 2 from the first batch before the gate refused it
    assert _stored(client, prefix) == Counter(
        row[0] for rows in first.values() for row in rows[:(before + 1) * 5])

    marker.unlink()
    # the replay takes 3 rows a partition, not 5: txid 3 must go on from row 8 (where the
    # replay stopped), not from row 10 (where the first attempt did), or rows 8-9 are lost
    topology = _word_counts(OpaqueMemoryTransactionalSpout(second, Fields("word"), 3),
                            redis_server.url, prefix, gate)
    _run(prefix, conf, topology)
    expected = Counter(row[0] for rows in first.values() for row in rows[:before * 5])
    expected.update(row[0] for rows in second.values() for row in rows[before * 5:])
    assert _stored(client, prefix) == expected


def test_a_coordinated_spout_of_your_own_emits_from_every_task_and_cleans_up(
        spark: Any, redis_server: Any, checkpoint_dir: Path, tmp_path: Path) -> None:
    prefix = f"co-{uuid.uuid4().hex[:6]}"
    words = [f"w{i % 11}" for i in range(47)]
    journal = tmp_path / "journal"
    journal.mkdir()
    topology = global_count(RangeSpout(words, 7, str(journal)), redis_server.url, prefix,
                            topology_id=prefix, spout_tasks=2)
    _run(prefix, _conf(checkpoint_dir), topology)

    client = redis.Redis.from_url(redis_server.url)
    assert int(client.get(f"{prefix}:{GLOBAL_KEY}")) == len(words)
    lines = {task: [tuple(line.split()) for line in
                    (journal / f"task-{task}").read_text().splitlines()] for task in (0, 1)}
    for task, emitted in lines.items():
        txids = [int(txid) for txid, _, _ in emitted]
        # one emit per transaction and task: 7 transactions of 7 words (the last of 5)
        assert txids == list(range(1, 8)), (task, emitted)
        assert sum(int(n) for _, _, n in emitted) == len(range(task, len(words), 2))
        cleaned = [None if c == "None" else int(c) for _, c, _ in emitted]
        # only txids already committed, never the running one, and they move on
        done = [c for c in cleaned if c is not None]
        assert all(c < txid for c, txid in zip(cleaned, txids, strict=True) if c is not None)
        assert done == sorted(done) and done and done[-1] >= txids[-1] - 2, emitted


def test_one_megabyte_bad_record_is_dead_lettered(
        spark: Any, kafka: Any, redis_server: Any, checkpoint_dir: Path, topic_name: str,
        produce: Any) -> None:
    from confluent_kafka import Consumer, Producer

    from kstorm._kafka.client import client_config, create_topic

    create_topic(kafka.bootstrap_servers, topic_name, 1)
    dead_topic = f"{topic_name}.dlq"
    create_topic(kafka.bootstrap_servers, dead_topic, 1)
    good = [json.dumps({"word": f"w{i % 7}"}).encode() for i in range(300)]
    producer = Producer({**client_config(kafka.bootstrap_servers), "message.max.bytes": 4_000_000})
    for i, value in enumerate(good):
        producer.produce(topic_name, value)
        if i == 150:
            producer.produce(topic_name, b"\xff" * (1 << 20))  # 1 MB, not JSON
    assert producer.flush(30) == 0

    prefix = f"dl-{uuid.uuid4().hex[:6]}"
    spout = KafkaSpout(topic_name, value_serde=JsonSerde({"word": str}))
    topology = global_count(spout, redis_server.url, prefix, topology_id=prefix)
    conf = _conf(checkpoint_dir, **{"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                    "kstorm.dead.letter.topic": dead_topic})
    handle = _run(prefix, conf, topology)
    client = redis.Redis.from_url(redis_server.url)
    assert int(client.get(f"{prefix}:{GLOBAL_KEY}")) == len(good)
    assert len(handle.dead_letters) == 1

    consumer = Consumer({**client_config(kafka.bootstrap_servers), "group.id": prefix,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(dead_topic, 0, 0)])
    try:
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
        assert msg is not None and msg.error() is None
        headers = dict(msg.headers())
        assert headers["kstorm.truncated"] == b"true"
        assert headers["kstorm.original.bytes"] == str(1 << 20).encode()
        assert len(msg.value()) < 1_000_000 and set(msg.value()) == {0xFF}
    finally:
        consumer.close()


def _stored(client: redis.Redis, prefix: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for key in client.scan_iter(f"{prefix}:*"):
        word = key.decode()[len(prefix) + 1:]
        out[word] = int(client.get(key))
    return out


def _int(client: redis.Redis, key: str) -> int:
    try:
        raw = client.get(key)
    except redis.RedisError:
        return 0
    return 0 if raw is None else int(raw)


def _wait(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)

