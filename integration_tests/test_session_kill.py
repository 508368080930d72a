"""Session windows on Spark through kill -9 and a lost checkpoint: every session exact, once.

Both session windows: a windowed bolt's, and (``--aggregate``) the built-in
``WindowedAggregate``'s, on the same clicks and ground truth.

``python -m session_topology`` runs a ``KafkaSpout`` of clicks (2 partitions, 36 records a
batch) -> a session-windowed bolt (event time, gap 5 s, lag 1 s, fields grouping on the
user, 2 tasks, its windows on the ``redis`` provider) -> exactly-once RedisSinks storing each
closed session under ``<name>:session:<user>:<start>`` and counting its emissions under
``<name>:fires:<user>:<start>``. Most sessions span several batches, so the kills cut open
sessions: the test SIGKILLs the whole process session at a seeded random moment, inside a
sink's commit and at a random moment again, deletes the checkpoint and lets a last run
finish.

Ground truth, computed here from the produced clicks alone by the definition: per user,
the clicks sorted by ``ts`` are cut where neighbours are more than the gap apart; a session
``[first, last + gap]`` closes iff its end is below the final watermark, min over the
partitions of (latest ``ts``) - lag. The clicks are in ``ts`` order in each partition, so
none is late. Every closed session must be stored with its end, click count and sum of
ids; nothing else may be stored (a session emitted twice, cut differently, would show as
another start key); each must have been emitted once; and no click may be late.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from _runs import Runs
from eo_topology import produce_events
from session_topology import GAP_MS, LAG_MS, PARTITIONS, Click, generate_clicks

from kstorm._kafka.client import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Session = tuple[str, int]  # (user, start)


def ground_truth(clicks: list[Click]) -> dict[Session, dict[str, int]]:
    """The closed sessions (module docstring) -> ``{"end", "count", "checksum"}``."""
    by_user: dict[str, list[Click]] = defaultdict(list)
    for c in clicks:
        by_user[c.user].append(c)
    watermark = min(max(c.ts for c in clicks if c.partition == p)
                    for p in range(PARTITIONS)) - LAG_MS
    truth = {}
    for user, mine in by_user.items():
        mine.sort(key=lambda c: c.ts)
        runs: list[list[Click]] = []
        for c in mine:
            if runs and c.ts - runs[-1][-1].ts <= GAP_MS:
                runs[-1].append(c)
            else:
                runs.append([c])
        for run in runs:
            end = run[-1].ts + GAP_MS
            if end < watermark:
                truth[user, run[0].ts] = {"end": end, "count": len(run),
                                          "checksum": sum(c.id for c in run)}
    return truth


def _stored(runs: Runs, kind: str) -> dict[Session, bytes]:
    prefix = f"{runs.name}:{kind}:"
    keys = sorted(runs.client.scan_iter(prefix + "*", count=1000))
    values = runs.client.mget(keys) if keys else []
    out = {}
    for key, value in zip(keys, values, strict=True):
        user, _, start = key.decode()[len(prefix):].rpartition(":")
        out[user, int(start)] = value
    return out


def test_sessions_spanning_batches_exact_and_emitted_once_after_kills_and_a_lost_checkpoint(
        kafka: Any, redis_server: Any, tmp_path: Path) -> None:
    _kills_and_a_lost_checkpoint(kafka, redis_server, tmp_path, "ssk", [])


def test_aggregate_sessions_exact_and_emitted_once_after_kills_and_a_lost_checkpoint(
        kafka: Any, redis_server: Any, tmp_path: Path) -> None:
    """The built-in ``WindowedAggregate``'s sessions (``--aggregate``), the same way.

    Its open sessions are stored with the sinks' offsets (``window:sessions``): after the
    checkpoint is deleted it resumes from the sink, its open sessions restored (documented
    in docs/windowing.md, "Exactly once").
    """
    _kills_and_a_lost_checkpoint(kafka, redis_server, tmp_path, "sak", ["--aggregate"],
                                 after_commit=True)


def _kills_and_a_lost_checkpoint(kafka: Any, redis_server: Any, tmp_path: Path, prefix: str,
                                 extra: list[str], *, after_commit: bool = False) -> None:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-clicks"
    create_topic(kafka.bootstrap_servers, topic, PARTITIONS)
    clicks = generate_clicks()
    produce_events(kafka.bootstrap_servers, topic, clicks)
    truth = ground_truth(clicks)
    assert len(truth) >= 50
    checkpoint = tmp_path / "checkpoint"
    argv = ["--topic", topic, "--bootstrap", kafka.bootstrap_servers,
            "--redis-url", redis_server.url, "--checkpoint", str(checkpoint),
            "--name", name, "--expected", str(len(truth)), *extra]
    runs = Runs(argv, name, redis_server.url, tmp_path, module="session_topology")

    runs.kill_at_random()
    runs.kill_in_commit()
    runs.kill_at_random()
    if after_commit:  # between the sinks' atomic step and Spark's commit log
        runs.kill_in_commit(after=True)
    timeline = lambda: "\n".join(runs.timeline)  # noqa: E731
    assert "(exited first)" not in timeline(), timeline()
    before, stored = runs.txid(), len(_stored(runs, "session"))
    shutil.rmtree(checkpoint, ignore_errors=True)
    runs.timeline.append(f"checkpoint deleted at txid {before}, "
                         f"{stored} of {len(truth)} sessions stored")
    assert 0 < stored < len(truth), timeline()  # the kills landed mid-stream
    code = runs.finish()
    last_log = runs.logs[-1].read_text(errors="replace")
    assert code == 0, f"{timeline()}\n--- last run ---\n{last_log[-3000:]}"
    assert "resumes from sink" in last_log, timeline()  # windows back from the provider

    sessions = {k: json.loads(v) for k, v in _stored(runs, "session").items()}
    wrong = [(k, truth.get(k), sessions.get(k)) for k in sorted(set(truth) | set(sessions))
             if truth.get(k) != sessions.get(k)]
    assert not wrong, f"{len(wrong)} of {len(truth)} sessions differ: {wrong[:5]}\n{timeline()}"
    fires = {k: int(v) for k, v in _stored(runs, "fires").items()}
    assert fires == dict.fromkeys(truth, 1), timeline()
    assert not list(runs.client.scan_iter(f"{name}:late:*")), timeline()
    assert runs.txid() > before, timeline()
    print(f"\n{name}: {len(truth)} sessions exact, each emitted once\n{timeline()}")
