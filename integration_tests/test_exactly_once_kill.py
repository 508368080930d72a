"""Exactly-once under kill -9 (issue 3): windowed counts and sums land in Redis exactly once.

300,000 JSON events (4 partitions, ~1% out of order by up to 3 s, ~0.1% later than 10 s)
go through KafkaSpout -> WindowedAggregate (tumbling 10 s, lag 5 s) -> RedisSink, run by
``python -m eo_topology`` in a subprocess with the continuous trigger and small batches.
Each test SIGKILLs the whole process session (driver, JVM, Python workers) three times --
at seeded random moments after a batch committed, and once inside the sink's commit (the
``KSTORM_TEST_PAUSE_IN_COMMIT`` hook) -- restarts it each time and lets the last run drain
the topic. Then every window in Redis must equal the ground truth computed here from the
produced records, with no extra window, and the sink's offset record must equal the
topic's end offsets. Variants: the checkpoint deleted before a restart (the sink's offsets
and stored window state take over), and Redis (AOF on) killed and restarted mid-run.

Ground truth (``notes/runtime.md``): per partition in offset order, a record is late iff
its ts is below (max ts of the partition's earlier records) - lag; on-time records count in
the window ending at ceil(ts / 10 s) * 10 s; a window is emitted iff its end is below the
final watermark, min over partitions of their max ts - lag.
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
from typing import Any

import pytest
import redis
from _services import KafkaService, RedisService
from eo_topology import (
    LAG_MS,
    SINK_ID,
    WINDOW_MS,
    Event,
    TopologyProcess,
    generate_events,
    produce_events,
)

from kstorm._kafka.client import create_topic
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._spark.offset_log import last_committed_batch
from kstorm.embedded import EmbeddedRedis, free_port
from kstorm.failpoints import PAUSE_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_EVENTS = 300_000
SEED = 20_261_121
MAX_PER_BATCH = 20_000  # 15 batches: room for three kills before the topic drains
START_TIMEOUT = 180.0   # Spark start-up on two busy cores, then the first commit
RUN_TIMEOUT = 240.0
MAX_BATCHES_PER_KILL = 3  # a killed run commits at most this many batches (fast machines)


@dataclass(frozen=True)
class Dataset:
    """The produced topic and what must end up in Redis."""

    topic: str
    ends: dict[int, int]                            # partition -> end offset
    windows: dict[tuple[str, int], dict[str, int]]  # (key, window_start) -> {count, sum}
    late: int


def ground_truth(events: list[Event], acks: list[tuple[int, int]]
                 ) -> tuple[dict[tuple[str, int], dict[str, int]], int]:
    """Closed windows and the number of late records (module docstring's rules)."""
    by_partition: dict[int, list[tuple[int, Event]]] = defaultdict(list)
    for event, (partition, offset) in zip(events, acks, strict=True):
        by_partition[partition].append((offset, event))
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    latest: dict[int, int] = {}
    late = 0
    for partition, rows in by_partition.items():
        for _, event in sorted(rows, key=lambda r: r[0]):
            top = latest.get(partition)
            if top is not None and event.ts < top - LAG_MS:
                late += 1
                continue
            end = -(-event.ts // WINDOW_MS) * WINDOW_MS
            acc = sums[(event.key, end - WINDOW_MS)]
            acc[0] += 1
            acc[1] += event.value
            latest[partition] = event.ts if top is None else max(top, event.ts)
    watermark = min(latest.values()) - LAG_MS
    closed = {k: {"count": c, "sum": s} for k, (c, s) in sums.items()
              if k[1] + WINDOW_MS < watermark}
    return closed, late


@pytest.fixture(scope="module")
def dataset(kafka: KafkaService) -> Dataset:
    topic = f"eo-kill-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 4)
    events = generate_events(N_EVENTS, seed=SEED)
    acks = produce_events(kafka.bootstrap_servers, topic, events)
    ends: dict[int, int] = {}
    for partition, offset in acks:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    windows, late = ground_truth(events, acks)
    out_of_order = sum(1 for a, b in zip(events, events[1:], strict=False) if b.ts < a.ts)
    assert late > 100 and out_of_order > 1000, "the data must exercise lateness"
    return Dataset(topic, ends, windows, late)


@dataclass
class Scenario:
    """Runs, kills and restarts one topology; checks Redis at the end."""

    name: str
    bootstrap: str
    redis_url: str
    topic: str
    dir: Path
    rng: random.Random
    mode: str = "opaque"
    extra_argv: list[str] = field(default_factory=list)
    runs: list[TopologyProcess] = field(default_factory=list)
    kills: int = 0
    timeline: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    _client: redis.Redis | None = None

    @property
    def checkpoint(self) -> Path:
        return self.dir / "checkpoint"

    @property
    def record_key(self) -> str:
        return f"kstorm:{self.name}:{SINK_ID}:offsets"

    def note(self, what: str) -> None:
        self.timeline.append(f"{time.monotonic() - self.started:7.1f}s {what}")

    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.redis_url, socket_timeout=2)
        return self._client

    def txid(self) -> int | None:
        """The sink record's txid (-1 before any commit; None while Redis is away)."""
        try:
            raw = self.client().hget(self.record_key, "txid")
        except redis.RedisError:
            return None
        return -1 if raw is None else int(raw)

    def start(self, env: dict[str, str] | None = None) -> TopologyProcess:
        argv = ["--bootstrap", self.bootstrap, "--redis-url", self.redis_url,
                "--topic", self.topic, "--checkpoint", str(self.checkpoint), "--name",
                self.name, "--mode", self.mode, "--max-per-batch", str(MAX_PER_BATCH),
                "--timeout", str(RUN_TIMEOUT), *self.extra_argv]
        run = TopologyProcess.start(argv, self.dir, f"run{len(self.runs) + 1}", env)
        self.runs.append(run)
        self.note(f"run{len(self.runs)} started (pid {run.pid}, sink txid {self.txid()})")
        return run

    def await_commit(self, run: TopologyProcess, after: int | None) -> bool:
        """Wait until the sink's txid passes ``after``; False if the run exited first."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            txid = self.txid()
            if txid is not None and (after is None or txid > after):
                return True
            if run.exited() is not None:
                return False
            time.sleep(0.05)
        run.kill()
        raise AssertionError(f"no commit within {START_TIMEOUT}s\n{self.report()}")

    def pause(self, run: TopologyProcess, seconds: float, start: int | None) -> None:
        """Sleep ``seconds``, cut short once the run committed MAX_BATCHES_PER_KILL batches."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and run.exited() is None:
            txid = self.txid()
            if txid is not None and start is not None and txid >= start + MAX_BATCHES_PER_KILL:
                return
            time.sleep(0.02)

    def kill(self, run: TopologyProcess, how: str) -> None:
        if run.exited() is not None:  # drained before the planned kill
            self.exited_early(run)
            return
        run.kill()
        self.kills += 1
        self.note(f"run{len(self.runs)} SIGKILLed {how}; sink txid {self.txid()}, "
                  f"checkpoint txid {self.checkpoint_txid()}")

    def checkpoint_txid(self) -> int | None:
        """The txid of the checkpoint's last committed batch (None: nothing committed)."""
        last = last_committed_batch(self.checkpoint)
        return None if last is None else CheckpointLayout(self.checkpoint).txid_base() + last

    def kill_at_random(self) -> None:
        """Kill a fresh run a seeded random delay after its first commit."""
        start = self.txid()
        run = self.start()
        if not self.await_commit(run, start):
            self.exited_early(run)
            return
        self.pause(run, self.rng.uniform(0.0, 1.5), start)
        self.kill(run, "at a random moment")

    def kill_in_commit(self) -> None:
        """Let 0-2 commits through, then kill a run paused inside the sink's commit."""
        marker = self.dir / "in-commit.marker"
        marker.unlink(missing_ok=True)
        run = self.start({PAUSE_ENV: str(marker)})
        for passes in range(self.rng.randint(0, 2), -1, -1):
            deadline = time.monotonic() + START_TIMEOUT
            while not marker.exists():
                if run.exited() is not None:
                    self.exited_early(run)
                    return
                assert time.monotonic() < deadline, f"no commit paused\n{self.report()}"
                time.sleep(0.02)
            what = marker.read_text().strip()
            if passes:
                marker.unlink()  # let this commit go on
                continue
            self.kill(run, f"inside the commit ({what})")
        marker.unlink(missing_ok=True)

    def kill_with_the_sinks_behind(self) -> None:
        """Kill while the sinks commit a batch Spark already recorded (commit overlap).

        The first commit goes through; the second pauses inside the sink, which commits on
        its own thread while Spark writes the batch to its commit log and runs the next one:
        the kill comes once the checkpoint is a batch ahead of the sink.
        """
        marker = self.dir / "behind.marker"
        marker.unlink(missing_ok=True)
        run = self.start({PAUSE_ENV: str(marker)})
        for passes in (1, 0):
            deadline = time.monotonic() + START_TIMEOUT
            while not marker.exists():
                assert run.exited() is None, f"the run ended before its pause\n{self.report()}"
                assert time.monotonic() < deadline, f"no commit paused\n{self.report()}"
                time.sleep(0.02)
            if passes:
                marker.unlink()
        deadline = time.monotonic() + 60
        while (self.checkpoint_txid() or -1) <= (self.txid() or -1):
            assert time.monotonic() < deadline, (
                f"Spark did not record the batch while its sink was paused\n{self.report()}")
            time.sleep(0.02)
        self.kill(run, f"inside the sink's commit ({marker.read_text().strip()}), Spark's "
                       "commit log a batch ahead")
        marker.unlink(missing_ok=True)

    def restart_redis_mid_run(self, server: EmbeddedRedis) -> None:
        """kill -9 Redis (AOF on) while a run commits, restart it, then kill the run."""
        start = self.txid()
        run = self.start()
        if not self.await_commit(run, start):
            self.exited_early(run)
            return
        self.pause(run, self.rng.uniform(0.0, 1.0), start)
        server.kill()
        self.note("redis SIGKILLed")
        time.sleep(1.0)
        server.start()
        self.note(f"redis restarted from its AOF; sink txid {self.txid()}")
        restarted = self.txid()
        if self.await_commit(run, restarted):
            self.note("the run rode out the Redis restart")
            self.pause(run, self.rng.uniform(0.0, 1.0), restarted)
            self.kill(run, "at a random moment after the Redis restart")
        else:
            self.note(f"run{len(self.runs)} exited with {run.wait(30)} after the Redis restart")

    def exited_early(self, run: TopologyProcess) -> None:
        code = run.wait(30)
        self.note(f"run{len(self.runs)} exited with {code} before it could be killed")
        assert code == 0, f"run{len(self.runs)} failed\n{self.report()}"

    def delete_checkpoint(self) -> None:
        shutil.rmtree(self.checkpoint)
        self.note("checkpoint deleted")

    def finish(self, attempts: int = 3) -> None:
        """Run until a run drains the topic (exit 0); a failed run is restarted."""
        for _ in range(attempts):
            code = self.start().wait(RUN_TIMEOUT + 60)
            self.note(f"run{len(self.runs)} exited with {code}")
            if code == 0:
                return
        raise AssertionError(f"no run drained the topic\n{self.report()}")

    def check(self, data: Dataset, kills: int = 3) -> None:
        """Redis holds exactly the ground truth; the record holds the topic's end offsets."""
        client = self.client()
        names = sorted(client.scan_iter(match=f"{self.name}:*", count=1000))
        got = {}
        for name, raw in zip(names, client.mget(names) if names else [], strict=True):
            _, key, start = name.decode().split(":")
            got[(key, int(start))] = json.loads(raw)
        wrong = [(k, data.windows.get(k), got.get(k)) for k in sorted(set(data.windows) | set(got))
                 if data.windows.get(k) != got.get(k)]
        record = {k.decode(): v.decode() for k, v in client.hgetall(self.record_key).items()
                  if not k.startswith(b"@")}
        offsets = {int(k.rpartition("/")[2]): int(v) for k, v in record.items()
                   if k.startswith(f"{data.topic}/")}
        problems = []
        if wrong:
            missing = sum(1 for _, _, have in wrong if have is None)
            extra = sum(1 for _, want, _ in wrong if want is None)
            problems.append(f"{len(wrong)} of {len(data.windows)} windows differ ({missing} "
                            f"missing in Redis, {extra} extra); first (key, start), "
                            f"expected, got: {wrong[:8]}")
        if offsets != data.ends:
            problems.append(f"sink offsets {offsets} != topic ends {data.ends}")
        if self.kills != kills:
            problems.append(f"{self.kills} kills happened, {kills} were planned (runs "
                            "drained too soon: lower MAX_PER_BATCH)")
        assert not problems, "\n".join([*problems, self.report(record)])
        print(f"\n{self.name}: {len(got)} windows exact, {data.late} late records excluded, "
              f"record {record}\n" + "\n".join(self.timeline))

    def report(self, record: Any = None) -> str:
        lines = [f"sink record: {record if record is not None else self.txid()}",
                 "timeline:", *self.timeline]
        for i, run in enumerate(self.runs, 1):
            lines += [f"--- run{i} (exit {run.exited()}) {run.log}:", run.tail()]
        return "\n".join(lines)


def scenario(kafka: KafkaService, data: Dataset, redis_url: str, tmp_path: Path,
             seed: int, mode: str = "opaque") -> Scenario:
    name = f"eo{seed}-{uuid.uuid4().hex[:6]}"
    return Scenario(name, kafka.bootstrap_servers, redis_url, data.topic, tmp_path,
                    random.Random(seed), mode)


def test_kill_at_random_moments_and_inside_the_commit(
        kafka: KafkaService, redis_server: RedisService, dataset: Dataset,
        tmp_path: Path) -> None:
    s = scenario(kafka, dataset, redis_server.url, tmp_path, seed=1)
    try:
        s.kill_at_random()
        s.kill_in_commit()
        s.kill_at_random()
        s.finish()
    finally:
        for run in s.runs:
            run.kill()
    s.check(dataset)


def test_kill_while_the_sinks_commit_a_batch_spark_already_recorded(
        kafka: KafkaService, redis_server: RedisService, dataset: Dataset,
        tmp_path: Path) -> None:
    """kstorm.commit.overlap = true: the restart runs that batch again."""
    s = scenario(kafka, dataset, redis_server.url, tmp_path, seed=4)
    s.extra_argv = ["--commit-overlap", "true"]
    try:
        s.kill_with_the_sinks_behind()
        s.finish()
    finally:
        for run in s.runs:
            run.kill()
    s.check(dataset, kills=1)
    log = s.runs[1].log.read_text(errors="replace")
    assert "runs again from its logged offsets" in log, s.report()
    assert "behind the checkpoint" not in log and "moved aside" not in log, s.report()


def test_kill_with_the_checkpoint_deleted_before_a_restart(
        kafka: KafkaService, redis_server: RedisService, dataset: Dataset,
        tmp_path: Path) -> None:
    s = scenario(kafka, dataset, redis_server.url, tmp_path, seed=2)
    try:
        s.kill_in_commit()
        s.kill_at_random()
        s.delete_checkpoint()
        s.kill_at_random()
        s.finish()
    finally:
        for run in s.runs:
            run.kill()
    s.check(dataset)
    resumed = [r for r in s.runs if "resumes from sink" in r.log.read_text(errors="replace")]
    assert resumed, "no run resumed from the sink's offsets after the checkpoint was deleted"


def test_kill_with_redis_restarted_mid_run(kafka: KafkaService, dataset: Dataset,
                                           tmp_path: Path) -> None:
    with EmbeddedRedis(appendonly=True, port=free_port()) as server:
        s = scenario(kafka, dataset, server.url, tmp_path, seed=3, mode="transactional")
        try:
            s.kill_at_random()
            s.restart_redis_mid_run(server)
            s.kill_in_commit()
            if s.kills < 3:  # the run did not survive the Redis restart: one kill more
                s.kill_at_random()
            s.finish()
        finally:
            for run in s.runs:
                run.kill()
        s.check(dataset)
