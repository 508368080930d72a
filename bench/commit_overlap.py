"""``python -m bench.commit_overlap``: what ``kstorm.commit.overlap`` saves, and where.

A Kafka-to-Kafka topology whose commit phase is a large part of each batch: KafkaSpout (JSON
``{id, value}``, 4 partitions, ``--max-offsets`` per batch) -> ``Square`` (2 tasks) ->
exactly-once ``KafkaSink`` (one Kafka transaction per batch: ~145 ms of a ~320 ms batch at
20,000 offsets on the project machine). Each run is its own process (a fresh Spark),
available-now over the same input topic into an output topic of its own, with the overlap
``true`` and ``false`` interleaved, ``--rounds`` times, under each ``--masters``:
``local[2]`` (the batch's tasks on both cores of a 2-core machine, the driver's commit
thread competing with them) and ``local[1]`` (one core for the tasks, the driver's commit
thread with a core of its own, as on a cluster). Reported per run: the median Spark trigger
(a batch, end to end, the first two batches left out), the commit phase per batch and the
part of it the batch waited for, and whether the output topic holds every input record
exactly once with the right value.

Example:
    python -m bench.commit_overlap                 # 200,000 records, 3 rounds, both masters
    python -m bench.commit_overlap --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "commit_overlap.md"


def _environment() -> None:
    sys.path.insert(0, str(REPO / "integration_tests"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "integration_tests"), str(REPO),
         *filter(None, [os.environ.get("PYTHONPATH")])])


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One run (in its own process): the topology to the input's end, then the output read."""
    from kafka_eo_topology import build_topology

    from kstorm import submit_topology
    from kstorm._kafka.client import create_topic

    output = f"{args.input}-out-{uuid.uuid4().hex[:6]}"
    create_topic(args.bootstrap, output, 4)
    conf = {"kafka.bootstrap.servers": args.bootstrap,
            "kstorm.checkpoint.dir": str(Path(args.workdir) / output),
            "kstorm.trigger": "available-now", "kstorm.spark.master": args.master,
            "kstorm.commit.overlap": args.overlap}
    started = time.monotonic()
    handle = submit_topology(f"overlap-{output}", conf,
                             build_topology(args.input, output, max_per_batch=args.max_offsets))
    try:
        handle.await_termination()
        wall = time.monotonic() - started
        progress = handle.progress
        batches = [b["durationMs"] for b in handle.recent_batches][2:]
    finally:
        handle.stop()
    n = progress["batches"]
    return {"master": args.master, "overlap": args.overlap, "batches": n,
            "batch_ms": statistics.median(b["triggerExecution"] for b in batches),
            "commit_ms": 1000 * progress["commit_seconds"] / n,
            "waited_ms": 1000 * progress["commit_blocking_seconds"] / n,
            "wall_s": wall, "exact": exact(args.bootstrap, output, args.records)}


def exact(bootstrap: str, topic: str, records: int) -> bool:
    """Every id 0..records-1 once in ``topic``, with its square (no failure: no aborts)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(4)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        seen: dict[int, int] = {}
        count, deadline = 0, time.monotonic() + 120
        parts = [TopicPartition(topic, p) for p in range(4)]
        while time.monotonic() < deadline:
            got = consumer.consume(10_000, 0.5)
            if not got and len(seen) >= records:
                break  # everything, and nothing more for a while
            for message in got:
                if message.error() is None:
                    row = json.loads(message.value())
                    seen[row["id"]] = seen.get(row["id"], 0) + 1
                    count += row["square"] == (row["id"] % 1000 + 1) ** 2
            # (the ends count the transactions' commit markers too: read to the positions)
            if all(tp.offset >= ends[tp.partition] for tp in consumer.position(parts)):
                break
    finally:
        consumer.close()
    return count == records and len(seen) == records and set(seen.values()) == {1}


def produce(bootstrap: str, topic: str, records: int) -> None:
    """``records`` JSON records ``{id, value}``, round robin over 4 partitions."""
    from confluent_kafka import Producer
    from kafka_eo_topology import input_records

    from kstorm._kafka.client import create_topic

    create_topic(bootstrap, topic, 4)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000})
    for i, record in enumerate(input_records(records)):
        producer.produce(topic, record.encode(), partition=i % 4)
        if i % 50_000 == 49_999:
            producer.flush()
    producer.flush()


def summary(runs: list[dict[str, Any]]) -> str:
    """One line per (master, overlap): medians over the rounds."""
    lines = ["| master | kstorm.commit.overlap | batch ms (median per run) | commit ms/batch | "
             "of which the batch waited | wall s | exact |",
             "| --- | --- | --- | ---: | ---: | ---: | --- |"]
    for master in dict.fromkeys(r["master"] for r in runs):
        for overlap in ("true", "false"):
            mine = [r for r in runs if r["master"] == master and r["overlap"] == overlap]
            if not mine:
                continue
            each = " / ".join(f"{r['batch_ms']:.0f}" for r in mine)
            lines.append(
                f"| {master} | {overlap} | {each} "
                f"| {statistics.median(r['commit_ms'] for r in mine):.0f} "
                f"| {statistics.median(r['waited_ms'] for r in mine):.0f} "
                f"| {statistics.median(r['wall_s'] for r in mine):.1f} "
                f"| {'yes' if all(r['exact'] for r in mine) else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run (module docstring); 0 when every run's output is exact."""
    parser = argparse.ArgumentParser(prog="python -m bench.commit_overlap")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--max-offsets", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--masters", default="local[2],local[1]")
    parser.add_argument("--no-write", action="store_true")
    for hidden in ("--child", "--bootstrap", "--input", "--workdir", "--master", "--overlap"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _environment()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    import tempfile

    from bench.report import machine
    from kstorm.embedded import EmbeddedKafka

    runs: list[dict[str, Any]] = []
    began = time.monotonic()
    with EmbeddedKafka() as kafka, tempfile.TemporaryDirectory() as workdir:
        topic = f"overlap-{uuid.uuid4().hex[:6]}"
        produce(kafka.bootstrap_servers, topic, args.records)
        for round_ in range(args.rounds):
            for master in args.masters.split(","):
                for overlap in ("true", "false"):
                    done = subprocess.run(
                        [sys.executable, "-m", "bench.commit_overlap", "--child", "1",
                         "--bootstrap", kafka.bootstrap_servers, "--input", topic,
                         "--workdir", workdir, "--master", master, "--overlap", overlap,
                         "--records", str(args.records), "--max-offsets",
                         str(args.max_offsets)],
                        capture_output=True, text=True, cwd=REPO, check=False)
                    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
                    if not lines:
                        print(done.stderr[-3000:], file=sys.stderr)
                        return 1
                    runs.append(json.loads(lines[-1]))
                    r = runs[-1]
                    print(f"round {round_ + 1} {master} overlap={overlap}: batch "
                          f"{r['batch_ms']:.0f} ms, commit {r['commit_ms']:.0f} ms/batch "
                          f"(waited {r['waited_ms']:.0f}), exact: {r['exact']}", flush=True)
    table = summary(runs)
    print(table)
    ok = all(r["exact"] for r in runs)
    if not args.no_write:
        info = machine()
        command = "python -m bench.commit_overlap" + "".join(
            f" --{k.replace('_', '-')} {v}" for k, v in
            (("records", args.records), ("max_offsets", args.max_offsets),
             ("rounds", args.rounds), ("masters", args.masters))
            if v != parser.get_default(k))
        RESULTS.write_text(
            "# Commit overlap (`python -m bench.commit_overlap`)\n\n"
            "What `kstorm.commit.overlap` saves and where; the method is the module docstring "
            "of `bench/commit_overlap.py`.\n\n"
            f"Command: `{command}` (repository root); run "
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {time.monotonic() - began:.0f} s; "
            f"{args.records:,} records, batches of {args.max_offsets:,} offsets.\n\n"
            f"Machine: nproc {info['nproc']}; CPU {info['cpu']}; RAM {info['ram']}; "
            f"{info['os']}; Python {info['python']}; {info['java']}; PySpark "
            f"{info['pyspark']}; load average at the end {info['load']}.\n\n{table}\n\n"
            "Batch ms: the median of Spark's `triggerExecution` per run (the first two batches "
            "left out), one figure per round. Commit ms/batch: the commit phase from its start "
            "to the sinks' commit; of which the batch waited: the part Spark's next batch "
            "waited for (with the overlap: the windows, dead letters and the wait for the "
            "previous batch's sinks).\n")
        print(f"written: {RESULTS.relative_to(REPO)}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
