"""The ``kstorm`` command: ``run``, ``submit``, ``describe``, ``demo``, ``warm-up``, ``doctor``.

Each subcommand is a function decorated with ``@cli.command()``. Whatever a command raises
reaches the person as one line and a hint, with exit status 1; ``kstorm -v <command>``
adds the traceback and INFO logging.

Exit status: 0 success (``run``: the topology finished, or stopped on SIGTERM/SIGINT); 1 an
error (the topology failed, a bad configuration, the demo's counts differ from the ground
truth, ``doctor`` found a missing part); 2 a usage error (unknown option or command); 130
interrupted (``demo`` stopped with Ctrl-C, or Ctrl-C elsewhere).
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from kstorm.errors import KstormError

VERBOSE_HINT = "run `kstorm -v ...` to see the details and the traceback"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kstorm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _Commands(click.Group):
    """The command group; turns any error into one line, a hint and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            report(exc, verbose=bool(ctx.params.get("verbose")))
            raise click.exceptions.Exit(1) from exc


def report(exc: BaseException, *, verbose: bool) -> None:
    """Print ``exc`` for a person: its first line and a hint (with ``verbose``, all of it)."""
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    lines = str(exc).strip().splitlines() or [""]
    first = lines[0] if isinstance(exc, KstormError) else f"{type(exc).__name__}: {lines[0]}"
    hint = getattr(exc, "hint", "") if isinstance(exc, KstormError) else ""
    if not hint:
        hint = (VERBOSE_HINT if isinstance(exc, KstormError)
                else f"unexpected; {VERBOSE_HINT}, and report it if kstorm is at fault")
    click.secho(f"kstorm: error: {first}", fg="red", err=True)
    if not verbose or hint != VERBOSE_HINT:
        click.echo(f"  hint: {hint}", err=True)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="kstorm",
                      message="%(prog)s %(version)s")
@click.option("-v", "--verbose", is_flag=True,
              help="log at INFO level; show tracebacks of errors")
def cli(verbose: bool) -> None:
    """Apache Storm topologies in Python, run on Spark Structured Streaming."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@cli.command("demo")
@click.option("--events", type=int, default=20_000, show_default=True,
              help="events to produce")
@click.option("--partitions", type=int, default=4, show_default=True,
              help="partitions of the topic")
@click.option("--per-batch", type=int, default=5_000, show_default=True,
              help="max offsets per micro-batch")
@click.option("--rows", type=int, default=15, show_default=True, help="result rows to print")
def demo_command(events: int, partitions: int, per_batch: int, rows: int) -> None:
    """Run the demo topology on the embedded broker and Redis."""
    import datetime as dt

    from rich.console import Console
    from rich.table import Table

    from kstorm._spark.java import check_java
    from kstorm.cli import demo as the_demo

    check_java()
    console = Console()
    try:
        result = the_demo.run(events, partitions, per_batch)
    except the_demo.DemoInterrupted:
        click.echo("kstorm demo: stopped (Ctrl-C); nothing is left running", err=True)
        raise click.exceptions.Exit(130) from None
    table = Table(title="page views per 10 s event-time window (busiest windows)")
    for column in ("page", "window start (UTC)", "views"):
        table.add_column(column, justify="right" if column == "views" else "left")
    busiest = sorted(result.table.items(), key=lambda kv: (-kv[1], kv[0]))[:rows]
    for (page, start), count in busiest:
        when = dt.datetime.fromtimestamp(start / 1000, dt.UTC).strftime("%H:%M:%S")
        table.add_row(page, when, f"{count:,}")
    console.print(table)
    console.print(f"(read back from {result.store})")
    console.print(f"events in: {result.events:,}   results out: {result.results:,} windows   "
                  f"total time: {result.seconds:.1f} s")
    if result.startup_s is not None:
        console.print(f"start-up: {result.startup_s:.1f} s (submit to the first committed batch)")
    if result.steady_events_per_s is not None:
        console.print(f"steady state: {result.steady_events_per_s:,.0f} events/s "
                      f"({result.steady_events:,} events after the first batch, "
                      f"{result.steady_seconds:.1f} s)")
    else:
        console.print("steady state: not measured (one batch); try --events "
                      f"{max(10 * per_batch, 200_000):,}")
    if result.mismatches:
        msg = f"{result.mismatches} window counts differ from the ground truth"
        raise KstormError(msg, hint="this is a bug: please report it with `kstorm -v demo`")
    console.print("[green]every window count equals the ground truth computed from the events[/]")


@cli.command("warm-up")
@click.option("--master", default="local[2]", show_default=True, help="Spark master")
@click.option("--if-needed", is_flag=True,
              help="do nothing when the class cache is already recorded")
def warm_up(master: str, if_needed: bool) -> None:
    """Start Spark once so later starts are faster.

    Records the JVM class cache in ~/.cache/kstorm; see the README's "Start-up".
    """
    import tempfile
    import time

    from kstorm._spark.java import check_java
    from kstorm._spark.speedups import launch

    if if_needed and launch.class_archive_state() == "ready":
        click.echo("JVM class cache: ready (nothing to do)")
        return
    check_java()
    from kstorm._spark.session import apply_deferred_extensions, get_session, stop_jvm
    from kstorm.cli._warmup_topology import warm_up_topology
    from kstorm.config import TopologyConfig
    from kstorm.testing import run_to_completion

    started = time.monotonic()
    spark = get_session(TopologyConfig.from_conf({"kstorm.spark.master": master}),
                        record_class_cache=True)
    with tempfile.TemporaryDirectory(prefix="kstorm-warm-up-") as tmp:
        result = run_to_completion(warm_up_topology(), {
            "kstorm.checkpoint.dir": tmp, "kstorm.spark.master": master})
    apply_deferred_extensions(spark, wait_s=0)  # their classes go into the cache too
    seconds = time.monotonic() - started
    sink: Any = result.sinks["sink"]  # kstorm.testing.CaptureSinks
    received = sum(len(batch) for batch in sink.batches.values())
    counted = sum(len(batch) for batch in result.sinks["counts"].batches.values())
    if launch.class_archive_state() == "recording":
        stop_jvm()  # the JVM writes the class archive as it exits
        launch.claim_recorded_archive()
    state = launch.class_archive_state()
    click.echo(f"Spark started and ran a test topology in {seconds:.1f} s ({received} tuples); "
               f"JVM class cache: {state}")
    if received != 200 or counted != 200:
        msg = f"the warm-up topology delivered {received} and {counted} of 200 tuples"
        raise KstormError(msg, hint="this is a bug: please report it with `kstorm -v warm-up`")


@cli.command()
@click.argument("target")
@click.option("--conf", "conf_file", type=click.Path(path_type=Path, dir_okay=False),
              help="a config file: .toml, .yaml/.yml or .json, Storm's key names")
@click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE",
              help="a config key (repeatable; overrides the file and KSTORM_* variables)")
@click.option("--name", default=None,
              help="topology name (default: the transactional id, else from TARGET)")
def run(target: str, conf_file: Path | None, overrides: tuple[str, ...],
        name: str | None) -> None:
    """Run your topology: TARGET is pkg.module:attr (a topology, a builder or a function).

    Configuration: --conf FILE, then KSTORM_<KEY> environment variables (e.g.
    KSTORM_KAFKA_BOOTSTRAP_SERVERS, KSTORM_CHECKPOINT_DIR), then -c key=value. SIGTERM or
    SIGINT stops the topology (an interrupted batch is replayed on the next start); with
    kstorm.trigger = available-now it returns once the topics are drained.
    """
    import os
    import signal
    import threading

    from kstorm import submit_topology
    from kstorm._spark.java import check_java
    from kstorm.cli import project

    conf = project.load_conf(conf_file, os.environ, overrides)
    default_name, topology = project.load_topology(target)
    name = name or topology.transactional_id or default_name
    check_java()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    handle = submit_topology(name, conf, topology)
    click.echo(f"kstorm: topology {name!r} running (checkpoint "
               f"{handle.settings.checkpoint_for(topology.transactional_id or name)})", err=True)
    while not stop.is_set():
        try:
            finished = handle.await_termination(0.5)
        except KstormError:
            # A signal sent to the whole process group (systemd's default KillMode, `kill --
            # -PGID`, `timeout`) stops Spark's JVM and Python processes too, and the query
            # with them: that is the stop asked for, not a failure.
            if not stop.wait(0.5):
                raise
            break
        if finished:
            click.echo(f"kstorm: topology {name!r} finished", err=True)
            return
    click.echo(f"kstorm: stopping topology {name!r}", err=True)
    handle.stop()
    click.echo(f"kstorm: topology {name!r} stopped (a batch it interrupted runs again on the "
               "next start)", err=True)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("target")
@click.option("--master", default=None, help="Spark master (spark://..., k8s://..., yarn); "
              "default: spark-submit's")
@click.option("--conf", "conf_file", type=click.Path(path_type=Path, dir_okay=False),
              help="a kstorm config file (shipped with the application)")
@click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE", help="a kstorm config key")
@click.option("--name", default=None, help="topology name")
@click.option("--dry-run", is_flag=True, help="print the spark-submit command, run nothing")
@click.argument("spark_args", nargs=-1, type=click.UNPROCESSED)
def submit(target: str, master: str | None, conf_file: Path | None,
           overrides: tuple[str, ...], name: str | None, dry_run: bool,
           spark_args: tuple[str, ...]) -> None:
    """Ship your project to a Spark cluster and run TARGET there with spark-submit.

    Zips the current directory's packages and modules (not tests, benchmarks or virtual
    environments) as --py-files, and runs `kstorm run TARGET` in the driver spark-submit
    starts. Arguments after `--` go to spark-submit (e.g. -- --deploy-mode client
    --executor-memory 2g). kstorm and its dependencies must be installed in the same
    Python on every machine.
    """
    import os
    import subprocess
    import tempfile

    from kstorm._spark.speedups.launch import spark_submit_command
    from kstorm.cli import project

    with tempfile.TemporaryDirectory(prefix="kstorm-submit-") as tmp:
        archive = Path(tmp) / "project.zip"
        shipped = project.project_archive(Path.cwd(), archive)
        submit_args = [*(["--master", master] if master else []), *spark_args]
        run_args = [*(["--conf", str(conf_file.resolve())] if conf_file else []),
                    *[a for o in overrides for a in ("-c", o)],
                    *(["--name", name] if name else [])]
        command = spark_submit_command(target, archive, submit_args, run_args)
        click.echo(f"kstorm: shipping {', '.join(shipped) or 'nothing'}", err=True)
        click.echo("kstorm: " + " ".join(command), err=True)
        env = _with_private_jvm_tmpdir(os.environ)
        if env.get("SPARK_SUBMIT_OPTS") != os.environ.get("SPARK_SUBMIT_OPTS"):
            click.echo(f"kstorm: SPARK_SUBMIT_OPTS={env['SPARK_SUBMIT_OPTS']}", err=True)
        if dry_run:
            return
        code = subprocess.call(command, env=env)
    if code:
        raise click.exceptions.Exit(code)


def _with_private_jvm_tmpdir(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``-Djava.io.tmpdir`` of a private directory in ``SPARK_SUBMIT_OPTS``.

    spark-submit starts its JVM itself (the driver, in client deploy mode), with ``/tmp`` for
    its temporary files, and a run left a Python-worker socket file there every time. Its
    JVM gets a directory of its own instead, locked by this process while spark-submit runs
    and removed by the next kstorm start after it (``kstorm/_spark/speedups/jvm_tmp.py``).
    ``SPARK_SUBMIT_OPTS`` goes before ``spark.driver.extraJavaOptions`` on the JVM's command
    line, so a ``java.io.tmpdir`` set there (or already in ``SPARK_SUBMIT_OPTS``) wins.
    """
    from kstorm._spark.speedups import jvm_tmp

    env = dict(environ)
    current = env.get("SPARK_SUBMIT_OPTS", "")
    option = jvm_tmp.java_option(current)
    if option != current:
        env["SPARK_SUBMIT_OPTS"] = option
    return env


@cli.command("describe")
@click.argument("target")
@click.option("--mermaid", is_flag=True, help="print a Mermaid flowchart instead")
def describe_command(target: str, mermaid: bool) -> None:
    """Show TARGET's components, groupings and compiled Spark plan (pkg.module:attr)."""
    from kstorm.cli import describe as describing
    from kstorm.cli import project

    _, topology = project.load_topology(target)
    click.echo(describing.mermaid(topology) if mermaid else describing.describe(topology))


@cli.command("doctor")
def doctor_command() -> None:
    """Check Java, redis-server, the broker, the class cache and versions."""
    from kstorm.cli import doctor as checks

    results = checks.run_checks()
    click.echo(checks.render(results))
    if any(check.failed for check in results):
        raise click.exceptions.Exit(1)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kstorm`` console script; returns the exit status."""
    try:
        status = cli.main(args=list(argv) if argv is not None else None, prog_name="kstorm",
                          standalone_mode=False)  # an explicit exit returns its status
    except click.ClickException as usage:
        usage.show()
        return usage.exit_code
    except click.Abort:  # Ctrl-C
        click.echo("aborted", err=True)
        return 130
    return status if isinstance(status, int) else 0

