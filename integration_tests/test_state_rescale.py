"""A stateful word count rescaled 2 -> 4 -> 3 tasks through kill -9 stays exact (redis).

``python -m wc_topology`` (KafkaSpout -> split -> WordCount, a ``BaseStatefulBolt`` whose
``KeyValueState`` is in the ``redis`` provider -> RedisSink) runs with 2 WordCount tasks
and is SIGKILLed once the sink committed txid 16; restarted with 4 (each key moves to the
task of its key group, ``kstorm/state/rescale.py``) and SIGKILLed inside the first commit
after the change (the tasks had prepared that batch); restarted with 3, which settles the 4
tasks at the sinks' txid, moves their keys again, and runs to the topic's end. Every word's
stored count must equal its count in the produced sentences; the state is 3 tasks at the
sink's txid.

A global-grouped stateful bolt keeps refusing another parallelism, naming the reason.
"""

from __future__ import annotations

import json
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
           ) -> tuple[Runs, Counter[str]]:
    name = f"wcr-{provider}-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-sentences"
    create_topic(kafka.bootstrap_servers, topic, 2)
    sentences = [json.loads(r)["sentence"] for r in sentence_records(SENTENCES, seed=23)]
    produce(kafka.bootstrap_servers, topic, sentences)
    argv = ["--bootstrap", kafka.bootstrap_servers, "--redis-url", redis_server.url,
            "--topic", topic, "--checkpoint", str(tmp_path / "checkpoint"), "--name", name,
            "--provider", provider]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="wc_topology")
    return runs, Counter(w for s in sentences for w in s.split())


def _with(runs: Runs, parallelism: int) -> None:
    runs.argv = [a for a in runs.argv if not a.startswith("--parallelism=")]
    runs.argv.append(f"--parallelism={parallelism}")
    runs.timeline.append(f"WordCount parallelism {parallelism}")


def _kill_past(runs: Runs, txid: int) -> None:
    """SIGKILL the next run once the sink has committed past ``txid``."""
    run = runs.start()
    assert runs.await_commit(run, txid), runs.report(run)
    run.kill()
    runs.timeline.append(f"run{runs.count} killed past txid {txid}, at txid {runs.txid()}")


def _stored(runs: Runs) -> dict[str, int]:
    keys = [k for k in runs.client.keys(f"{runs.name}:*")]
    return {k.decode().split(":", 1)[1]: int(runs.client.get(k)) for k in keys}


@pytest.mark.parametrize("provider", ["redis", "redis-db1"])
def test_word_count_rescaled_two_four_three_through_kills_is_exact(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any,
        provider: str) -> None:
    runs, truth = _setup(kafka, redis_server, tmp_path, produce, provider)
    _with(runs, 2)
    _kill_past(runs, 15)
    _with(runs, 4)
    runs.kill_in_commit()
    _with(runs, 3)
    assert "(exited first)" not in "\n".join(runs.timeline), "\n".join(runs.timeline)
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert _stored(runs) == dict(truth), "\n".join(runs.timeline)
    where = runs.client.connection_pool.connection_kwargs
    state = runs.client if provider == "redis" else redis.Redis(
        host=where["host"], port=where["port"], db=int(where.get("db") or 0) + 1)
    base = f"kstorm:state:{runs.name}:count"
    assert [int(state.hget(f"{base}:{t}$meta", "committed")) for t in range(3)] == [
        runs.txid()] * 3
    assert not state.exists(f"{base}:3", f"{base}:3$meta")  # the fourth task is gone
    logs = "".join(log.read_text(errors="replace") for log in runs.logs)
    assert "moved from 2 task(s) to 4 by key group" in logs, "\n".join(runs.timeline)
    assert "moved from 4 task(s) to 3 by key group" in logs, "\n".join(runs.timeline)


def test_a_global_grouped_word_count_refuses_another_parallelism(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    runs, truth = _setup(kafka, redis_server, tmp_path, produce, "redis")
    runs.argv.append("--grouping=global")
    _with(runs, 1)
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert _stored(runs) == dict(truth)
    _with(runs, 2)
    assert runs.finish() == 4, "\n".join(runs.timeline)  # refused: StateError
    log = (tmp_path / f"run{runs.count}.log").read_text(errors="replace")
    assert "now runs 2 task(s)" in log and "global grouping" in log, log[-3000:]
    assert _stored(runs) == dict(truth)
