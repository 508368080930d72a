"""``python -m bench``: the standard benchmark (see ``bench/standard.py``).

Examples:
    python -m bench                                 # 1,000,000 events, batches of 500,000
    python -m bench --events 200000 --no-write      # a quick check, results not recorded
    python -m bench --max-offsets 100000,250000,500000   # try several caps, report the fastest
    python -m bench --profile                       # also a py-spy run (pip install py-spy)
    python -m bench --one-row-batches 100           # also the fixed cost of a batch

Exit status: 0 when every window result equals the ground truth, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import report
from bench.profile import summarize
from bench.raw import RawResult, consume_and_aggregate
from bench.standard import (
    KstormRun,
    Setup,
    check_raw,
    cleanup,
    make_events,
    new_setup,
    run_kstorm,
)

RESULTS = Path(__file__).resolve().parent / "results" / "standard.md"
CHART = RESULTS.with_suffix(".png")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
DEFAULT_MAX_OFFSETS = "500000"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000, help="events to produce")
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--topic", default="events", help="topic name prefix (a run id is added)")
    p.add_argument("--max-offsets", default=DEFAULT_MAX_OFFSETS,
                   help="max_offsets_per_batch, or a comma list to try (the fastest is reported)")
    p.add_argument("--master", default="local[2]", help="Spark master of the kstorm run")
    p.add_argument("--profile", action="store_true",
                   help="one more kstorm run under py-spy; where the time goes")
    p.add_argument("--one-row-batches", type=int, default=0, metavar="N",
                   help="also run N batches of one offset each (the fixed cost of a batch, end "
                        "to end with the commit)")
    p.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.name}")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting for the kstorm runs (repeatable; for experiments)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra topology setting for the kstorm runs (repeatable; e.g. "
                        "kstorm.commit.overlap=false)")
    p.add_argument("--keep", action="store_true",
                   help="keep the run's temporary directory (logs, reports, py-spy samples)")
    args = p.parse_args(argv)
    args.max_offsets = [int(x.replace("_", "")) for x in args.max_offsets.split(",") if x]
    return args


def ensure_class_cache(master: str, log: Callable[[str], None]) -> None:
    """Record the JVM class cache first if this machine has none (``kstorm warm-up``).

    kstorm records it on its first run anyway; the benchmark measures the start-up a
    topology sees on every later start (README, "Start-up").
    """
    from kstorm._spark.speedups import launch

    if launch.class_archive_state() == "ready":
        return
    log("no JVM class cache yet: recording it with `kstorm warm-up` (once per machine)")
    subprocess.run([sys.executable, "-m", "kstorm.cli", "warm-up", "--master", master],
                   check=True)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write the results file; 0 iff exact."""
    args = parse_args(argv)
    began = time.monotonic()
    from kstorm.embedded import EmbeddedKafka, EmbeddedRedis

    def log(text: str) -> None:
        print(f"[{time.monotonic() - began:6.1f}s] {text}", flush=True)

    ensure_class_cache(args.master, log)
    workdir = Path(tempfile.mkdtemp(prefix="kstorm-bench-"))
    setup = new_setup(workdir, args.master, args.topic)
    try:
        with EmbeddedKafka() as kafka, EmbeddedRedis() as redis_server:
            setup.bootstrap, setup.redis_url = kafka.bootstrap_servers, redis_server.url
            events, truth, ends, produce_s = make_events(
                setup, args.events, args.seed, args.partitions, args.keys, log)
            log(f"ground truth: {len(truth.windows):,} windows to emit, {truth.late:,} late, "
                f"{truth.still_open:,} still open at the end")
            raws = [consume_and_aggregate(setup.bootstrap, setup.topic, ends)]
            log(f"raw consumer: {report.fmt_rate(raws[0].rate)} events/s")
            problems = check_raw(events, raws[0])
            runs = []
            for cap in args.max_offsets:
                run = run_kstorm(setup, truth, args.events, cap, spark_conf=args.spark_conf,
                                 conf=args.conf)
                runs.append(run)
                cpu = run.steady_cpu_ms.get("total")
                log(f"kstorm max_offsets_per_batch={cap:,}: steady "
                    f"{report.fmt_rate(run.steady_rate)} ev/s"
                    + ("" if cpu is None else f" (CPU {cpu:.0f} ms per batch)")
                    + f", first result {report.fmt_s(run.submit_to_first_result_s)} after "
                    f"submit, exact: {'yes' if run.exact else 'NO ' + '; '.join(run.problems)}")
            raws.append(consume_and_aggregate(setup.bootstrap, setup.topic, ends))
            log(f"raw consumer again: {report.fmt_rate(raws[1].rate)} events/s")
            one_row = None
            if args.one_row_batches:
                one_row = run_one_row_batches(setup, args, log)
            profile_text = None
            if args.profile:
                raw_file = workdir / "pyspy.txt"
                profiled = run_kstorm(setup, truth, args.events, best_of(runs).max_offsets,
                                      profile=raw_file, spark_conf=args.spark_conf,
                                      conf=args.conf)
                profile_text = summarize(raw_file.read_text(), profiled)
                log("profiled run done")
    finally:
        if args.keep:
            print(f"kept: {workdir}")
        else:
            cleanup(workdir)
    raw = max(raws, key=lambda r: r.rate)
    best = best_of(runs)
    exact = all(r.exact for r in runs) and not problems and (one_row is None or one_row.exact)
    print()
    print(report.table(raw, best))
    if one_row is not None:
        print("\n" + report.one_row_text(one_row))
    if profile_text:
        print("\n" + profile_text)
    runs_checked = runs + ([one_row] if one_row is not None else [])
    for line in problems + [p for r in runs_checked for p in r.problems]:
        print("PROBLEM:", line)
    if not args.no_write:
        write_results(args, raws, runs, best, produce_s, time.monotonic() - began, profile_text,
                      one_row)
        print(f"\nwritten: {RESULTS}")
    return 0 if exact else 1


def run_one_row_batches(setup: Setup, args: argparse.Namespace, log: Callable[[str], None]
                        ) -> KstormRun:
    """The same topology over its own topic of ``--one-row-batches`` events, one per batch.

    What is left of a batch's time then is its fixed cost: planning, the Spark job, the
    commit phase with the Redis commit, Spark's offset and commit logs.
    """
    small = dataclasses.replace(setup, topic=f"{setup.topic}-1row")
    n = args.one_row_batches
    _, truth, _, _ = make_events(small, n, args.seed, args.partitions, args.keys, log)
    run = run_kstorm(small, truth, n, 1, spark_conf=args.spark_conf, conf=args.conf)
    cpu = run.steady_cpu_ms.get("total")
    log(f"kstorm one offset per batch: {report.fmt_ms(report.per_batch_s(run))} per batch "
        f"over {run.batches} batches"
        + ("" if cpu is None else f", CPU {cpu:.0f} ms per batch")
        + f", exact: {'yes' if run.exact else 'NO'}")
    return run


def best_of(runs: list[KstormRun]) -> KstormRun:
    """The run with the highest steady rate (end-to-end rate if it had a single batch)."""
    return max(runs, key=lambda r: r.steady_rate or r.end_to_end_rate)


def write_results(args: argparse.Namespace, raws: list[RawResult], runs: list[KstormRun],
                  best: KstormRun, produce_s: float, wall_s: float,
                  profile_text: str | None, one_row: KstormRun | None = None) -> None:
    """Replace the generated block of ``bench/results/standard.md`` (the prose around it stays)."""
    command = "python -m bench" + ("" if args.max_offsets == [int(DEFAULT_MAX_OFFSETS)] else
                                   " --max-offsets " + ",".join(map(str, args.max_offsets)))
    if args.events != 1_000_000:
        command += f" --events {args.events}"
    command += "".join(f" --spark-conf {kv}" for kv in args.spark_conf)
    command += "".join(f" --conf {kv}" for kv in args.conf)
    command += f" --one-row-batches {args.one_row_batches}" if args.one_row_batches else ""
    command += " --profile" if args.profile else ""
    block = report.results_block(
        command=command, when=f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC", wall_s=wall_s,
        events=args.events, produce_s=produce_s, master=args.master, raws=raws, runs=runs,
        best=best, profile_text=profile_text, one_row=one_row)
    text = RESULTS.read_text() if RESULTS.exists() else "# Standard benchmark\n\n"
    block = f"{BEGIN}\n{block}\n\n![throughput vs batch cap]({CHART.name})\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS.write_text(text)
    chart(raws, runs, CHART)


def chart(raws: list[RawResult], runs: list[KstormRun], path: Path) -> None:
    """Steady events/s per batch cap, with the raw consumer's runs as lines (needs matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        print(f"no chart ({path.name}): pip install -e '.[bench]' for matplotlib")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = sorted(runs, key=lambda r: r.max_offsets)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r.max_offsets for r in mine], [r.steady_rate or r.end_to_end_rate for r in mine],
            "o-", label="kstorm steady state")
    for i, raw in enumerate(raws):
        ax.axhline(raw.rate, color="grey", linestyle="--" if i == 0 else ":", linewidth=1,
                   label=f"raw consumer (run {i + 1})")
    ax.set_xscale("log")
    ax.set_xticks([r.max_offsets for r in mine], [f"{r.max_offsets:,}" for r in mine])
    ax.minorticks_off()
    ax.set_xlabel("max_offsets_per_batch")
    ax.set_ylabel("events/s")
    ax.set_ylim(bottom=0)
    ax.set_title("Standard benchmark: throughput vs batch cap")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
