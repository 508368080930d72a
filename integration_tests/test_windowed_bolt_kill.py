"""A stateful user windowed bolt under kill -9: no window fired twice, none missing.

40,000 JSON events on 4 partitions go through ``python -m wb_topology`` (KafkaSpout ->
CountingWindows, tumbling 1 s, lag 500 ms, message id field ``offset`` -> two RedisSinks).
The test SIGKILLs the whole process session three times -- at seeded random moments after a
commit and once inside a sink's commit -- deletes the checkpoint before one restart, and lets
a last run drain the topic. After the lost checkpoint the windows, the id ledger and the
bolt's ``KeyValueState`` come back from the snapshot the sinks stored with their offsets
(``spark`` provider), or from Redis at the sinks' txid (``redis`` provider: the same bolt,
and the bolt as a persistent window).

Ground truth, computed here from the produced events alone: the events are out of order
within a partition by less than the lag, so none is ever late; window ``(e - 1 s, e]`` holds
the events with ``ts`` in it and fires iff ``e <= min over partitions of (max ts) - lag``;
``seq`` is its rank among the fired windows. Every fired window must be in Redis with
its count, total and seq, its fire count must be 1, and there must be nothing else.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from _services import KafkaService, RedisService
from eo_topology import TopologyProcess, produce_events
from wb_topology import LAG_MS, WINDOW_MS, generate_events

from kstorm._kafka.client import create_topic
from kstorm.failpoints import PAUSE_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_EVENTS = 40_000
MAX_PER_BATCH = 2_500  # 16+ batches: room for three kills
START_TIMEOUT = 180.0
RUN_TIMEOUT = 240.0


@dataclass(frozen=True)
class Dataset:
    topic: str
    windows: dict[int, dict[str, int]]  # window start -> {count, total, seq}


def ground_truth(events: list) -> dict[int, dict[str, int]]:
    """The fired windows (module docstring), from the events alone."""
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    latest: dict[int, int] = {}
    for e in events:
        end = -(-e.ts // WINDOW_MS) * WINDOW_MS
        sums[end][0] += 1
        sums[end][1] += e.value
        latest[e.partition] = max(latest.get(e.partition, e.ts), e.ts)
    watermark = min(latest.values()) - LAG_MS
    fired = sorted(end for end in sums if end <= watermark)
    return {end - WINDOW_MS: {"count": sums[end][0], "total": sums[end][1], "seq": i}
            for i, end in enumerate(fired, 1)}


@pytest.fixture(scope="module")
def dataset(kafka: KafkaService) -> Dataset:
    topic = f"wb-kill-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 4)
    events = generate_events(N_EVENTS, seed=11)
    produce_events(kafka.bootstrap_servers, topic, events)
    windows = ground_truth(events)
    assert len(windows) >= 30
    return Dataset(topic, windows)


@dataclass
class Scenario:
    name: str
    bootstrap: str
    redis_url: str
    topic: str
    dir: Path
    rng: random.Random
    runs: list[TopologyProcess] = field(default_factory=list)
    kills: int = 0
    timeline: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    extra: list[str] = field(default_factory=list)  # wb_topology flags

    def note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.started:7.1f}s {what}")

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, socket_timeout=2)

    def txid(self) -> int:
        raw = self.client().hget(f"kstorm:{self.name}:store:offsets", "txid")
        return -1 if raw is None else int(raw)

    def start(self, env: dict[str, str] | None = None) -> TopologyProcess:
        argv = ["--bootstrap", self.bootstrap, "--redis-url", self.redis_url, "--topic",
                self.topic, "--checkpoint", str(self.dir / "checkpoint"), "--name", self.name,
                "--max-per-batch", str(MAX_PER_BATCH), "--timeout", str(RUN_TIMEOUT),
                *self.extra]
        run = TopologyProcess.start(argv, self.dir, f"run{len(self.runs) + 1}", env,
                                    module="wb_topology")
        self.runs.append(run)
        self.note(f"run{len(self.runs)} started (sink txid {self.txid()})")
        return run

    def wait_for(self, run: TopologyProcess, ready) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            if run.exited() is not None:
                code = run.wait(30)
                self.note(f"run{len(self.runs)} exited with {code} before its kill")
                assert code == 0, self.report()
                return False
            assert time.monotonic() < deadline, f"nothing happened\n{self.report()}"
            time.sleep(0.05)
        return True

    def kill(self, run: TopologyProcess, how: str) -> None:
        run.kill()
        self.kills += 1
        self.note(f"run{len(self.runs)} SIGKILLed {how}; sink txid {self.txid()}")

    def kill_at_random(self) -> None:
        before = self.txid()
        run = self.start()
        if self.wait_for(run, lambda: self.txid() > before):
            time.sleep(self.rng.uniform(0.0, 1.5))
            self.kill(run, "at a random moment")

    def kill_in_commit(self) -> None:
        marker = self.dir / "in-commit.marker"
        marker.unlink(missing_ok=True)
        run = self.start({PAUSE_ENV: str(marker)})
        for passes in range(self.rng.randint(0, 2), -1, -1):
            if not self.wait_for(run, marker.exists):
                return
            if passes:
                marker.unlink()
                continue
            self.kill(run, f"inside a sink's commit ({marker.read_text().strip()})")
        marker.unlink(missing_ok=True)

    def finish(self) -> None:
        code = self.start().wait(RUN_TIMEOUT + 60)
        self.note(f"run{len(self.runs)} exited with {code}")
        assert code == 0, self.report()

    def stored(self, kind: str) -> dict[int, str]:
        client = self.client()
        names = sorted(client.scan_iter(match=f"{self.name}:{kind}:*", count=1000))
        values = client.mget(names) if names else []
        return {int(n.decode().rpartition(":")[2]): v.decode()
                for n, v in zip(names, values, strict=True)}

    def report(self) -> str:
        lines = ["timeline:", *self.timeline]
        for i, run in enumerate(self.runs, 1):
            lines += [f"--- run{i} (exit {run.exited()}) {run.log}:", run.tail()]
        return "\n".join(lines)


# where the windows live after a lost checkpoint: in the snapshot the sinks store with their
# offsets (spark provider, message id field); in Redis at the sinks' txid (redis provider),
# with the message id field or as a persistent window (tuples in chunks, 500 in memory)
HOLDERS = {"sink-snapshot": [], "redis-provider": ["--provider", "redis"],
           "redis-provider-persistent": ["--provider", "redis", "--persistent"]}


@pytest.mark.parametrize("holder", list(HOLDERS))
def test_stateful_windowed_bolt_survives_kills_and_a_lost_checkpoint(
        kafka: KafkaService, redis_server: RedisService, dataset: Dataset,
        tmp_path: Path, holder: str) -> None:
    name = f"wb-{uuid.uuid4().hex[:6]}"
    s = Scenario(name, kafka.bootstrap_servers, redis_server.url, dataset.topic, tmp_path,
                 random.Random(5), extra=HOLDERS[holder])
    try:
        s.kill_at_random()
        s.kill_in_commit()
        shutil.rmtree(tmp_path / "checkpoint")
        s.note("checkpoint deleted")
        s.kill_at_random()
        s.finish()
    finally:
        for run in s.runs:
            run.kill()
    windows = {start: json.loads(v) for start, v in s.stored("w").items()}
    fires = {start: int(v) for start, v in s.stored("f").items()}
    wrong = [(k, dataset.windows.get(k), windows.get(k))
             for k in sorted(set(dataset.windows) | set(windows))
             if dataset.windows.get(k) != windows.get(k)]
    assert not wrong, f"{len(wrong)} windows differ: {wrong[:5]}\n{s.report()}"
    assert fires == dict.fromkeys(dataset.windows, 1), s.report()
    assert s.kills == 3, f"only {s.kills} kills happened\n{s.report()}"
    resumed = [r for r in s.runs if "resumes from sink" in r.log.read_text(errors="replace")]
    assert resumed, "no run resumed from the sinks after the checkpoint was deleted"
    if holder != "sink-snapshot":
        client = s.client()
        committed = {int(client.hget(f"kstorm:state:{name}:windows:0{ns}$meta", "committed"))
                     for ns in (":window", "")}
        assert committed == {s.txid()}, s.report()  # windows and KeyValueState at the sink's
    print(f"\n{name} ({holder}): {len(windows)} windows exact, each fired once\n"
          + "\n".join(s.timeline))


def test_count_windows_behind_a_shuffled_bolt_hold_every_event_once_after_kills(
        kafka: KafkaService, redis_server: RedisService, dataset: Dataset,
        tmp_path: Path) -> None:
    """``python -m wb_topology --relay``: a fields-grouped bolt of 2 tasks between the
    spout and tumbling ``Count(50)`` windows. Which 50 events share a window depends on
    where batches fall, but a replayed batch must emit in the order it did before (the
    relay's stage takes its shuffled input in arrival order), or a window of a replay that
    the sinks had already committed would be cut differently from the one they hold: an
    event in two windows, or in none. Killed three times (once inside the commit): every
    event is in exactly one window but the last < 50. Its windows live only in the
    checkpoint (no message id field): with the checkpoint deleted, a start is refused."""
    name = f"wr-{uuid.uuid4().hex[:6]}"
    s = Scenario(name, kafka.bootstrap_servers, redis_server.url, dataset.topic, tmp_path,
                 random.Random(7), extra=["--relay"])
    try:
        s.kill_at_random()
        s.kill_in_commit()
        s.kill_at_random()
        s.finish()
        shutil.rmtree(tmp_path / "checkpoint")
        refused = s.start()
        assert refused.wait(RUN_TIMEOUT) == 1, s.report()
        assert "state that lived only there would restart empty: 'windows'" in \
            refused.log.read_text(), s.report()
    finally:
        for run in s.runs:
            run.kill()
    counts = {i: int(v) for i, v in s.stored("f").items()}
    twice = {i: c for i, c in counts.items() if c != 1}
    assert not twice, f"{len(twice)} events in more than one window\n{s.report()}"
    assert len(counts) % 50 == 0, s.report()
    assert 0 <= N_EVENTS - len(counts) < 50, (len(counts), s.report())
