"""Storm's tick tuples through kill -9 and a lost checkpoint: every tick's count stored once.

``python -m tick_topology`` runs a ``KafkaSpout`` of words -> storm-starter's rolling count
as a ``BaseStatefulBolt`` (2 tasks, fields grouping: it counts words in its
``KeyValueState`` and, on each 1 s tick tuple, emits ``(word, count)`` and deletes them)
-> an exactly-once RedisSink adding each emitted count to the word's stored total. The
bolt's state lives on the ``redis`` provider in the sink's database, so it commits in the
sink's atomic step and outlives the checkpoint. The test SIGKILLs the whole process
session at a seeded random moment, inside the sink's commit and at a random moment again,
deletes the checkpoint and lets a last run finish.

A count a tick emitted must be stored exactly once: not lost with a killed batch, not
added twice when a batch is replayed, and not counted again or dropped when the restart
without a checkpoint replans the ticks from the clock. So every word's stored count must
equal the number of times it was produced (computed here), and the sink's txids must have
gone on after the lost checkpoint.
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _runs import Runs

from kstorm._kafka.client import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORDS = 1_500  # 2 partitions, batches of 40 records: 38 batches, and a tick every second


def _stored(runs: Runs) -> dict[str, int]:
    prefix = f"{runs.name}:count:"
    return {key.decode()[len(prefix):]: int(runs.client.get(key))
            for key in runs.client.scan_iter(prefix + "*")}


def test_tick_counts_of_a_stateful_bolt_exact_after_kills_and_a_lost_checkpoint(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    name = f"tkk-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-words"
    create_topic(kafka.bootstrap_servers, topic, 2)
    words = [f"w{(i * 7) % 23}" for i in range(WORDS)]
    for partition in range(2):
        produce(kafka.bootstrap_servers, topic, words[partition::2], partition=partition)
    checkpoint = tmp_path / "checkpoint"
    argv = ["--topic", topic, "--bootstrap", kafka.bootstrap_servers,
            "--redis-url", redis_server.url, "--checkpoint", str(checkpoint),
            "--name", name, "--expected", str(WORDS)]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="tick_topology")

    runs.kill_at_random()
    runs.kill_in_commit()
    runs.kill_at_random()
    assert "(exited first)" not in "\n".join(runs.timeline), "\n".join(runs.timeline)
    before, stored = runs.txid(), sum(_stored(runs).values())
    shutil.rmtree(checkpoint, ignore_errors=True)
    runs.timeline.append(f"checkpoint deleted at txid {before}, {stored} of {WORDS} stored")
    assert stored < WORDS, "\n".join(runs.timeline)  # counts still to come after the loss
    assert runs.finish() == 0, "\n".join(runs.timeline)

    assert _stored(runs) == dict(Counter(words)), "\n".join(runs.timeline)
    assert runs.txid() > before, "\n".join(runs.timeline)
