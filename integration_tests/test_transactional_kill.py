"""Seed 002's global count stays exact through kill -9 and a deleted checkpoint.

``python -m tx_topology`` runs TransactionalGlobalCount (partial counts in batch bolts, the
sum in a committer, the total added to Redis under the txid) over a
``MemoryTransactionalSpout``, a ``KafkaSpout`` or a coordinated spout of one's own (Storm's
``ITransactionalSpout``: a coordinator and two emitter tasks), in a subprocess with small
batches. Each test SIGKILLs the whole process session three times -- at a seeded random
moment after a commit, inside the sink's commit (``KSTORM_TEST_PAUSE_IN_COMMIT``), and at a
random moment again, after which the checkpoint is deleted -- and lets a last run finish.
The stored total must equal the number of tuples the spout holds (computed here), and the
txids must have gone on after the lost checkpoint (the sinks' records carry the txid and
the spout's transactional metadata).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from _runs import Runs
from tx_topology import GLOBAL_KEY, PARTITIONS, memory_data, range_words

from kstorm._kafka.client import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS = 300          # per partition (+13 p): 1,278 tuples, 34 transactions of 10 per partition
KAFKA_RECORDS = 1_600


def _kill_three_times_and_lose_the_checkpoint(runs: Runs, checkpoint: Path) -> None:
    runs.kill_at_random()
    runs.kill_in_commit()
    runs.kill_at_random()
    before = runs.txid()
    shutil.rmtree(checkpoint, ignore_errors=True)
    runs.timeline.append(f"checkpoint deleted at txid {before}")
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert runs.txid() > before, "\n".join(runs.timeline)


def test_memory_spout_global_count_exact_after_kills_and_lost_checkpoint(
        spark: Any, redis_server: Any, tmp_path: Path) -> None:
    name = f"txk-{uuid.uuid4().hex[:6]}"
    checkpoint = tmp_path / "checkpoint"
    argv = ["--spout", "memory", "--rows", str(ROWS), "--redis-url", redis_server.url,
            "--checkpoint", str(checkpoint), "--name", name]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="tx_topology")
    _kill_three_times_and_lose_the_checkpoint(runs, checkpoint)
    expected = sum(len(rows) for rows in memory_data(ROWS).values())
    total = int(runs.client.get(f"{name}:{GLOBAL_KEY}"))
    assert total == expected, "\n".join(runs.timeline)


def test_kafka_spout_global_count_exact_after_kills_and_lost_checkpoint(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    name = f"txkk-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-words"
    create_topic(kafka.bootstrap_servers, topic, PARTITIONS)
    for p in range(PARTITIONS):
        produce(kafka.bootstrap_servers, topic,
                [f"w{i}" for i in range(KAFKA_RECORDS // PARTITIONS)], partition=p)
    checkpoint = tmp_path / "checkpoint"
    argv = ["--spout", "kafka", "--bootstrap", kafka.bootstrap_servers, "--topic", topic,
            "--expected", str(KAFKA_RECORDS), "--redis-url", redis_server.url,
            "--checkpoint", str(checkpoint), "--name", name]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="tx_topology")
    _kill_three_times_and_lose_the_checkpoint(runs, checkpoint)
    assert int(runs.client.get(f"{name}:{GLOBAL_KEY}")) == KAFKA_RECORDS


def test_coordinated_spout_global_count_exact_after_kills_and_lost_checkpoint(
        spark: Any, redis_server: Any, tmp_path: Path) -> None:
    """A coordinated spout's transactions are replayed from the coordinator's metadata:
    after each kill the emitters emit the same words again for the same txid, and after the
    lost checkpoint the coordinator goes on from the metadata the sink recorded."""
    name = f"txkc-{uuid.uuid4().hex[:6]}"
    checkpoint = tmp_path / "checkpoint"
    rows = 1_200  # 30 transactions of 40 words, split over the two emitter tasks
    argv = ["--spout", "range", "--rows", str(rows), "--redis-url", redis_server.url,
            "--checkpoint", str(checkpoint), "--name", name]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="tx_topology")
    _kill_three_times_and_lose_the_checkpoint(runs, checkpoint)
    total = int(runs.client.get(f"{name}:{GLOBAL_KEY}"))
    assert total == len(range_words(rows)), "\n".join(runs.timeline)
    journal = tmp_path / f"{name}-journal"
    for task in (0, 1):
        lines = [line.split() for line in (journal / f"task-{task}").read_text().splitlines()]
        txids = {int(txid) for txid, _, _ in lines}
        assert txids == set(range(1, max(txids) + 1)), (task, sorted(txids))  # none skipped
        # cleanup_before only ever names a txid that had committed before this one ran
        assert all(cleaned == "None" or int(cleaned) < int(txid)
                   for txid, cleaned, _ in lines), lines
