"""Where the time goes: py-spy's raw (collapsed) samples, bucketed by what the code does.

``py-spy record --subprocesses --format raw`` writes one line per distinct stack: the chain
of processes (``process <pid>:"<command>"``), then the frames root first
(``function (file.py:line)``), then the sample count. Each stack gets a process kind (the
last process of its chain) and the first bucket of :data:`BUCKETS` for that kind with a
pattern in one of its frames. py-spy sees Python only: the JVM's time is given separately,
from ``/proc`` CPU counters.

Example:
    >>> line = 'process 1:"python -m bench.topology";read (kafka_source.py:9) 5'
    >>> parse_line(line)
    ('python driver', ['read (kafka_source.py:9)'], 5)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

WORKERS, DRIVER, HELPERS = "python workers", "python driver", "python helpers (Spark)"
OWN = ("kstorm/", "serdes/", "sinks/", "bench/")  # this repository's code

# (process kind or "*", bucket, patterns): the first match wins. Patterns are matched against
# the innermost frame of this repository's code (or every frame when there is none); "all:"
# patterns against every frame, "leaf:" patterns against the innermost frame.
BUCKETS: list[tuple[str, str, tuple[str, ...]]] = [
    ("*", "imports (process start)", ("all:<frozen importlib", "all:<frozen zipimport")),
    (WORKERS, "daemon waiting for tasks", ("leaf:manager (daemon.py",)),
    (WORKERS, "JSON parse (JsonSerde.deserialize_batch)", ("serdes/",)),
    (WORKERS, "Kafka consume (confluent-kafka consume(): librdkafka, waits on the broker)",
     ("_consume (",)),
    (WORKERS, "messages -> Arrow columns (to_record_batch, read glue)", ("_kafka/fetch.py",
                                                                        "kafka_source.py")),
    (WORKERS, "window stage: late mask, partials (Arrow group-by), envelope",
     ("windowed.py", "aggregate.py", "envelope.py", "executor.py")),
    (WORKERS, "Arrow IPC with the JVM (pyspark worker, serializers)", ("pyspark",)),
    (DRIVER, "commit: Redis sink (entries, JSON values, Lua call)", ("sinks/redis",
                                                                     "redis/")),
    (DRIVER, "commit: window merge and emit (aggregate.py)", ("aggregate.py", "windowed.py")),
    (DRIVER, "commit: rows -> Tuples, toArrow, offsets (commit.py)", ("commit.py", "tuple.py",
                                                                      "batch_rows.py",
                                                                      "arrow_collect.py",
                                                                      "progress.py",
                                                                      "deadletter.py")),
    (DRIVER, "Spark session start, query start, offsets", ("session.py", "runner.py",
                                                          "compiler.py", "reconcile.py",
                                                          "kafka_source.py", "_kafka/client.py")),
    (DRIVER, "waiting on the JVM (py4j threads, await_termination)", ("py4j", "pyspark",
                                                                      "handle.py",
                                                                      "threading.py")),
    (HELPERS, "data source planning, offsets (kafka_source.py, _kafka/client.py)", ("kstorm/",)),
]
OTHER = "other"


def parse_line(line: str) -> tuple[str, list[str], int]:
    """(process kind, frames root first, samples) of one raw py-spy line."""
    stack, _, count = line.rstrip().rpartition(" ")
    parts = stack.split(";")
    processes = [p for p in parts if p.startswith("process ")]
    frames = [p for p in parts if not p.startswith("process ")]
    last = processes[-1] if processes else ""
    if "kstorm._spark.speedups.zygote" in last:  # forked from kstorm's zygote: its command line
        # the worker daemon and its workers run speedups/daemon.py; planners, the source runner
        # and the zygote itself do not
        kind = WORKERS if any("speedups/daemon.py" in f for f in frames) else HELPERS
    elif last.endswith(" pyspark.worker\"") or last.endswith("daemon\""):  # any daemon module
        kind = WORKERS
    elif "bench.topology" in last or len(processes) == 1:  # py-spy's root is the driver
        kind = DRIVER
    elif "pyspark" in last:
        kind = HELPERS
    else:
        kind = OTHER
    return kind, frames, int(count)


def bucket(kind: str, frames: list[str]) -> str:
    """The first bucket for ``kind`` whose pattern matches (see :data:`BUCKETS`)."""
    own = [f for f in frames if any(m in f for m in OWN)]
    focus = own[-1:] if own else frames
    for who, name, patterns in BUCKETS:
        if who not in ("*", kind):
            continue
        for p in patterns:
            where, _, text = p.rpartition(":") if p.startswith(("all:", "leaf:")) else ("", "", p)
            scope = frames if where == "all" else frames[-1:] if where == "leaf" else focus
            if any(text in frame for frame in scope):
                return name
    return OTHER


def summarize(raw: str, run: Any = None, rate_hz: int = 50) -> str:
    """A Markdown table: seconds of samples by process kind and bucket."""
    by: Counter[tuple[str, str]] = Counter()
    for line in raw.splitlines():
        if line.strip():
            kind, frames, count = parse_line(line)
            by[(kind, bucket(kind, frames))] += count
    total = sum(by.values()) or 1
    lines = [f"py-spy (`record --subprocesses --rate {rate_hz}`) of one more run, "
             f"{total / rate_hz:.1f} s of Python samples:", "",
             "| process | where | seconds | share |", "| --- | --- | ---: | ---: |"]
    for (kind, name), count in sorted(by.items(), key=lambda kv: (kv[0][0], -kv[1])):
        lines.append(f"| {kind} | {name} | {count / rate_hz:.1f} | {100 * count / total:.0f}% |")
    if run is not None:
        lines += ["", "CPU seconds of the profiled run's processes (/proc; py-spy adds its own): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(run.cpu_by_role.items()))]
    return "\n".join(lines)
