"""Processing-time aggregate sessions through kill -9 and a lost checkpoint: exact, once.

``python -m aggregate_pt_topology`` (2,400 clicks of 6 users in blocks, 36 a batch ->
``WindowedAggregate`` processing-time sessions, gap 1 s -> exactly-once RedisSinks) is
SIGKILLed at a random moment past txid 15, inside a sink's commit, at a random moment,
right after a sink's commit; then its checkpoint is taken away (moved aside, so this test
can still read it) and a last run finishes, resuming from the sink's record.

A click's time is its batch's: Spark's ``batchTimestampMs`` in its offset log, the same when
a killed batch is replayed. So the ground truth is computed from the offset logs and the
produced clicks' offsets alone: each batch's clicks are the offsets between the previous
batch's end and its own; the batches are the lost checkpoint's below the txid the last run
resumed at, then the new checkpoint's; per user, the batch times of its clicks cut where
neighbours are more than the gap apart; a session ``[first, last + gap]``. Every session
must be stored with its end, click count and sum of ids, each emitted once; nothing else.
A replayed batch stamped with another time would store a session twice (another start).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from _runs import Runs
from aggregate_pt_topology import GAP_MS, generate_clicks
from eo_topology import produce_events

from kstorm._kafka.client import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Batch = tuple[int, dict[int, int]]  # (batchTimestampMs, partition -> end offset)


def _batches(checkpoint: Path, topic: str) -> list[Batch]:
    """The committed batches of a checkpoint, in batch id order."""
    committed = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    out = []
    for batch_id in range(max(committed) + 1):
        assert batch_id in committed, f"batch {batch_id} of {checkpoint} never committed"
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        ends = json.loads(lines[2])[topic]
        out.append((int(json.loads(lines[1])["batchTimestampMs"]),
                    {int(p): int(o) for p, o in ends.items()}))
    return out


def ground_truth(batches: list[Batch], placed: list[tuple[int, int]], clicks: list[Any]
                 ) -> dict[tuple[str, int], dict[str, int]]:
    """Sessions ``(user, start) -> {"end", "count", "checksum"}`` (module docstring)."""
    at: dict[tuple[int, int], int] = {}  # (partition, offset) -> the batch's time
    begin: dict[int, int] = defaultdict(int)
    for when, ends in batches:
        for partition, end in ends.items():
            for offset in range(begin[partition], end):
                at[partition, offset] = when
            begin[partition] = max(begin[partition], end)
    assert len(at) == len(clicks), "the batches do not hold every click once"
    by_user: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for click, where in zip(clicks, placed, strict=True):
        by_user[click.user].append((at[where], click.id))
    truth = {}
    for user, points in by_user.items():
        points.sort()
        runs: list[list[tuple[int, int]]] = []
        for p in points:
            if runs and p[0] - runs[-1][-1][0] <= GAP_MS:
                runs[-1].append(p)
            else:
                runs.append([p])
        for run in runs:
            truth[user, run[0][0]] = {"end": run[-1][0] + GAP_MS, "count": len(run),
                                      "checksum": sum(i for _, i in run)}
    return truth


def _stored(runs: Runs, kind: str) -> dict[tuple[str, int], bytes]:
    prefix = f"{runs.name}:{kind}:"
    keys = sorted(runs.client.scan_iter(prefix + "*", count=1000))
    values = runs.client.mget(keys) if keys else []
    out = {}
    for key, value in zip(keys, values, strict=True):
        user, _, start = key.decode()[len(prefix):].rpartition(":")
        out[user, int(start)] = value
    return out


def _kill_mid_stream(runs: Runs, after_txid: int) -> None:
    """SIGKILL the first run at a random moment once the sink is past ``after_txid``."""
    run = runs.start()
    assert runs.await_commit(run, after_txid), runs.report(run)
    time.sleep(runs.rng.uniform(0.0, 1.5))
    run.kill()
    runs.timeline.append(f"run{runs.count} killed at a random moment, txid {runs.txid()}")


def test_processing_time_sessions_exact_and_once_after_kills_and_a_lost_checkpoint(
        kafka: Any, redis_server: Any, tmp_path: Path) -> None:
    name = f"apk-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-clicks"
    create_topic(kafka.bootstrap_servers, topic, 2)
    clicks = generate_clicks()
    placed = produce_events(kafka.bootstrap_servers, topic, clicks)
    checkpoint = tmp_path / "checkpoint"
    argv = ["--topic", topic, "--bootstrap", kafka.bootstrap_servers,
            "--redis-url", redis_server.url, "--checkpoint", str(checkpoint),
            "--name", name, "--clicks", str(len(clicks))]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="aggregate_pt_topology")

    _kill_mid_stream(runs, after_txid=15)
    runs.kill_in_commit()
    runs.kill_at_random()
    runs.kill_in_commit(after=True)
    timeline = lambda: "\n".join(runs.timeline)  # noqa: E731
    assert "(exited first)" not in timeline(), timeline()
    lost = tmp_path / "lost-checkpoint"
    checkpoint.rename(lost)
    before = runs.txid()
    runs.timeline.append(f"checkpoint taken away at txid {before}, "
                         f"{len(_stored(runs, 'session'))} sessions stored")
    code = runs.finish()
    last_log = runs.logs[-1].read_text(errors="replace")
    assert code == 0, f"{timeline()}\n--- last run ---\n{last_log[-3000:]}"
    resumed = re.search(r"resumes from sink '\w+' at txid (\d+)", last_log)
    assert resumed, timeline()
    base = int(resumed.group(1))  # the new checkpoint's batch 0; the lost one's txids from 0
    old = _batches(lost, topic)[:base]
    assert len(old) == base, timeline()
    truth = ground_truth(old + _batches(checkpoint, topic), placed, clicks)

    sessions = {k: json.loads(v) for k, v in _stored(runs, "session").items()}
    wrong = [(k, truth.get(k), sessions.get(k)) for k in sorted(set(truth) | set(sessions))
             if truth.get(k) != sessions.get(k)]
    assert not wrong, f"{len(wrong)} of {len(truth)} sessions differ: {wrong[:5]}\n{timeline()}"
    fires = {k: int(v) for k, v in _stored(runs, "fires").items()}
    assert fires == dict.fromkeys(truth, 1), timeline()
    assert sum(1 for s in truth.values() if s["count"] > 36) > 5  # sessions span batches
    print(f"\n{name}: {len(truth)} sessions exact, each emitted once, resumed at txid "
          f"{base}\n{timeline()}")
