"""A stateful word count stays exact through kill -9, with each state provider (seed 000).

``python -m wc_topology`` runs KafkaSpout -> split -> WordCount (``BaseStatefulBolt``,
``KeyValueState``) -> RedisSink (highest running count per word) in a subprocess with small
batches. Each test SIGKILLs the whole process session at a seeded random moment, inside the
sink's commit, right after the sink's commit (the sink one batch ahead of the state's
commit and of Spark's commit log) and at a random moment again, then:

- ``redis`` provider, on the sink's database (the state commits in the sink's atomic step)
  or on database 1 (a second step after the sink's, reconciled at start): deletes the
  checkpoint and lets a last run finish: it resumes from the sink's record and the state
  settled at the same txid by seed 000's recovery;
- ``spark`` provider: lets a last run finish, then deletes the checkpoint: the next start
  is refused (the state lived only there) and Redis is left as it was.

Every word's stored count must equal its count in the produced sentences (computed here).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from _runs import Runs
from topologies import sentence_records

from kstorm._kafka.client import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SENTENCES = 2_400  # 60 batches of 40 records


def _setup(kafka: Any, redis_server: Any, tmp_path: Path, produce: Any, provider: str
           ) -> tuple[Runs, Path, Counter[str]]:
    name = f"wck-{provider}-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-sentences"
    create_topic(kafka.bootstrap_servers, topic, 2)
    sentences = [json.loads(r)["sentence"] for r in sentence_records(SENTENCES, seed=11)]
    produce(kafka.bootstrap_servers, topic, sentences)
    checkpoint = tmp_path / "checkpoint"
    argv = ["--bootstrap", kafka.bootstrap_servers, "--redis-url", redis_server.url,
            "--topic", topic, "--checkpoint", str(checkpoint), "--name", name,
            "--provider", provider]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="wc_topology")
    return runs, checkpoint, Counter(w for s in sentences for w in s.split())


def _kill_four_times(runs: Runs) -> None:
    runs.kill_at_random()
    runs.kill_in_commit()
    runs.kill_in_commit(after=True)
    runs.kill_at_random()
    assert "(exited first)" not in "\n".join(runs.timeline), "\n".join(runs.timeline)


def _stored(runs: Runs) -> dict[str, int]:
    keys = [k for k in runs.client.keys(f"{runs.name}:*")]
    return {k.decode().split(":", 1)[1]: int(runs.client.get(k)) for k in keys}


@pytest.mark.parametrize("provider", ["redis", "redis-db1"])
def test_redis_provider_word_count_exact_after_kills_and_a_deleted_checkpoint(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any,
        provider: str) -> None:
    runs, checkpoint, truth = _setup(kafka, redis_server, tmp_path, produce, provider)
    _kill_four_times(runs)
    before = runs.txid()
    shutil.rmtree(checkpoint, ignore_errors=True)
    runs.timeline.append(f"checkpoint deleted at txid {before}")
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert _stored(runs) == dict(truth), "\n".join(runs.timeline)
    where = runs.client.connection_pool.connection_kwargs
    state = runs.client if provider == "redis" else redis.Redis(
        host=where["host"], port=where["port"], db=int(where.get("db") or 0) + 1)
    meta = state.hget(f"kstorm:state:{runs.name}:count:0$meta", "committed")
    assert int(meta) == runs.txid()  # the state is at the sink's txid
    # one atomic step where the sink and the provider share the database, else two
    one_step = any("atomic step" in log.read_text(errors="replace") for log in runs.logs)
    assert one_step == (provider == "redis"), "\n".join(runs.timeline)


def test_spark_provider_word_count_exact_after_kills_and_refused_without_checkpoint(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    runs, checkpoint, truth = _setup(kafka, redis_server, tmp_path, produce, "spark")
    _kill_four_times(runs)
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert _stored(runs) == dict(truth), "\n".join(runs.timeline)
    shutil.rmtree(checkpoint)
    assert runs.finish() == 4, "\n".join(runs.timeline)  # refused: StateError
    assert "'count' (a stateful bolt" in (tmp_path / f"run{runs.count}.log").read_text()
    assert _stored(runs) == dict(truth)
