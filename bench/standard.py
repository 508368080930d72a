"""The standard benchmark: raw Python consumer vs the kstorm windowed topology, same topic.

Steps (``python -m bench``):

1. Start an embedded Kafka (tansu) and Redis; create ``events-<run id>`` with 4 partitions;
   produce the seeded events (``bench/events.py``) and keep each one's offset.
2. Ground truth from the events and their (partition, offset) (``bench/groundtruth.py``).
3. Raw limit: one confluent-kafka consumer reads the topic and aggregates in a dict
   (``bench/raw.py``); its windows must equal the generated events' (topic check).
4. kstorm: ``python -m bench.topology`` in a child process per ``max_offsets_per_batch``
   tried, watched from here (memory of its process tree, first result key in Redis); then
   every window in Redis is read back and compared with the ground truth.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.events import Events, generate, produce
from bench.groundtruth import Truth, compare, ground_truth
from bench.measure import Watcher
from bench.raw import WINDOW_MS, RawResult
from bench.topology import KEY_PREFIX, SINK, TOPOLOGY

REPO = Path(__file__).resolve().parents[1]


@dataclass
class KstormRun:
    """Figures of one kstorm run (one ``max_offsets_per_batch``)."""

    max_offsets: int
    events: int
    batches: int
    spawn_to_first_result_s: float | None
    submit_to_first_result_s: float | None
    steady_rate: float | None
    end_to_end_rate: float
    submit_to_done_s: float
    process_wall_s: float
    peak_rss_bytes: int
    hwm_sum_bytes: int
    late: int
    windows_emitted: int
    exact: bool
    problems: list[str]
    cpu_by_role: dict[str, float] = field(default_factory=dict)
    rss_by_role: dict[str, int] = field(default_factory=dict)
    commits: list[tuple[float, int, int]] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    # CPU milliseconds per batch by process role, from the first commit to the last one
    steady_cpu_ms: dict[str, float] = field(default_factory=dict)
    peak_pss_bytes: int = 0  # the tree's Pss sum, sampled each second (shared pages once)


@dataclass
class Setup:
    """The services and the topic of one benchmark run."""

    bootstrap: str
    redis_url: str
    topic: str
    workdir: Path
    master: str


def make_events(setup: Setup, n: int, seed: int, partitions: int, keys: int,
                log: Any) -> tuple[Events, Truth, dict[int, int], float]:
    """Generate, create the topic, produce; returns events, truth, end offsets, produce s."""
    from kstorm._kafka.client import create_topic

    events = generate(n, seed=seed, keys=keys, partitions=partitions)
    create_topic(setup.bootstrap, setup.topic, partitions)
    started = time.monotonic()
    offsets = produce(setup.bootstrap, setup.topic, events)
    produce_s = time.monotonic() - started
    log(f"produced {n:,} events to {setup.topic} in {produce_s:.1f}s")
    records = zip(events.partition.tolist(), offsets.tolist(), events.key_names(),
                  events.ts.tolist(), events.value.tolist(), strict=True)
    truth = ground_truth(records, length_ms=WINDOW_MS, lag_ms=5_000)
    ends = {p: int(offsets[events.partition == p].max()) + 1
            for p in sorted(set(events.partition.tolist()))}
    return events, truth, ends, produce_s


def check_raw(events: Events, raw: RawResult) -> list[str]:
    """The raw consumer must have seen exactly the generated events (the topic is right)."""
    expected: dict[tuple[str, int], list[int]] = {}
    for key, ts, value in zip(events.key_names(), events.ts.tolist(), events.value.tolist(),
                              strict=True):
        acc = expected.setdefault((key, -(-ts // WINDOW_MS) * WINDOW_MS - WINDOW_MS), [0, 0])
        acc[0] += 1
        acc[1] += value
    if raw.events == events.n and raw.windows == expected:
        return []
    return [f"raw consumer read {raw.events:,} events (expected {events.n:,}); its windows "
            f"{'equal' if raw.windows == expected else 'differ from'} the generated events'"]


def read_windows(redis_url: str) -> dict[tuple[str, int], tuple[int, int]]:
    """Every ``w:<key>:<window_start>`` in Redis as (key, start) -> (count, sum)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        names = [k.decode() for k in client.scan_iter(match=KEY_PREFIX + "*", count=10_000)]
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for at in range(0, len(names), 10_000):
            chunk = names[at:at + 10_000]
            for name, raw in zip(chunk, client.mget(chunk), strict=True):
                if raw is None:  # deleted since the scan (nothing deletes them: never)
                    continue
                _, key, start = name.rsplit(":", 2)
                record = json.loads(raw)
                out[(key, int(start))] = (record["count"], record["sum"])
        return out
    finally:
        client.close()


def run_kstorm(setup: Setup, truth: Truth, n: int, max_offsets: int, *,
               profile: Path | None = None, spark_conf: list[str] | None = None,
               conf: list[str] | None = None) -> KstormRun:
    """One kstorm run in a child process, watched; results read back and compared."""
    import redis

    redis.Redis.from_url(setup.redis_url).flushdb()
    run_dir = Path(tempfile.mkdtemp(prefix=f"mo{max_offsets}-", dir=setup.workdir))
    out = run_dir / "report.json"
    command = [sys.executable, "-m", "bench.topology", "--bootstrap", setup.bootstrap,
               "--redis", setup.redis_url, "--topic", setup.topic,
               "--checkpoint", str(run_dir / "checkpoint"), "--out", str(out),
               "--max-offsets", str(max_offsets), "--master", setup.master]
    for kv in spark_conf or []:
        command += ["--spark-conf", kv]
    for kv in conf or []:
        command += ["--conf", kv]
    if profile is not None:
        command = ["py-spy", "record", "--subprocesses", "--rate", "50", "--format", "raw",
                   "--output", str(profile), "--", *command]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "KSTORM_SPARK_LOG": str(run_dir / "spark.log"), "PYSPARK_PYTHON": sys.executable}
    spawned = time.monotonic()
    child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=open(run_dir / "stderr.log", "wb"))  # noqa: SIM115
    watcher = Watcher(child.pid, redis_url=setup.redis_url, pattern=KEY_PREFIX + "*",
                      record=f"kstorm:{TOPOLOGY}:{SINK}:offsets").start()
    try:
        code = child.wait(timeout=600)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        code = -9
    finally:
        exited = time.monotonic()
        watcher.stop()
    if code != 0 or not out.exists():
        tail = (run_dir / "stderr.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"kstorm run (max_offsets_per_batch={max_offsets}) exited with "
                           f"{code}; stderr tail:\n{tail}")
    report = json.loads(out.read_text())
    got = read_windows(setup.redis_url)
    problems = compare(truth, got)
    if report["late"] != truth.late:
        problems.append(f"late count {report['late']} (expected {truth.late})")
    if report["events"] != n:
        problems.append(f"offsets committed cover {report['events']:,} events (expected {n:,})")
    first = watcher.first_result_at
    run = KstormRun(
        max_offsets=max_offsets, events=report["events"], batches=report["batches"],
        spawn_to_first_result_s=None if first is None else first - spawned,
        submit_to_first_result_s=None if first is None else first - report["submitted"],
        steady_rate=steady_rate(watcher.commits), commits=watcher.commits,
        end_to_end_rate=n / (report["finished"] - report["submitted"]),
        submit_to_done_s=report["finished"] - report["submitted"],
        process_wall_s=exited - spawned, peak_rss_bytes=watcher.peak_rss_bytes,
        hwm_sum_bytes=watcher.hwm_sum_bytes, peak_pss_bytes=watcher.peak_pss_bytes,
        late=report["late"],
        windows_emitted=len(got), exact=not problems, problems=problems,
        cpu_by_role=watcher.cpu_seconds_by_role(), rss_by_role=watcher.peak_rss_by_role,
        report=report,
        steady_cpu_ms=steady_cpu_per_batch(watcher.commits, watcher.cpu_at_commits))
    (run_dir / "run.json").write_text(json.dumps(dataclasses.asdict(run), indent=1))
    return run


def steady_rate(commits: list[tuple[float, int, int]]) -> float | None:
    """Events after the first committed batch / time from its commit to the last one.

    ``commits``: (time, txid, events committed so far), as seen in Redis.

    Example:
        >>> steady_rate([(10.0, 0, 250), (12.0, 1, 500), (14.0, 2, 1000)])
        187.5
    """
    if len(commits) < 2:
        return None
    (t1, _, n1), (t_last, _, n_last) = commits[0], commits[-1]
    if t_last <= t1 or n_last <= n1:
        return None
    return (n_last - n1) / (t_last - t1)


def steady_cpu_per_batch(commits: list[tuple[float, int, int]],
                         cpu: list[dict[str, float]]) -> dict[str, float]:
    """CPU milliseconds per batch by process role, from the first commit to the last one.

    ``commits`` as in :func:`steady_rate`; ``cpu``: the tree's CPU seconds by role when each
    was seen. The first batch (start-up) is left out, as the steady rate leaves it out.
    Other load on the machine moves CPU time much less than wall time. Empty: fewer than two
    batches apart.

    Example:
        >>> steady_cpu_per_batch([(1.0, 0, 1), (2.0, 1, 2), (3.0, 4, 5)],
        ...                      [{"jvm": 5.0}, {"jvm": 5.1}, {"jvm": 5.4, "driver": 0.2}])
        {'driver': 50.0, 'jvm': 100.0, 'total': 150.0}
    """
    if len(commits) < 2 or len(cpu) != len(commits) or commits[-1][1] <= commits[0][1]:
        return {}
    batches = commits[-1][1] - commits[0][1]
    first, last = cpu[0], cpu[-1]
    out = {kind: 1000 * (last[kind] - first.get(kind, 0.0)) / batches for kind in sorted(last)}
    out["total"] = sum(out.values())
    return {kind: round(ms, 1) for kind, ms in out.items()}


def new_setup(workdir: Path, master: str, topic: str) -> Setup:
    """Names for this run (the services are started by the caller)."""
    return Setup("", "", f"{topic}-{uuid.uuid4().hex[:8]}", workdir, master)


def cleanup(workdir: Path) -> None:
    """Remove this run's temporary directory."""
    shutil.rmtree(workdir, ignore_errors=True)
