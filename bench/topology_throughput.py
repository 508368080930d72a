"""Throughput of the issue-2 word count (Kafka -> split -> stateful count -> sink).

Run: ``python -m bench.topology_throughput`` (or ``python bench/topology_throughput.py``)
from the repository root; ``--sentences N`` (default 400,000: 8 batches), ``--sink memory``,
``--no-profile``, ``--count-tasks N`` (the stateful bolt's tasks, default 3).

1. Start the embedded broker (tansu), create a 4-partition topic and produce N JSON
   sentences of ~8 words (``integration_tests/topologies.py``), round-robin over partitions.
2. Start the SparkSession (timed apart: a long-running topology pays it once).
3. Run the integration tests' topology, ``sentences (KafkaSpout) --shuffle--> split
   --fields(word)--> count (stateful, TWS) --fields(word)--> out`` available-now with
   ``max_offsets_per_batch=50_000``; ``out`` keeps the latest count per word: an
   exactly-once ``RedisSink`` on an embedded Redis (``--sink memory``: a dict on the
   driver). Check the counts (read back from Redis) against the produced sentences.
4. Report events/s (sentences and words; steady words/s against issue 14's 150,000),
   batches, time to first commit, wall time, peak
   RSS of the whole process tree (driver, JVM, Python workers, broker), and CPU seconds per
   process kind (from ``/proc``).
   The baseline, measured in the same run before and after kstorm's: a hand-written Python
   word count over the same topic (one confluent-kafka consumer, ``json.loads``, split, a
   ``Counter``: ``bench/raw.py``), its counts checked too; kstorm's steady words/s is given as
   a ratio to the faster of its two runs.
5. With py-spy on PATH (and no ``--no-profile``): run the topology again over a topic of
   its own (``--profile-sentences``, default one batch of 50,000) under ``py-spy record
   --subprocesses --format raw``, and bucket the Python samples by what the code does.

Figures go to ``bench/results/topology.md``, the chart (words/s per batch against the
baseline and the target; needs matplotlib, the ``bench`` extra) to
``bench/results/topology.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "integration_tests"):  # the bolts' module, for Spark's workers too
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
    [str(REPO), str(REPO / "integration_tests"),
     *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))

RESULTS = REPO / "bench" / "results" / "topology.md"
CHART = RESULTS.with_suffix(".png")
PARTITIONS = 4
BATCH_CAP = 50_000
TARGET_WORDS_S = 150_000  # issue 14, target 6: steady, exactly once
SINKS = {"redis": "RedisSink, `<run>:<word>` = the highest count seen, merge `max`, exactly "
                  "once, on an embedded Redis; counts read back from Redis",
         "memory": "a driver-side dict keeping the highest count per word (the sink's own "
                   "cost left out)"}
VOCABULARY = 10_000  # distinct words, Zipf-distributed (s = 1) like words in text


# -- the process tree, from /proc ------------------------------------------------------------


def _kind(pid: int, root: int) -> str:
    """driver / JVM / Python workers / broker, from the command line."""
    if pid == root:
        return "driver (Python)"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    if "java" in cmd.split(" ", 1)[0]:
        return "JVM"
    if "tansu" in cmd:
        return "broker (tansu)"
    return "Python workers" if "python" in cmd else "other"


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(
                int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _rss_and_cpu(pid: int) -> tuple[int, float]:
    """(VmRSS kB, user+system CPU seconds) of ``pid``; zeros if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0, 0.0
    rss = next((int(line.split()[1]) for line in status.splitlines()
                if line.startswith("VmRSS:")), 0)
    fields = stat[stat.rindex(")") + 2:].split()
    return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Samples the tree's summed RSS (peak kept) and each process's CPU time."""

    def __init__(self, root: int, interval: float = 0.5) -> None:
        self.root, self.interval = root, interval
        self.peak_rss_kb = 0
        self.peak_by_kind_kb: dict[str, int] = {}
        self._cpu: dict[int, tuple[str, float, float]] = {}  # pid -> (kind, first, last)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Sampler:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per process kind between start and stop."""
        out: dict[str, float] = {}
        for kind, first, last in self._cpu.values():
            out[kind] = out.get(kind, 0.0) + last - first
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        by_kind: Counter[str] = Counter()
        at_start = not self._cpu
        for pid in _tree(self.root):
            rss, cpu = _rss_and_cpu(pid)
            # a process already running at start counts from then; a new one from birth
            kind, first, _ = self._cpu.get(pid, (_kind(pid, self.root),
                                                 cpu if at_start else 0.0, 0.0))
            self._cpu[pid] = (kind, first, cpu)
            by_kind[kind] += rss
        total = sum(by_kind.values())
        if total > self.peak_rss_kb:
            self.peak_rss_kb = total
        for kind, rss in by_kind.items():
            self.peak_by_kind_kb[kind] = max(rss, self.peak_by_kind_kb.get(kind, 0))


# -- py-spy samples, bucketed ---------------------------------------------------------------

# A sample goes to the first CONTAINING bucket with a pattern in any frame of its stack,
# else to the INNERMOST bucket: the one matching the deepest frame that any pattern matches
# (bolt code and kstorm's executor call each other, so the deeper one is where time goes).
CONTAINING = [
    ("TWS state calls (map state reads, scans and updates over the state server socket)",
     ("MapStateKeyValue", "tws_map", "state_map", "state_client",
      "stateful_processor_api_client")),
    ("imports in the Python processes Spark starts per query (pyspark from pyspark.zip, "
     "which has no .pyc, is compiled every time)",
     ("zipimport", "_find_and_load")),
    ("Kafka fetch (confluent-kafka consume, read tasks)", ("_kafka/fetch", "kafka_source")),
    ("JSON decode (JsonSerde, pyarrow.json)", ("serdes/",)),
    ("driver commit phase (collect rows, unpickle tuples, sink)", ("commit.py",)),
    ("benchmark's own /proc sampler", ("Sampler",)),
]
INNERMOST = [
    ("bolt code (SplitSentence / WordCount execute, own time)", ("topologies.py",)),
    ("kstorm executor: tuple objects, emit (hash, pickle), anchoring/acking",
     ("kstorm/",)),
    ("Arrow / pandas conversion", ("pandas/", "pyarrow/")),
    ("pyspark daemon: gc.collect() in a reused worker after every task", ("daemon.py",)),
    ("Spark Python worker: I/O and (de)serialization with the JVM", ("pyspark/",)),
    ("driver: py4j calls to the JVM", ("py4j",)),
]


def _bucket(frames: list[str]) -> str:
    for name, patterns in CONTAINING:
        if any(p in frame for frame in frames for p in patterns):
            return name
    for frame in reversed(frames):
        for name, patterns in INNERMOST:
            if any(p in frame for p in patterns):
                return name
    return "other Python"


def summarise(lines: Iterable[str]) -> dict[str, Any]:
    """py-spy raw lines (``process ...;frame;frame count``) -> text and Markdown tables."""
    by_bucket: Counter[str] = Counter()
    by_process: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not count.isdigit():
            continue
        parts = stack.split(";")
        procs = [p for p in parts if p.startswith("process ")]
        frames = [p for p in parts if not p.startswith("process ")]
        proc = procs[-1] if procs else ""
        by_process["driver" if len(procs) <= 1 else
                   "streaming source runner" if "streaming_source" in proc else
                   "Python workers"] += int(count)
        by_bucket[_bucket(frames)] += int(count)
    total = sum(by_bucket.values()) or 1
    rows = [(name, n, n / total) for name, n in by_bucket.most_common()]
    by_proc = ", ".join(f"{k} {n / total:.0%}" for k, n in by_process.most_common())
    text = "\n".join(f"{share:6.1%}  {name}" for name, _, share in rows)
    md = "\n".join(["| where (Python samples, all processes) | samples | share |",
                    "| --- | ---: | ---: |",
                    *(f"| {name} | {n:,} | {share:.1%} |" for name, n, share in rows), "",
                    f"Samples by process: {by_proc}."])
    return {"text": f"py-spy ({total:,} samples; {by_proc}):\n{text}", "markdown": md,
            "shares": {name: share for name, _, share in rows}}


def produce_sentences(bootstrap: str, topic: str, records: list[str]) -> float:
    """Produce ``records`` round-robin over the partitions; returns seconds taken."""
    from confluent_kafka import Producer

    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                         "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000})
    for i, record in enumerate(records):
        while True:
            try:
                producer.produce(topic, value=record.encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left:
        raise SystemExit(f"{left} records not delivered to {topic}")
    return time.monotonic() - started


def redis_counts(url: str, run: str) -> Any:
    """A RedisSink of ``(word, count)`` (``<run>:<word>`` = the highest count, exactly
    once) that also notes when each batch committed, like ``LatestCounts``."""
    from sinks.redis import RedisConfig, RedisSink

    settings = {"key": run + ":{word}", "value": "count", "merge": "max", "sink_id": run}

    class RedisCounts(RedisSink):
        def __init__(self) -> None:
            super().__init__(RedisConfig.from_url(url), **settings)
            self.commits: list[tuple[int, int, float]] = []
            # (RedisSink declines to combine for a subclass with its own commit; this one
            # only notes when each batch committed, so it combines as a plain one does)
            self._plain = RedisSink(RedisConfig.from_url(url), **settings)

        def commit(self, batch: Any) -> None:
            super().commit(batch)
            self.commits.append((batch.batch_id, batch.size, time.monotonic()))

        def combine(self, fields: Any, values: list[list[Any]]) -> Any:
            return self._plain.combine(fields, values)

        @property
        def counts(self) -> dict[str, int]:
            client = self._redis()
            keys = list(client.scan_iter(run + ":*", count=10_000))
            values = client.mget(keys) if keys else []
            return {k.decode()[len(run) + 1:]: int(v)
                    for k, v in zip(keys, values, strict=True)}

    return RedisCounts()


def run_once(name: str, bootstrap: str, topic: str, checkpoint: Path,
             extra_conf: dict[str, Any] | None = None, redis_url: str | None = None,
             count_tasks: int = 3) -> dict[str, Any]:
    """One available-now run of the word count; returns its figures and the sink."""
    from topologies import LatestCounts, word_count

    from kstorm import KafkaSpout, submit_topology
    from serdes.json import JsonSerde

    spout = KafkaSpout(topic, value_serde=JsonSerde({"id": int, "sentence": str}),
                       max_offsets_per_batch=BATCH_CAP)
    conf = {"kafka.bootstrap.servers": bootstrap, "kstorm.checkpoint.dir": str(checkpoint),
            "kstorm.trigger": "available-now", **(extra_conf or {})}
    sampler = Sampler(os.getpid()).start()
    started = time.monotonic()
    sink = LatestCounts() if redis_url is None else redis_counts(redis_url, name)
    handle = submit_topology(name, conf, word_count(spout, sink, count_tasks=count_tasks))
    handle.await_termination()
    wall = time.monotonic() - started
    sampler.stop()
    progress = handle.progress
    # Spark's own per-batch timings (the handle keeps the query private; a benchmark peeks)
    batches = [(int(p["numInputRows"]), p["durationMs"]) for p in handle._query.recentProgress
               if p is not None and int(p["numInputRows"]) > 0]
    handle.stop()
    return {"wall_s": wall, "progress": progress, "sink": handle.sinks["out"],
            "started": started, "sampler": sampler, "spark_batches": batches}


def steady_rate(sink: Any, sentences_per_batch: list[int]) -> float | None:
    """Sentences/s between the first and the last commit (excludes query start-up)."""
    commits = [c for c in sink.commits if c[1] > 0]
    if len(commits) < 2 or len(sentences_per_batch) != len(commits):
        return None
    span = commits[-1][2] - commits[0][2]
    return sum(sentences_per_batch[1:]) / span if span > 0 else None


def machine() -> str:
    """nproc, CPU model, RAM, Python, OS."""
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    return (f"nproc {os.cpu_count()}; CPU {model}; RAM {mem_kb / 2**20:.1f} GiB; "
            f"Python {platform.python_version()}; {platform.platform()}")


def profile_run(name: str, bootstrap: str, topic: str, checkpoint: Path,
                out: Path, redis_url: str | None, count_tasks: int = 3
                ) -> dict[str, Any] | None:
    """The same run under py-spy (all Python processes of the tree); None without py-spy."""
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        print("py-spy not found: no profile (pip install py-spy)")
        return None
    spy = subprocess.Popen([pyspy, "record", "--pid", str(os.getpid()), "--subprocesses",
                            "--nonblocking", "--rate", "50", "--format", "raw", "-o", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # py-spy attaches
        if spy.poll() is not None:
            print(f"py-spy failed: {spy.stderr.read().decode()[-500:] if spy.stderr else ''}")
            return None
        result = run_once(name, bootstrap, topic, checkpoint, redis_url=redis_url,
                          count_tasks=count_tasks)
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
    if not out.exists():
        print("py-spy wrote no profile")
        return None
    return {"run": result, "summary": summarise(out.read_text().splitlines())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=400_000)
    parser.add_argument("--sink", choices=("redis", "memory"), default="redis",
                        help="out: an exactly-once RedisSink on an embedded Redis (default), "
                             "or a driver-side dict (the sink's own cost left out)")
    parser.add_argument("--profile-sentences", type=int, default=BATCH_CAP,
                        help="size of the profiled run (a topic of its own)")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--count-tasks", type=int, default=3,
                        help="tasks of the stateful count bolt (default 3)")
    parser.add_argument("--profile-out", type=Path, default=None,
                        help="keep py-spy's raw samples in this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from topologies import sentence_records, synthetic_vocabulary

    from kstorm._kafka.client import close_driver_consumers, create_topic
    from kstorm._spark.session import get_session
    from kstorm.config import TopologyConfig
    from kstorm.embedded import EmbeddedKafka, EmbeddedRedis

    began, load_before = time.monotonic(), os.getloadavg()[0]
    records = sentence_records(args.sentences, seed=11, vocabulary=synthetic_vocabulary(VOCABULARY),
                               zipf=1.0)
    small = records[:args.profile_sentences]
    work = Path(tempfile.mkdtemp(prefix="wordcount-throughput-"))
    try:
        with EmbeddedKafka() as kafka, contextlib.ExitStack() as services:
            redis_url = (None if args.sink == "memory" else
                         services.enter_context(EmbeddedRedis()).url)
            bootstrap = kafka.bootstrap_servers
            create_topic(bootstrap, "bench-sentences", partitions=PARTITIONS)
            produce_s = produce_sentences(bootstrap, "bench-sentences", records)
            if not args.no_profile:
                create_topic(bootstrap, "bench-profile", partitions=PARTITIONS)
                produce_sentences(bootstrap, "bench-profile", small)
            words = word_counts(records)
            print(f"produced {len(records):,} sentences ({sum(words.values()):,} words) in "
                  f"{produce_s:.2f} s")
            ends = {p: len(range(p, len(records), PARTITIONS)) for p in range(PARTITIONS)}
            raws = [raw_word_count(bootstrap, ends, words)]
            t0 = time.monotonic()
            spark = get_session(TopologyConfig.from_conf({}))
            session_s = time.monotonic() - t0
            master = str(spark.sparkContext.master)
            try:
                run = run_once("bench-wordcount", bootstrap, "bench-sentences", work / "cp1",
                               redis_url=redis_url, count_tasks=args.count_tasks)
                check_counts(run["sink"], words)
                raws.append(raw_word_count(bootstrap, ends, words))
                report = figures(run, len(records), sum(words.values()))
                report["raw_words_s"] = [raw.rate for raw in raws]
                report["load"] = (load_before, os.getloadavg()[0])
                report["sink"] = args.sink
                report["count_tasks"] = args.count_tasks
                print_figures(report, session_s, master)
                profile = None
                if not args.no_profile:
                    profile = profile_run("bench-wordcount-profiled", bootstrap,
                                          "bench-profile", work / "cp2", work / "pyspy.txt",
                                          redis_url, args.count_tasks)
                if profile is not None:
                    check_counts(profile["run"]["sink"], word_counts(small))
                    profile["sentences"] = len(small)
                    if args.profile_out is not None:
                        shutil.copy(work / "pyspy.txt", args.profile_out)
                    print(profile["summary"]["text"])
            finally:
                spark.stop()
                close_driver_consumers()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = " ".join(["python -m bench.topology_throughput", *(argv or sys.argv[1:])])
    write_results(report, profile, session_s, master, produce_s, command,
                  time.monotonic() - began)
    print(f"wrote {RESULTS.relative_to(REPO)}")
    if chart(report, CHART):
        print(f"wrote {CHART.relative_to(REPO)}")


def raw_word_count(bootstrap: str, ends: dict[int, int], words: Counter[str]) -> Any:
    """The baseline: a hand-written Python word count over the topic; counts checked."""
    from bench.raw import consume_and_count_words

    raw = consume_and_count_words(bootstrap, "bench-sentences", ends)
    if raw.counts != words:
        wrong = sum(1 for w in words.keys() | raw.counts.keys() if raw.counts[w] != words[w])
        raise SystemExit(f"the raw word count is wrong for {wrong:,} words")
    print(f"raw Python word count (confluent-kafka + json.loads + split + Counter): "
          f"{raw.rate:,.0f} words/s ({raw.sentences / raw.seconds:,.0f} sentences/s)")
    return raw


def batch_rates(r: dict[str, Any]) -> list[float]:
    """Words/s of each batch: its words over Spark's whole trigger time for it.

    Example:
        >>> batch_rates({"words_per_sentence": 8.0,
        ...              "spark_batches": [(1000, {"triggerExecution": 500})]})
        [16000.0]
    """
    return [rows * r["words_per_sentence"] / (ms["triggerExecution"] / 1000)
            for rows, ms in r["spark_batches"] if ms.get("triggerExecution")]


def ratio(r: dict[str, Any]) -> float | None:
    """kstorm's steady words/s over the faster baseline run of the same benchmark run."""
    best = max(r.get("raw_words_s") or [0.0])
    return steady_words(r) / best if best > 0 and r["steady_sentences_s"] else None


def chart(r: dict[str, Any], path: Path) -> bool:
    """Words/s per batch, kstorm's steady rate, the baseline's runs and the target as lines
    (needs matplotlib); False when it cannot be drawn."""
    try:
        import matplotlib
    except ImportError:
        print(f"no chart ({path.name}): pip install -e '.[bench]' for matplotlib")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = batch_rates(r)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(range(len(rates)), rates, color="tab:blue", alpha=0.6,
           label="kstorm, each batch (trigger time)")
    if r["steady_sentences_s"]:
        ax.axhline(steady_words(r), color="tab:blue", linewidth=1.5,
                   label="kstorm steady (first to last commit)")
    for i, raw in enumerate(r.get("raw_words_s") or []):
        ax.axhline(raw, color="grey", linestyle="--" if i == 0 else ":", linewidth=1,
                   label=f"raw Python word count (run {i + 1})")
    ax.axhline(TARGET_WORDS_S, color="tab:red", linewidth=1, label="target (issue 14)")
    ax.set_xticks(range(len(rates)))
    ax.set_xlabel(f"batch ({BATCH_CAP:,} sentences each)")
    ax.set_ylabel("words/s")
    ax.set_ylim(bottom=0)
    ax.set_title("Word count (split, stateful count, Redis, exactly once)")
    ax.legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def word_counts(records: list[str]) -> Counter[str]:
    """The expected final count of every word."""
    return Counter(w for r in records for w in json.loads(r)["sentence"].split())


def check_counts(sink: Any, words: Counter[str]) -> None:
    counts = sink.counts  # (read from Redis: once)
    if counts != dict(words):
        wrong = {w: (counts.get(w), n) for w, n in words.items() if counts.get(w) != n}
        raise SystemExit(f"wrong counts (got, expected): {dict(list(wrong.items())[:5])}")


def figures(run: dict[str, Any], sentences: int, words: int) -> dict[str, Any]:
    progress, sink, sampler = run["progress"], run["sink"], run["sampler"]
    return {
        "sentences": sentences, "words": words, "wall_s": run["wall_s"],
        "batches": progress["batches"],
        "first_commit_s": sink.commits[0][2] - run["started"] if sink.commits else None,
        "steady_sentences_s": steady_rate(sink, [n for n, _ in run["spark_batches"]]),
        "words_per_sentence": words / sentences,
        "peak_rss": sampler.peak_rss_kb, "peak_by_kind": sampler.peak_by_kind_kb,
        "cpu": sampler.cpu_seconds(),
        "spark_batches": run["spark_batches"],
    }


def batch_table(r: dict[str, Any]) -> list[str]:
    """Spark's timings of each batch: in ``addBatch`` (the job: bolts, shuffles, state,
    commit phase) and around it (offsets, planning, WAL and commit logs)."""
    lines = ["| batch | sentences | trigger total | addBatch (job + commit phase) | around it |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for i, (rows, ms) in enumerate(r["spark_batches"]):
        total, job = ms.get("triggerExecution", 0), ms.get("addBatch", 0)
        lines.append(f"| {i} | {rows:,} | {total / 1000:.1f} s | {job / 1000:.1f} s | "
                     f"{(total - job) / 1000:.2f} s |")
    return lines


def print_figures(r: dict[str, Any], session_s: float, master: str) -> None:
    print(f"master {master}; SparkSession start {session_s:.1f} s")
    print(f"run: {r['wall_s']:.1f} s, {r['batches']} batches, first commit after "
          f"{r['first_commit_s']:.1f} s")
    print(f"throughput: {r['sentences'] / r['wall_s']:,.0f} sentences/s, "
          f"{r['words'] / r['wall_s']:,.0f} words/s (whole run)")
    if r["steady_sentences_s"]:
        print(f"steady state (first to last commit): {r['steady_sentences_s']:,.0f} "
              f"sentences/s, {steady_words(r):,.0f} words/s (target >= {TARGET_WORDS_S:,})")
    if ratio(r) is not None:
        print(f"ratio to the raw Python word count of the same run: {ratio(r):.2f}x "
              f"(raw runs: {', '.join(f'{x:,.0f}' for x in r['raw_words_s'])} words/s)")
    print(f"peak RSS (process tree): {r['peak_rss'] / 2**20:.2f} GiB; by kind "
          + ", ".join(f"{k} {v / 1024:.0f} MiB" for k, v in r["peak_by_kind"].items()))
    print("CPU seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in r["cpu"].items()))
    print("\n".join(batch_table(r)))


def steady_words(r: dict[str, Any]) -> float:
    """Words/s between the first and the last commit (sentences/s x words per sentence)."""
    return (r["steady_sentences_s"] or 0.0) * r["words_per_sentence"]


def write_results(r: dict[str, Any], profile: dict[str, Any] | None, session_s: float,
                  master: str, produce_s: float, command: str, total_s: float) -> None:
    steady = (f"{r['steady_sentences_s']:,.0f}" if r["steady_sentences_s"]
              else "n/a (one batch)")
    cpu_total = sum(r["cpu"].values())
    lines = [
        "# Topology throughput: the issue-2 word count on the embedded broker", "",
        f"Command: `{command}` (from the repository root)", "",
        "Topology (`integration_tests/topologies.py`, the one the Kafka integration tests "
        "run): `sentences` KafkaSpout (JSON `{id, sentence}` of 5-11 words drawn from "
        f"{VOCABULARY:,} words with Zipf weights, 4 partitions) "
        "--shuffle--> `split` (BaseBasicBolt, 2 tasks) --fields(word)--> `count` "
        f"(BaseStatefulBolt, {r.get('count_tasks', 3)} tasks, Spark state store via "
        "transformWithStateInPandas) "
        f"--fields(word)--> `out` ({SINKS[r['sink']]}). Available-now, "
        f"`max_offsets_per_batch={BATCH_CAP:,}`, master `{master}`. Counts checked "
        "against the produced sentences.", "",
        "| figure | value |", "| --- | ---: |",
        f"| sentences (events in) | {r['sentences']:,} |",
        f"| words (tuples into `count`, and out of it) | {r['words']:,} |",
        f"| batches | {r['batches']} |",
        f"| run wall time (submit -> drained) | {r['wall_s']:.1f} s |",
        f"| time to first commit | {r['first_commit_s']:.1f} s |",
        f"| **sentences/s (whole run)** | **{r['sentences'] / r['wall_s']:,.0f}** |",
        f"| **words/s (whole run)** | **{r['words'] / r['wall_s']:,.0f}** |",
        f"| sentences/s (first to last commit) | {steady} |",
        f"| **words/s (first to last commit; issue 14's target: >= {TARGET_WORDS_S:,})** | "
        f"**{steady_words(r):,.0f}** |",
        "| baseline: a hand-written Python word count over the same topic (confluent-kafka, "
        "`json.loads`, split, `Counter`; one process, no state, no sink), before / after "
        "kstorm's run | " + " / ".join(f"{x:,.0f}" for x in r.get("raw_words_s") or [])
        + " words/s |",
        "| **ratio kstorm steady / the faster baseline run** | **"
        + (f"{ratio(r):.2f}x" if ratio(r) is not None else "n/a") + "** |",
        f"| sentences per CPU-second (all processes; less sensitive to load) | "
        f"{r['sentences'] / cpu_total:,.0f} |",
        f"| peak RSS, whole process tree | {r['peak_rss'] / 2**20:.2f} GiB |",
        "| peak RSS by kind | " + ", ".join(f"{k} {v / 1024:.0f} MiB"
                                            for k, v in r["peak_by_kind"].items()) + " |",
        f"| SparkSession start (once per process, not in the run) | {session_s:.1f} s |",
        f"| producing the sentences (not in the run) | {produce_s:.1f} s |", "",
        f"CPU seconds during the run (from `/proc`, {cpu_total:.1f} s in all over "
        f"{r['wall_s']:.1f} s wall on {os.cpu_count()} cores): "
        + ", ".join(f"{k} {v:.1f} s ({v / cpu_total:.0%})" for k, v in r["cpu"].items())
        + ".", "",
        "Spark's timings per batch (`StreamingQueryProgress.durationMs`):", "",
        *batch_table(r), "",
        f"![words/s per batch]({CHART.name})", "",
        f"Machine: {machine()}; load average (1 min) before the run "
        f"{r['load'][0]:.1f}, after it {r['load'][1]:.1f}",
        f"Run took {total_s:.0f} s in all, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. "
        "The machine is shared with other work, so figures vary between runs.", "",
    ]
    if profile is not None:
        lines += ["## Where the time goes (py-spy)", "",
                  f"A second run ({profile['sentences']:,} sentences, a topic of its own) "
                  "under `py-spy record "
                  f"--subprocesses --nonblocking --rate 50` (run wall time "
                  f"{profile['run']['wall_s']:.1f} s). py-spy samples Python only; "
                  "the JVM's share is the CPU figure above.", "",
                  profile["summary"]["markdown"], ""]
    lines += reading(r, profile)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))


def reading(r: dict[str, Any], profile: dict[str, Any] | None) -> list[str]:
    """Spark's per-batch overhead vs Python bolt time vs state calls, from the figures."""
    batches = r["spark_batches"]
    if len(batches) < 2:
        return []
    per_row = sorted(ms["addBatch"] / 1000 / rows for rows, ms in batches[1:])
    steady = per_row[len(per_row) // 2] * batches[0][0]  # a batch as large as the first
    around = sum((ms["triggerExecution"] - ms["addBatch"]) / 1000
                 for _, ms in batches[1:]) / (len(batches) - 1)
    warmup = batches[0][1]["addBatch"] / 1000 - steady
    start = r["first_commit_s"] - batches[0][1]["triggerExecution"] / 1000
    cpu = r["cpu"]
    total = sum(cpu.values())
    py, jvm = cpu.get("Python workers", 0.0), cpu.get("JVM", 0.0)
    out = ["## Reading the figures", "",
           f"- **Spark's per-batch overhead is small at this batch size**: {around:.2f} s per "
           f"batch around the job (offsets, planning, offset and commit logs) against "
           f"{steady:.1f} s for the job itself ({around / (around + steady):.0%}). The fixed "
           f"costs come first: {start:.1f} s of query start before the first batch, and a "
           f"first batch {warmup:.1f} s slower than the next ones per record (Spark starts "
           "the Python workers, the TWS driver worker and the stream reader process, which import "
           "pyspark from `pyspark.zip` without bytecode caching; JVM code generation; "
           "RocksDB opens the state store).",
           f"- **The rest is per-tuple Python work**: the Python workers used {py:.1f} CPU-s "
           f"({py / total:.0%} of the tree's CPU), the JVM {jvm:.1f} CPU-s "
           f"({jvm / total:.0%}; Arrow transfer to and from the workers, the shuffles, "
           "the state store, collecting the sink's rows)."]
    if profile is not None:
        share = profile["summary"]["shares"]

        def pct(prefix: str) -> str:
            return f"{sum(v for k, v in share.items() if k.startswith(prefix)):.0%}"

        out += [f"  Of the Python samples, kstorm's executor takes {pct('kstorm executor')} "
                "(a Tuple object per input, routing and a stable hash of the grouping field "
                "per emitted tuple, pickling the packed envelope rows (one per destination "
                "task, many tuples each), anchoring and ack "
                f"bookkeeping), the bolts' own code {pct('bolt code')}, Arrow/pandas "
                f"conversion {pct('Arrow')}, the Spark worker protocol {pct('Spark Python')} "
                f"and its gc.collect() after every task {pct('pyspark daemon')}, the driver's "
                f"commit phase {pct('driver commit')}. (The profiled run is one batch, so "
                "its start-up weighs more there than in the measured run.)",
                f"- **TWS state calls are {pct('TWS state')} of the Python samples**: the "
                "stateful stage reads each key at most once per batch and task (then from "
                "a cache), by scanning the task's map once it has made 16 point reads, and "
                "writes the batch's changes at its end, 64 per round trip "
                "(`kstorm/_spark/speedups/state_map.py`)."]
    return [*out, ""]


if __name__ == "__main__":
    main()
