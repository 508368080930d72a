"""The ``kstorm`` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from kstorm import demo

    console = Console()
    result = demo.run(args.events, args.partitions, args.per_batch)
    table = Table(title="page views per 10 s event-time window (busiest windows)")
    for column in ("page", "window start (UTC)", "views"):
        table.add_column(column, justify="right" if column == "views" else "left")
    import datetime as dt

    rows = sorted(result.table.items(), key=lambda kv: (-kv[1], kv[0]))[: args.rows]
    for (page, start), count in rows:
        when = dt.datetime.fromtimestamp(start / 1000, dt.UTC).strftime("%H:%M:%S")
        table.add_row(page, when, f"{count:,}")
    console.print(table)
    console.print(f"(read back from the {result.store})")
    rate = result.events / result.seconds if result.seconds else 0.0
    console.print(f"events in: {result.events:,}   results out: {result.results:,} windows   "
                  f"time: {result.seconds:.1f} s (incl. Spark start)   {rate:,.0f} events/s")
    if result.mismatches:
        console.print(f"[red]{result.mismatches} window counts differ from the ground truth[/]")
        return 1
    console.print("[green]every window count equals the ground truth computed from the events[/]")
    return 0


def _warm_up(args: argparse.Namespace) -> int:
    import tempfile
    import time

    from kstorm._spark import launch
    from kstorm._warmup_topology import warm_up_topology
    from kstorm.testing import run_to_completion

    if args.if_needed and launch.class_archive_state() == "ready":
        print("JVM class cache: ready (nothing to do)")
        return 0
    from kstorm._spark.session import get_session, stop_jvm
    from kstorm.config import TopologyConfig

    started = time.monotonic()
    get_session(TopologyConfig.from_conf({"kstorm.spark.master": args.master}),
                record_class_cache=True)
    with tempfile.TemporaryDirectory(prefix="kstorm-warm-up-") as tmp:
        result = run_to_completion(warm_up_topology(), {
            "kstorm.checkpoint.dir": tmp, "kstorm.spark.master": args.master})
    seconds = time.monotonic() - started
    received = sum(len(batch) for batch in result.sinks["sink"].batches.values())
    if launch.class_archive_state() == "recording":
        stop_jvm()  # the JVM writes the class archive as it exits
        launch.claim_recorded_archive()
    state = launch.class_archive_state()
    print(f"Spark started and ran a test topology in {seconds:.1f} s ({received} tuples); "
          f"JVM class cache: {state}")
    return 0 if received == 200 else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kstorm`` console script."""
    parser = argparse.ArgumentParser(prog="kstorm", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the demo topology on the embedded broker")
    demo.add_argument("--events", type=int, default=20_000, help="events to produce")
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    demo.add_argument("--per-batch", type=int, default=5_000,
                      help="max offsets per micro-batch")
    demo.add_argument("--rows", type=int, default=15, help="result rows to print")
    demo.set_defaults(func=_demo)
    warm = sub.add_parser(
        "warm-up", help="start Spark once so later starts are faster (records the JVM "
        "class cache in ~/.cache/kstorm; see the README's 'Start-up')")
    warm.add_argument("--master", default="local[2]", help="Spark master")
    warm.add_argument("--if-needed", action="store_true",
                      help="do nothing when the class cache is already recorded")
    warm.set_defaults(func=_warm_up)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
