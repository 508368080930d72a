"""The word count with each state provider: ``spark`` (Spark's state store) vs ``redis``.

Run: ``python -m bench.state_providers`` from the repository root; ``--sentences N``
(default 100,000), ``--rounds R`` (default 3; after an uncounted warm-up run the order
alternates, spark first in odd rounds, so that the machine's drift hits both alike).

The topology is ``bench.topology_throughput``'s (KafkaSpout -> split (2 tasks) -> stateful
``count`` (3 tasks) -> a sink keeping the latest count per word), available-now with
``max_offsets_per_batch=50,000``, over sentences of ~8 words drawn from 10,000 words with
Zipf weights, on the embedded broker and an embedded Redis, one SparkSession. Every run's
counts are checked against the produced sentences. Figures (words/s over the whole run and
from the first to the last commit, the median per provider and the ratio redis/spark) go
to ``bench/results/state_providers.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import topology_throughput as tt

RESULTS = tt.REPO / "bench" / "results" / "state_providers.md"


def provider_conf(provider: str, redis: Any) -> dict[str, Any]:
    """The configuration keys of ``provider`` (the embedded Redis for ``redis``)."""
    if provider == "spark":
        return {}
    return {"topology.state.provider": "redis",
            "topology.state.provider.config": {"jedisPoolConfig": {"host": redis.host,
                                                                   "port": redis.port}}}


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from topologies import sentence_records, synthetic_vocabulary

    from kstorm._kafka.client import close_driver_consumers, create_topic
    from kstorm._spark.session import get_session
    from kstorm.config import TopologyConfig
    from kstorm.embedded import EmbeddedKafka, EmbeddedRedis

    began, load_before = time.monotonic(), os.getloadavg()[0]
    records = sentence_records(args.sentences, seed=11,
                               vocabulary=synthetic_vocabulary(tt.VOCABULARY), zipf=1.0)
    words = tt.word_counts(records)
    work = Path(tempfile.mkdtemp(prefix="state-providers-"))
    rows: list[dict[str, Any]] = []
    try:
        with EmbeddedKafka() as kafka, EmbeddedRedis() as redis:
            bootstrap = kafka.bootstrap_servers
            create_topic(bootstrap, "bench-sentences", partitions=tt.PARTITIONS)
            tt.produce_sentences(bootstrap, "bench-sentences", records)
            spark = get_session(TopologyConfig.from_conf({}))
            master = str(spark.sparkContext.master)
            try:
                # a first query pays Spark's one-off costs (plans, worker start): not counted
                warm = tt.run_once("bench-wc-warm-up", bootstrap, "bench-sentences",
                                   work / "warm-up")
                tt.check_counts(warm["sink"], words)
                for round_ in range(args.rounds):
                    order = ("spark", "redis") if round_ % 2 == 0 else ("redis", "spark")
                    for provider in order:
                        name = f"bench-wc-{provider}-{round_}"
                        run = tt.run_once(name, bootstrap, "bench-sentences", work / name,
                                          provider_conf(provider, redis))
                        tt.check_counts(run["sink"], words)
                        report = tt.figures(run, len(records), sum(words.values()))
                        steady = report["steady_sentences_s"]
                        row = {"provider": provider, "round": round_ + 1,
                               "wall_s": report["wall_s"], "batches": report["batches"],
                               "words_s": report["words"] / report["wall_s"],
                               "steady_words_s": (steady * report["words"] / report["sentences"]
                                                  if steady else None),
                               "load": os.getloadavg()[0]}
                        rows.append(row)
                        print(f"round {row['round']} {provider:5}: {row['words_s']:,.0f} "
                              f"words/s whole run, steady "
                              f"{row['steady_words_s'] or 0:,.0f}, {row['wall_s']:.1f} s, "
                              f"counts exact", flush=True)
            finally:
                spark.stop()
                close_driver_consumers()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = " ".join(["python -m bench.state_providers", *(argv or sys.argv[1:])])
    write_results(rows, args, master, load_before, command, time.monotonic() - began)
    print(f"wrote {RESULTS.relative_to(tt.REPO)}")


def _median(rows: list[dict[str, Any]], provider: str, key: str) -> float | None:
    values = [r[key] for r in rows if r["provider"] == provider and r[key] is not None]
    return statistics.median(values) if values else None


def write_results(rows: list[dict[str, Any]], args: argparse.Namespace, master: str,
                  load_before: float, command: str, total_s: float) -> None:
    """bench/results/state_providers.md."""
    lines = ["# Word count throughput by state provider", "",
             f"Command: `{command}` (from the repository root)", "",
             f"{args.sentences:,} sentences (~8 words each, 10,000-word Zipf vocabulary) on "
             "the embedded broker (4 partitions), the word count of `bench.topology_throughput`"
             " (stateful `count` with 3 tasks), available-now, `max_offsets_per_batch=50,000`, "
             f"master `{master}`, one SparkSession; the `redis` provider on an embedded "
             "redis-server on loopback. An uncounted warm-up run first, then the providers "
             "in alternating order; every run's counts checked against the produced "
             "sentences (all exact).", "",
             "| round | provider | words/s (whole run) | words/s (first to last commit) | "
             "wall | batches | load after |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        steady = f"{r['steady_words_s']:,.0f}" if r["steady_words_s"] else "n/a"
        lines.append(f"| {r['round']} | {r['provider']} | {r['words_s']:,.0f} | {steady} | "
                     f"{r['wall_s']:.1f} s | {r['batches']} | {r['load']:.1f} |")
    lines += [""]
    for key, label in (("words_s", "whole run"), ("steady_words_s", "first to last commit")):
        spark, redis = _median(rows, "spark", key), _median(rows, "redis", key)
        if spark and redis:
            lines.append(f"- median words/s, {label}: spark {spark:,.0f}, redis {redis:,.0f}: "
                         f"redis/spark = **{redis / spark:.2f}x**")
    lines += ["", f"Machine: {tt.machine()}; load average (1 min) before {load_before:.1f}. "
              f"Took {total_s:.0f} s, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC.", ""]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
