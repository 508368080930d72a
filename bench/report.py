"""The benchmark's table (console) and ``bench/results/standard.md``.

Example:
    >>> fmt_rate(123456.7), fmt_bytes(3 * 2**30)
    ('123,457', '3.00 GiB')
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.raw import RawResult
    from bench.standard import KstormRun

TARGET_RATIO = 1.25
TARGET_FIRST_RESULT_S = 10.0


def fmt_rate(rate: float | None) -> str:
    """Events per second with thousands separators (``-`` when unknown)."""
    return "-" if rate is None else f"{rate:,.0f}"


def fmt_bytes(n: int) -> str:
    """Bytes in MiB or GiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def fmt_s(seconds: float | None) -> str:
    """Seconds with one decimal (``-`` when unknown)."""
    return "-" if seconds is None else f"{seconds:.1f} s"


def _class_cache() -> str:
    from kstorm._spark.speedups import launch

    return launch.class_archive_state()


def machine() -> dict[str, str]:
    """nproc, CPU model, RAM, OS, Python, Java, PySpark, load average."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30
                              ).stderr.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        java = "unknown"
    import pyspark

    return {"nproc": str(os.cpu_count()), "cpu": cpu, "ram": f"{mem_kb / 2**20:.0f} GiB",
            "os": platform.platform(), "python": sys.version.split()[0], "java": java,
            "pyspark": pyspark.__version__, "class_cache": _class_cache(),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def rows(raw: RawResult, run: KstormRun) -> list[tuple[str, str, str]]:
    """(figure, value, target) rows of the headline table."""
    ratio = None if run.steady_rate is None else run.steady_rate / raw.rate
    return [
        ("raw Python consumer (confluent-kafka + json.loads + dict)", fmt_rate(raw.rate) + " ev/s",
         ""),
        ("kstorm steady state (after the first batch)", fmt_rate(run.steady_rate) + " ev/s", ""),
        ("ratio kstorm steady / raw", "-" if ratio is None else f"{ratio:.2f}x",
         f">= {TARGET_RATIO}x {'met' if ratio and ratio >= TARGET_RATIO else 'NOT met'}"),
        ("kstorm end to end (submit -> drained)", fmt_rate(run.end_to_end_rate) + " ev/s",
         f"{run.submit_to_done_s:.1f} s for {run.events:,} events"),
        ("time to first result, from submit_topology", fmt_s(run.submit_to_first_result_s),
         f"< {TARGET_FIRST_RESULT_S:.0f} s "
         f"{'met' if _met_first(run.submit_to_first_result_s) else 'NOT met'}"),
        ("time to first result, from process start", fmt_s(run.spawn_to_first_result_s),
         f"< {TARGET_FIRST_RESULT_S:.0f} s "
         f"{'met' if _met_first(run.spawn_to_first_result_s) else 'NOT met'}"),
        ("kstorm process wall time (start -> exit)", fmt_s(run.process_wall_s), ""),
        ("peak RSS, kstorm process tree (sum of VmRSS, sampled)", fmt_bytes(run.peak_rss_bytes),
         f"sum of per-process VmHWM {fmt_bytes(run.hwm_sum_bytes)}"),
        ("peak PSS, kstorm process tree (shared pages counted once, sampled each second)",
         fmt_bytes(run.peak_pss_bytes) if run.peak_pss_bytes else "-",
         "what the tree takes from the machine's memory"),
        ("late events (counted, excluded)", f"{run.late:,}", "equals ground truth"
         if not any("late" in p for p in run.problems) else "DIFFERS"),
        ("windows in Redis", f"{run.windows_emitted:,}", ""),
        ("every window result equals the ground truth", "yes" if run.exact else "NO", "yes"),
    ]


def _met_first(seconds: float | None) -> bool:
    return seconds is not None and seconds < TARGET_FIRST_RESULT_S


def table(raw: RawResult, run: KstormRun) -> str:
    """The headline table as aligned text."""
    out = rows(raw, run)
    width = max(len(r[0]) for r in out)
    vwidth = max(len(r[1]) for r in out)
    return "\n".join(f"{a:<{width}}  {b:>{vwidth}}  {c}" for a, b, c in out)


def markdown_table(raw: RawResult, run: KstormRun) -> str:
    """The headline table in Markdown."""
    lines = ["| figure | value | target / note |", "| --- | ---: | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows(raw, run)]
    return "\n".join(lines)


def sweep_table(runs: list[KstormRun], raw: RawResult) -> str:
    """One line per ``max_offsets_per_batch`` tried."""
    lines = ["| max_offsets_per_batch | batches | steady ev/s | ratio | end-to-end ev/s | "
             "first result (submit) | commit ms/batch (in the batch) | peak RSS | peak PSS "
             "| exact |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in runs:
        ratio = "-" if r.steady_rate is None else f"{r.steady_rate / raw.rate:.2f}x"
        commit = r.report.get("commit_seconds")
        blocking = r.report.get("commit_blocking_seconds", commit)
        per_batch = (f"{1000 * commit / r.batches:.0f} ({1000 * blocking / r.batches:.0f})"
                     if commit and blocking is not None and r.batches else "-")
        lines.append(f"| {r.max_offsets:,} | {r.batches} | {fmt_rate(r.steady_rate)} | {ratio} "
                     f"| {fmt_rate(r.end_to_end_rate)} | {fmt_s(r.submit_to_first_result_s)} "
                     f"| {per_batch} | {fmt_bytes(r.peak_rss_bytes)} "
                     f"| {fmt_bytes(r.peak_pss_bytes) if r.peak_pss_bytes else '-'} "
                     f"| {'yes' if r.exact else 'NO'} |")
    return "\n".join(lines)


def cpu_table(run: KstormRun) -> str:
    """CPU seconds and peak resident memory of the kstorm process tree, by role."""
    lines = ["| process | CPU s | peak RSS |", "| --- | ---: | ---: |"]
    for kind in sorted(set(run.cpu_by_role) | set(run.rss_by_role)):
        lines.append(f"| {kind} | {run.cpu_by_role.get(kind, 0.0):.1f} | "
                     f"{fmt_bytes(run.rss_by_role.get(kind, 0))} |")
    return "\n".join(lines)


def fmt_ms(seconds: float | None) -> str:
    """Milliseconds, or '-'."""
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def per_batch_s(run: KstormRun) -> float | None:
    """Mean time between consecutive commits seen in Redis (None: fewer than 2)."""
    c = run.commits
    return None if len(c) < 2 else (c[-1][0] - c[0][0]) / (len(c) - 1)


PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
          "triggerExecution")


def cpu_text(run: KstormRun) -> str:
    """The sentence on a run's CPU per batch after the first, by process ("": not measured)."""
    cpu = run.steady_cpu_ms
    if not cpu:
        return ""
    parts = ", ".join(f"{kind} {ms:.0f} ms" for kind, ms in cpu.items()
                      if kind != "total" and ms >= 0.5)
    return (f" CPU per batch after the first (all processes; moved less than wall time by other "
            f"load on the machine): {cpu['total']:.0f} ms ({parts}).")


def one_row_text(run: KstormRun) -> str:
    """The fixed cost of a batch: one offset per batch, end to end and by Spark's phases."""
    batches = run.report.get("spark_batches", [])[1:]  # the first batch also starts things
    medians = {p: statistics.median(b.get(p, 0) for b in batches) for p in PHASES} if batches \
        else {}
    commit = run.report.get("commit_seconds")
    per_commit = (f"; the commit phase (sinks included) {commit / max(run.batches, 1) * 1000:.0f}"
                  " ms per batch" if isinstance(commit, (int, float)) else "")
    each = per_batch_s(run)
    met = each is not None and each <= 0.2
    lines = [
        f"Fixed cost of a batch (`max_offsets_per_batch = 1`, {run.events:,} events of the same "
        f"kind in a topic of their own, {run.batches} batches, available-now): "
        f"**{fmt_ms(each)} per batch** end to end (mean time between consecutive "
        f"commits seen in Redis; target <= 200 ms {'met' if met else 'NOT met'}){per_commit}; "
        f"every window exact: {'yes' if run.exact else 'NO'}.{cpu_text(run)} Spark's phases, "
        "median ms per batch (`addBatch` is the Spark job and the commit phase):",
        "",
        "| " + " | ".join(PHASES) + " |",
        "| " + " | ".join("---:" for _ in PHASES) + " |",
        "| " + " | ".join(f"{medians.get(p, 0):.0f}" for p in PHASES) + " |",
    ]
    return "\n".join(lines)


def results_block(*, command: str, when: str, wall_s: float, events: int, produce_s: float,
                  master: str, raws: list[RawResult], runs: list[KstormRun], best: KstormRun,
                  profile_text: str | None, one_row: KstormRun | None = None) -> str:
    """The generated Markdown of ``bench/results/standard.md``."""
    m = machine()
    raw = max(raws, key=lambda r: r.rate)
    commits = ", ".join(f"{t - best.report['submitted']:.1f} s: {n:,}"
                        for t, _, n in best.commits)
    durations = ", ".join(f"{b['triggerExecution'] / 1000:.1f} s"
                          for b in best.report.get("spark_batches", []))
    parts = [
        f"Command: `{command}` (repository root); run {when}, whole run {wall_s:.0f} s "
        f"(producing {events:,} events: {produce_s:.1f} s).",
        "",
        f"Machine: nproc {m['nproc']}; CPU {m['cpu']}; RAM {m['ram']}; {m['os']}; "
        f"Python {m['python']}; {m['java']}; PySpark {m['pyspark']}; Spark master `{master}`; "
        f"JVM class cache {m['class_cache']}; "
        f"load average at the end {m['load']} (shared machine).",
        "",
        f"Headline (max_offsets_per_batch = {best.max_offsets:,}; raw = the faster of "
        f"{len(raws)} raw runs: {', '.join(fmt_rate(r.rate) for r in raws)} ev/s):",
        "",
        markdown_table(raw, best),
        "",
        "Each kstorm run tried:",
        "",
        sweep_table(runs, raw),
        "",
        f"Headline run, batch by batch: commits seen in Redis (seconds after submit_topology: "
        f"events so far) {commits}; Spark's batch durations (triggerExecution) {durations}.",
        "",
        "CPU time and peak memory of the kstorm process tree by role (headline run; \"other\" is "
        "the `spark-class` shell and short-lived helpers):",
        "",
        cpu_table(best),
    ]
    if one_row is not None:
        parts += ["", one_row_text(one_row)]
    if profile_text:
        parts += ["", profile_text]
    return "\n".join(parts)
