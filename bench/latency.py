"""``python -m bench.latency``: how long until a result is visible, at a sustained rate.

For each rate (``--rates``, events/s) and each kind, one run: a fresh 4-partition topic, a
producer pacing JSON events ``{key, ts, value}`` (``ts`` = the wall clock when produced,
100 keys, a key always in the same partition) for ``--seconds``, the job under test reading it
continuously, and a poller reading the job's Redis batch record every 10 ms. Measured:

- **windowed** (tumbling ``--window-ms`` windows, lag ``--lag-ms``, per key count and sum):
  for every window that closed, the time from the moment its watermark passed the window
  end -- the produce time of the first event, in the last partition to get one, whose
  timestamp is past ``end + lag`` (the watermark is min over partitions of latest ts - lag)
  -- until its result is visible in Redis (the first poll that sees the batch record at or
  past the txid that wrote the window's key);
- **stateless** (each event's value to Redis under its key, exactly once): for every event,
  from its produce time to the first poll whose batch record's end offset for its partition
  is past the event's offset.

The same two jobs hand-written on confluent-kafka + a dict + redis-py (``--raw-job``, a
child process: poll, aggregate, write, each write timed) run on the same kind of topic in
the same run: the baseline. Every job's output is checked against the produced events
(every closed window's count and sum; every key's last value) and the report says so.

Results: ``bench/results/latency.md`` (tables) and ``bench/results/latency.png`` (p50/p99
per rate), unless ``--no-write``.

Examples:
    python -m bench.latency                         # 20,000 ev/s for 120 s, both kinds
    python -m bench.latency --rates 5000,20000,40000 --seconds 60
    python -m bench.latency --seconds 20 --kinds stateless --no-write   # a quick check
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.latency_topology import NAME, SINK, STATELESS_PREFIX, WINDOW_PREFIX

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "latency.md"
CHART = RESULTS.with_suffix(".png")
PARTITIONS = 4
KEYS = 100
POLL_S = 0.01
RAW_RECORD = "raw:record"


# -- producing ---------------------------------------------------------------------------------


@dataclass
class Produced:
    """What the producer sent: per partition, offsets and produce times (ms), in order."""

    ts: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    offsets: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    events: dict[int, list[tuple[str, int, int]]] = field(
        default_factory=lambda: defaultdict(list))  # (key, ts, value)
    seconds: float = 0.0

    @property
    def n(self) -> int:
        return sum(len(v) for v in self.ts.values())


def produce_paced(bootstrap: str, topic: str, rate: int, seconds: float, seed: int) -> Produced:
    """Produce ``rate`` events/s for ``seconds`` in 10 ms ticks; offsets from delivery reports."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "enable.idempotence": True, "acks": "all"})
    out = Produced()
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            out.offsets[msg.partition()].append(msg.offset())

    rng = random.Random(seed)
    per_tick = rate / 100
    started = time.monotonic()
    sent, tick = 0, 0
    while time.monotonic() - started < seconds:
        tick += 1
        due = int(per_tick * tick)
        while sent < due:
            index = rng.randrange(KEYS)
            key, part = f"k{index:03d}", index % PARTITIONS  # a key lives in one partition
            value = rng.randrange(1000)
            ts = int(time.time() * 1000)
            producer.produce(topic, json.dumps({"key": key, "ts": ts, "value": value}).encode(),
                             partition=part, on_delivery=delivered)
            out.ts[part].append(ts)
            out.events[part].append((key, ts, value))
            sent += 1
        producer.poll(0)
        pause = started + tick / 100 - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    out.seconds = time.monotonic() - started
    producer.flush(30)
    if failed or any(len(out.offsets[p]) != len(out.ts[p]) for p in out.ts):
        msg = f"producer: {len(failed)} failed deliveries ({failed[:3]})"
        raise RuntimeError(msg)
    return out


# -- watching the job's batch record -----------------------------------------------------------


class Poller(threading.Thread):
    """Reads a batch record (hash: ``txid``, ``<topic>/<partition>`` -> end) every 10 ms."""

    def __init__(self, redis_url: str, record: str) -> None:
        super().__init__(daemon=True)
        import redis

        self.client = redis.Redis.from_url(redis_url)
        self.record = record
        self.seen: list[tuple[float, int, dict[int, int]]] = []  # (wall s, txid, ends)
        self.stop = threading.Event()

    def run(self) -> None:
        last = None
        while not self.stop.is_set():
            raw = self.client.hgetall(self.record)
            now = time.time()
            if raw and raw.get(b"txid") != last:
                last = raw.get(b"txid")
                ends = {int(k.decode().rpartition("/")[2]): int(v) for k, v in raw.items()
                        if b"/" in k}
                self.seen.append((now, int(last), ends))
            time.sleep(POLL_S)


def _first_time(seen: list[tuple[float, int, dict[int, int]]], partition: int,
                offsets: list[int]) -> list[float | None]:
    """For each offset (ascending) of ``partition``: when a record first had its end past it."""
    out: list[float | None] = []
    at = 0
    for offset in offsets:
        while at < len(seen) and seen[at][2].get(partition, 0) <= offset:
            at += 1
        out.append(seen[at][0] if at < len(seen) else None)
    return out


# -- ground truth and latencies ----------------------------------------------------------------


def window_truth(produced: Produced, window_ms: int, lag_ms: int
                 ) -> tuple[dict[tuple[str, int], tuple[int, int]], dict[int, float]]:
    """Closed windows ``(key, start) -> (count, sum)`` and each window end's close time (s).

    A window ``(end - len, end]`` closes once the watermark (min over partitions of the
    latest ts, minus the lag) passes ``end``: at the produce time of the first event past
    ``end + lag`` in the last partition to get one. Events are produced with ``ts`` = the
    wall clock, in order per partition, so none is ever late.
    """
    sums: dict[tuple[str, int], list[int]] = {}
    for part in produced.events.values():
        for key, ts, value in part:
            start = -(-ts // window_ms) * window_ms - window_ms
            acc = sums.setdefault((key, start), [0, 0])
            acc[0] += 1
            acc[1] += value
    final_wm = min(max(ts) for ts in produced.ts.values()) - lag_ms
    closes: dict[int, float] = {}
    for start in sorted({s for _, s in sums}):
        end = start + window_ms
        if end >= final_wm:
            continue
        times = []
        for ts in produced.ts.values():
            i = bisect.bisect_right(ts, end + lag_ms)
            times.append(ts[i] / 1000 if i < len(ts) else float("inf"))
        closes[end] = max(times)
    closed = {k: (v[0], v[1]) for k, v in sums.items() if k[1] + window_ms in closes}
    return closed, closes


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99, max (seconds) of ``values``."""
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "n": 0}
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return {"p50": pick(0.50), "p99": pick(0.99), "max": s[-1], "n": len(s)}


# -- one run -----------------------------------------------------------------------------------


@dataclass
class Run:
    """One job at one rate."""

    job: str  # kstorm | raw
    kind: str
    rate: int
    achieved_rate: float
    latency: dict[str, float]
    exact: bool
    problems: list[str]
    batches: int | None = None
    commit_ms_per_batch: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # median ms per Spark phase


def run_one(job: str, kind: str, rate: int, args: argparse.Namespace, services: Any,
            workdir: Path, log: Any) -> Run:
    """Start the job, produce at ``rate`` for ``args.seconds``, drain, measure, stop."""
    import redis

    from kstorm._kafka.client import create_topic

    topic = f"lat-{kind}-{uuid.uuid4().hex[:6]}"
    create_topic(services.bootstrap, topic, PARTITIONS)
    client = redis.Redis.from_url(services.redis_url)
    client.flushdb()
    run_dir = Path(tempfile.mkdtemp(prefix=f"{job}-{kind}-{rate}-", dir=workdir))
    out = run_dir / "report.json"
    if job == "kstorm":
        command = [sys.executable, "-m", "bench.latency_topology", "--kind", kind,
                   "--bootstrap", services.bootstrap, "--redis", services.redis_url,
                   "--topic", topic, "--checkpoint", str(run_dir / "checkpoint"),
                   "--out", str(out), "--window-ms", str(args.window_ms),
                   "--lag-ms", str(args.lag_ms), "--trigger-ms", str(args.trigger_ms)]
        for kv in args.spark_conf:
            command += ["--spark-conf", kv]
        for kv in args.conf:
            command += ["--conf", kv]
        record = f"kstorm:{NAME}:{SINK}:offsets"
    else:
        command = [sys.executable, "-m", "bench.latency", "--raw-job", kind,
                   "--bootstrap", services.bootstrap, "--redis", services.redis_url,
                   "--topic", topic, "--out", str(out), "--window-ms", str(args.window_ms),
                   "--lag-ms", str(args.lag_ms)]
        record = RAW_RECORD
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(run_dir / "job.log", "wb") as job_log:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=job_log, stderr=job_log,
                                 start_new_session=True)
    poller = Poller(services.redis_url, record)
    try:
        _await_ready(child, client, record, run_dir, services, topic)
        poller.start()
        produced = produce_paced(services.bootstrap, topic, rate, args.seconds, args.seed)
        log(f"{job} {kind} @ {rate:,}/s: produced {produced.n:,} in {produced.seconds:.1f} s; "
            "draining")
        ends = {p: offs[-1] + 1 for p, offs in produced.offsets.items()}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if poller.seen and all(poller.seen[-1][2].get(p, 0) >= e for p, e in ends.items()):
                break
            if child.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(3 * args.trigger_ms / 1000 + 1)  # windows closed by the last events
    finally:
        poller.stop.set()
        if child.poll() is None:
            child.terminate()  # the job stops its topology (the JVM is its child)
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(10)
    poller.join(5)
    report = json.loads(out.read_text()) if out.exists() else {}
    problems = [] if child.returncode == 0 else [
        f"{job} {kind} exited with {child.returncode} (log {run_dir / 'job.log'})"]
    if kind == "windowed":
        latency, exact, more = _windowed(client, poller.seen, produced, args, job)
    else:
        latency, exact, more = _stateless(client, poller.seen, produced)
    problems += more
    batches = report.get("batches")
    commit = report.get("commit_seconds")
    return Run(job, kind, rate, produced.n / produced.seconds, latency,
               exact and not problems, problems, batches,
               1000 * commit / batches if batches and commit is not None else None,
               phase_medians(report.get("spark_batches") or []))


PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
          "triggerExecution")


def phase_medians(durations: list[dict[str, int]]) -> dict[str, float]:
    """Median ms of each Spark progress phase over batches that read rows (and their count)."""
    busy = [d for d in durations if d.get("rows")]
    if not busy:
        return {}
    medians = {k: float(statistics.median(d.get(k, 0) for d in busy)) for k in PHASES}
    return {**medians, "batches": float(len(busy))}


def _await_ready(child: subprocess.Popen, client: Any, record: str, run_dir: Path,
                 services: Any, topic: str) -> None:
    """Produce one warm-up event per partition and wait until the job committed them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": services.bootstrap})
    ts = int(time.time() * 1000) - 60_000  # far in the past: its windows close at once
    for p in range(PARTITIONS):
        producer.produce(topic, json.dumps({"key": "warmup", "ts": ts, "value": 0}).encode(),
                         partition=p)
    producer.flush(30)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        raw = client.hgetall(record)
        if raw and sum(1 for k, v in raw.items() if b"/" in k and int(v) >= 1) == PARTITIONS:
            return
        if child.poll() is not None:
            msg = f"the job exited with {child.returncode} before it was ready: {run_dir}"
            raise RuntimeError(msg)
        time.sleep(0.1)
    msg = f"the job did not commit its warm-up events within 240 s: {run_dir}"
    raise RuntimeError(msg)


def _windowed(client: Any, seen: list, produced: Produced, args: argparse.Namespace,
              job: str) -> tuple[dict[str, float], bool, list[str]]:
    truth, closes = window_truth(produced, args.window_ms, args.lag_ms)
    names = [k.decode() for k in client.scan_iter(match=WINDOW_PREFIX + "*", count=10_000)]
    values = dict(zip(names, client.mget(names), strict=True)) if names else {}
    if job == "kstorm":  # the sink's txid of each key: when its window became visible
        raw_txids = client.hgetall(f"kstorm:{NAME}:{SINK}:txid")
        txids = {k.decode(): int(v) for k, v in raw_txids.items()}
        times = [t for t, _, _ in seen]
        tx = [x for _, x, _ in seen]

        def visible(name: str) -> float | None:
            i = bisect.bisect_left(tx, txids.get(name, 1 << 62))
            return times[i] if i < len(times) else None
    else:
        stamps = {k.decode(): float(v) for k, v in client.hgetall("raw:visible").items()}

        def visible(name: str) -> float | None:
            return stamps.get(name)
    got: dict[tuple[str, int], tuple[int, int]] = {}
    lat: list[float] = []
    for name, raw in values.items():
        _, key, start = name.split(":")
        record = json.loads(raw)
        window = (key, int(start))
        if key == "warmup":
            continue
        got[window] = (record["count"], record["sum"])
        end = int(start) + args.window_ms
        at = visible(name)
        if window in truth and at is not None and end in closes:
            lat.append(at - closes[end])
    missing = [w for w in truth if got.get(w) != truth[w]]
    problems = [f"{len(missing)} of {len(truth)} closed windows missing or wrong "
                f"(e.g. {missing[:3]})"] if missing else []
    return percentiles(lat), not missing, problems


def _stateless(client: Any, seen: list, produced: Produced
               ) -> tuple[dict[str, float], bool, list[str]]:
    lat: list[float] = []
    unseen = 0
    for part, offsets in produced.offsets.items():
        stamps = produced.ts[part]
        for at, ts in zip(_first_time(seen, part, offsets), stamps, strict=True):
            if at is None:
                unseen += 1
            else:
                lat.append(at - ts / 1000)
    # a key lives in one partition: its stored value is its last event's
    latest: dict[str, int] = {}
    for events in produced.events.values():
        for key, _, value in events:
            latest[key] = value
    names = [STATELESS_PREFIX + k for k in latest]
    stored = dict(zip(latest, client.mget(names), strict=True)) if names else {}
    wrong = [k for k, v in stored.items() if v is None or json.loads(v) != latest[k]]
    problems = []
    if unseen:
        problems.append(f"{unseen} events never visible")
    if wrong:
        problems.append(f"{len(wrong)} of {len(latest)} keys do not hold their last value "
                        f"(e.g. {wrong[:3]})")
    return percentiles(lat), not unseen and not wrong, problems


# -- the raw baseline job ----------------------------------------------------------------------


def raw_job(args: argparse.Namespace) -> int:
    """confluent-kafka + dict + redis-py: the same two jobs, each write timed (child process)."""
    import redis
    from confluent_kafka import Consumer, TopicPartition

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    client = redis.Redis.from_url(args.redis)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-latency-raw",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(args.topic, p, 0) for p in range(PARTITIONS)])
    loads = json.loads
    ends: dict[int, int] = {}
    latest: dict[int, int] = {}
    open_windows: dict[tuple[str, int], list[int]] = {}
    length, lag = args.window_ms, args.lag_ms
    try:
        while not stop["now"]:
            messages = consumer.consume(10_000, 0.05)
            if not messages:
                continue
            pipe = client.pipeline(transaction=True)
            for msg in messages:
                if msg.error() is not None:
                    continue
                event = loads(msg.value())
                part = msg.partition()
                ends[part] = msg.offset() + 1
                if args.raw_job == "stateless":
                    pipe.set(STATELESS_PREFIX + event["key"], event["value"])
                    continue
                ts = event["ts"]
                latest[part] = max(ts, latest.get(part, ts))
                start = -(-ts // length) * length - length
                acc = open_windows.setdefault((event["key"], start), [0, 0])
                acc[0] += 1
                acc[1] += event["value"]
            closed = []
            if args.raw_job == "windowed" and len(latest) == PARTITIONS:
                watermark = min(latest.values()) - lag
                closed = [w for w in open_windows if w[1] + length < watermark]
                for w in closed:
                    count, total = open_windows.pop(w)
                    pipe.set(f"{WINDOW_PREFIX}{w[0]}:{w[1]}",
                             json.dumps({"count": count, "sum": total}))
            pipe.hset(RAW_RECORD, mapping={"txid": int(time.time() * 1e6),
                                           **{f"{args.topic}/{p}": e for p, e in ends.items()}})
            pipe.execute()
            if closed:
                now = time.time()
                client.hset("raw:visible", mapping={f"{WINDOW_PREFIX}{w[0]}:{w[1]}": now
                                                    for w in closed})
    finally:
        consumer.close()
    Path(args.out).write_text(json.dumps({}))
    return 0


# -- report ------------------------------------------------------------------------------------


def machine() -> str:
    """One line: the standard benchmark's machine description (load average included)."""
    from bench.report import machine as describe

    return "; ".join(f"{k} {v}" for k, v in describe().items())


def table(runs: list[Run]) -> str:
    """Markdown table of every run."""
    lines = ["| job | kind | rate target | achieved | p50 | p99 | max | results | batches | "
             "commit ms/batch | exact |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | "
             "---: | ---: | ---: | --- |"]
    for r in runs:
        lat = r.latency
        lines.append(
            f"| {r.job} | {r.kind} | {r.rate:,} | {r.achieved_rate:,.0f} | "
            f"{lat['p50']:.2f} s | {lat['p99']:.2f} s | {lat['max']:.2f} s | {lat['n']:,} | "
            f"{r.batches if r.batches is not None else '-'} | "
            f"{f'{r.commit_ms_per_batch:.0f}' if r.commit_ms_per_batch else '-'} | "
            f"{'yes' if r.exact else 'NO: ' + '; '.join(r.problems)} |")
    return "\n".join(lines)


def phase_table(runs: list[Run]) -> str:
    """Where a kstorm batch's time goes: median ms per phase of Spark's progress."""
    mine = [r for r in runs if r.phases]
    if not mine:
        return ""
    head = ["| kind | rate | batches | " + " | ".join(PHASES) + " |",
            "| --- | ---: | ---: | " + " | ".join("---:" for _ in PHASES) + " |"]
    rows = [f"| {r.kind} | {r.rate:,} | {r.phases['batches']:.0f} | "
            + " | ".join(f"{r.phases[k]:.0f}" for k in PHASES) + " |" for r in mine]
    return "\n".join([
        "Where a kstorm batch's time goes: median milliseconds per phase of Spark's progress "
        "over the last batches that read rows (at most 100; `addBatch` includes the read, "
        "the bolts and the sinks' commit, `triggerExecution` is the whole batch):", "",
        *head, *rows])


def sustainable(runs: list[Run], job: str, kind: str, limit_s: float = 2.0) -> int | None:
    """The highest rate tried at which, and at every lower rate tried, the job's p99 stayed
    within ``limit_s`` with exact results; None if the lowest rate tried missed."""
    best = None
    for run in sorted((r for r in runs if r.job == job and r.kind == kind),
                      key=lambda r: r.rate):
        if not run.exact or run.latency["p99"] > limit_s:
            break
        best = run.rate
    return best


def sustained_line(runs: list[Run], job: str, kind: str, limit_s: float = 2.0) -> str:
    """The summary line of :func:`sustainable`, naming every rate that missed."""
    best = sustainable(runs, job, kind, limit_s)
    missed = [f"{r.rate:,} ev/s (p99 {r.latency['p99']:.2f} s{'' if r.exact else ', not exact'})"
              for r in sorted(runs, key=lambda r: r.rate) if r.job == job and r.kind == kind
              and (not r.exact or r.latency["p99"] > limit_s)]
    text = (f"- {job} {kind}: highest rate with p99 <= {limit_s:g} s there and at every lower "
            f"rate tried: {f'{best:,} ev/s' if best else 'none'}")
    return text + (f"; missed at {', '.join(missed)}" if missed else "")


def chart(runs: list[Run], path: Path) -> None:
    """p50/p99 per rate, one line per job and kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, kind in zip(axes, ("windowed", "stateless"), strict=True):
        for job, style in (("kstorm", "o-"), ("raw", "s--")):
            mine = sorted((r for r in runs if r.job == job and r.kind == kind),
                          key=lambda r: r.rate)
            if not mine:
                continue
            rates = [r.rate for r in mine]
            ax.plot(rates, [r.latency["p99"] for r in mine], style, label=f"{job} p99")
            ax.plot(rates, [r.latency["p50"] for r in mine], style, alpha=0.5,
                    label=f"{job} p50")
        ax.axhline(2.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(kind)
        ax.set_xlabel("events/s")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("latency (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(args: argparse.Namespace, runs: list[Run], wall_s: float) -> None:
    """``bench/results/latency.md`` and its chart."""
    command = "python -m bench.latency " + " ".join(sys.argv[1:])
    lines = [
        "# Latency benchmark", "",
        f"Command: `{command.strip()}` (repository root); run "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, whole run {wall_s:.0f} s.", "",
        f"Machine: {machine()} (load average at the end).", "",
        f"Load: {', '.join(f'{r:,}' for r in args.rates)} events/s for {args.seconds:.0f} s "
        f"per run, {PARTITIONS} partitions, {KEYS} keys; windows tumbling {args.window_ms} ms, "
        f"lag {args.lag_ms} ms; kstorm continuous, trigger {args.trigger_ms} ms, local[2], "
        "exactly-once RedisSink (transactional). What is measured: the module docstring of "
        "`bench/latency.py`.", "", table(runs), ""]
    for kind in ("windowed", "stateless"):
        for job in ("kstorm", "raw"):
            if any(r.job == job and r.kind == kind for r in runs):
                lines.append(sustained_line(runs, job, kind))
    phases = phase_table(runs)
    lines += ["", *([phases, ""] if phases else []), f"![p50 and p99 per rate]({CHART.name})", ""]
    RESULTS.write_text("\n".join(lines))
    chart(runs, CHART)


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="20000", help="events/s, a comma list")
    p.add_argument("--seconds", type=float, default=120.0, help="producing time per run")
    p.add_argument("--kinds", default="windowed,stateless")
    p.add_argument("--jobs", default="kstorm,raw")
    p.add_argument("--window-ms", type=int, default=1_000)
    p.add_argument("--lag-ms", type=int, default=500)
    p.add_argument("--trigger-ms", type=int, default=250)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for the kstorm jobs (repeatable)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a topology setting for the kstorm jobs (repeatable; e.g. "
                        "kstorm.commit.overlap=false)")
    p.add_argument("--raw-job", choices=("windowed", "stateless"), help=argparse.SUPPRESS)
    for hidden in ("--bootstrap", "--redis", "--topic", "--out"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.raw_job:
        return raw_job(args)
    args.rates = [int(x.replace("_", "")) for x in args.rates.split(",") if x]
    if not args.no_write:
        try:
            import matplotlib  # noqa: F401 - the chart is part of the results
        except ImportError:
            print("python -m bench.latency writes a chart: pip install -e '.[bench]' "
                  "(matplotlib), or run with --no-write", file=sys.stderr)
            return 2
    from kstorm.embedded import EmbeddedKafka, EmbeddedRedis

    began = time.monotonic()
    log = lambda m: print(f"[{time.monotonic() - began:7.1f}s] {m}", flush=True)  # noqa: E731
    workdir = Path(tempfile.mkdtemp(prefix="kstorm-latency-"))
    runs: list[Run] = []
    with EmbeddedKafka() as kafka, EmbeddedRedis() as redis_server:
        services = argparse.Namespace(bootstrap=kafka.bootstrap_servers,
                                      redis_url=redis_server.url)
        for rate in args.rates:
            for kind in args.kinds.split(","):
                for job in args.jobs.split(","):
                    run = run_one(job, kind, rate, args, services, workdir, log)
                    runs.append(run)
                    lat = run.latency
                    log(f"{job} {kind} @ {rate:,}/s: p50 {lat['p50']:.2f} s, p99 "
                        f"{lat['p99']:.2f} s, max {lat['max']:.2f} s over {lat['n']:,}; "
                        f"exact: {'yes' if run.exact else 'NO ' + '; '.join(run.problems)}")
    print()
    print(table(runs))
    print()
    print(phase_table(runs))
    if not args.no_write:
        write(args, runs, time.monotonic() - began)
        print(f"\nwritten: {RESULTS}")
    if all(r.exact for r in runs):
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    print(f"\nthe jobs' logs and checkpoints: {workdir}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
