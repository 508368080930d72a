"""Watching a child process from outside: its tree's memory, and the first result in Redis.

Memory comes from ``/proc`` (no psutil): :func:`tree_pids` walks ``/proc/*/stat`` for the
descendants of a pid; :class:`Watcher` samples the sum of their ``VmRSS`` (the peak of that
sum is the figure reported) and keeps each process's own ``VmHWM`` (whose sum is an upper
bound, since peaks need not coincide). The sum of RSS counts a page shared by several
processes once per process: Spark's Python processes forked from kstorm's zygote share the
pages of the modules it imported, and the JVMs map the class-data-sharing archive. So it also
samples, once a second (reading ``smaps_rollup`` walks a process's page tables), the sum of
their ``Pss`` (proportional set size: a shared page is divided among the processes that map
it), which is what the tree takes from the machine's memory.

Example:
    >>> w = Watcher(os.getpid(), redis_url=None, interval=0.05).start()  # doctest: +SKIP
    >>> w.stop(); w.peak_rss_bytes > 0                                    # doctest: +SKIP
    True
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any


def _parent_of(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def tree_pids(root: int) -> list[int]:
    """``root`` and all its living descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent_of(entry)
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def memory_kb(pid: int) -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` of ``pid`` in kB (zeros if it is gone)."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def pss_kb(pid: int) -> int:
    """Proportional set size of ``pid`` in kB (zero if it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def cpu_ticks(pid: int) -> int | None:
    """User + system CPU time of ``pid`` in clock ticks (None if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def role(pid: int) -> str:
    """What a process of the kstorm tree is: JVM, Python workers, helpers, driver, other."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    text = b" ".join(argv).decode(errors="replace")
    if b"kstorm._spark.speedups.zygote" in argv:  # forked from kstorm's zygote: its module
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return "other"
        return "python workers" if name == "ks:worker" else "python helpers (Spark)"
    if argv and argv[0].endswith(b"java"):
        return "jvm (Spark)"
    if not argv or b"python" not in os.path.basename(argv[0]):
        return "other"
    if "bench.topology" in text:
        return "python driver"
    if text.rstrip().endswith(" pyspark.worker"):
        return "python workers"
    if "pyspark" in text:  # the Python data source's helper processes and their daemon
        return "python helpers (Spark)"
    return "other"


class Watcher:
    """A thread sampling a process tree's memory and CPU, and polling Redis.

    In Redis it notes when the first key matching ``pattern`` appears, and each commit of
    the sink's batch record ``record`` (a hash with ``txid`` and ``topic/partition -> end
    offset`` fields): ``commits`` holds ``(time.monotonic(), txid, sum of end offsets)``.
    """

    def __init__(self, root: int, *, redis_url: str | None, pattern: str = "w:*",
                 record: str | None = None, interval: float = 0.02,
                 memory_every: int = 5, pss_every_s: float = 1.0) -> None:
        self.root = root
        self.redis_url = redis_url
        self.pattern = pattern
        self.record = record
        self.commits: list[tuple[float, int, int]] = []
        self.interval = interval
        self.memory_every = memory_every
        self.peak_rss_bytes = 0
        self.peak_pss_bytes = 0  # peak of the tree's Pss sum (shared pages counted once)
        self.pss_every_s = pss_every_s
        self._pss_at = float("-inf")  # time.monotonic() of the last Pss sample
        self.hwm_kb: dict[int, int] = {}
        self.first_result_at: float | None = None  # time.monotonic() of the first key seen
        self.cpu_ticks: dict[int, tuple[str, int]] = {}  # pid -> (role, utime + stime)
        self.cpu_at_commits: list[dict[str, float]] = []  # cpu_seconds_by_role() per commit
        self._sampled_at = float("-inf")  # time.monotonic() of the last memory and CPU sample
        self.peak_rss_by_role: dict[str, int] = {}  # role -> peak of its processes' VmRSS sum
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Watcher:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (one last memory sample first)."""
        self._pss_at = float("-inf")
        self._sample_memory()
        self._stop.set()
        self._thread.join()

    @property
    def hwm_sum_bytes(self) -> int:
        """Sum over the tree's processes of their own peak RSS (an upper bound)."""
        return 1024 * sum(self.hwm_kb.values())

    def cpu_seconds_by_role(self) -> dict[str, float]:
        """CPU seconds used by the tree's processes, summed by :func:`role`."""
        hz = os.sysconf("SC_CLK_TCK")
        out: dict[str, float] = {}
        for kind, ticks in self.cpu_ticks.values():
            out[kind] = out.get(kind, 0.0) + ticks / hz
        return out

    def _poll_redis(self, client: Any) -> None:
        now = time.monotonic()
        if self.first_result_at is None and client.dbsize() and \
                next(client.scan_iter(match=self.pattern, count=1000), None) is not None:
            self.first_result_at = now
        if self.record is None:
            return
        txid = client.hget(self.record, "txid")
        if txid is None or (self.commits and int(txid) == self.commits[-1][1]):
            return
        fields = client.hgetall(self.record)
        ends = sum(int(v) for k, v in fields.items()
                   if b"/" in k and not k.startswith(b"@"))
        self.commits.append((now, int(fields[b"txid"]), ends))
        self._sample_memory()  # (and the CPU) as of this commit
        self.cpu_at_commits.append(self.cpu_seconds_by_role())

    def _sample_memory(self) -> None:
        self._sampled_at = time.monotonic()
        with_pss = self._sampled_at - self._pss_at >= self.pss_every_s
        if with_pss:
            self._pss_at = self._sampled_at
        total = pss_total = 0
        by_role: dict[str, int] = {}
        for pid in tree_pids(self.root):
            if with_pss:
                pss_total += pss_kb(pid)
            rss, hwm = memory_kb(pid)
            kind = self.cpu_ticks[pid][0] if pid in self.cpu_ticks else role(pid)
            by_role[kind] = by_role.get(kind, 0) + 1024 * rss
            ticks = cpu_ticks(pid)
            if ticks is not None:
                kind = role(pid)  # re-read: spark-class execs java; a zombie has no cmdline
                if kind == "other" and pid in self.cpu_ticks:
                    kind = self.cpu_ticks[pid][0]
                self.cpu_ticks[pid] = kind, ticks
            total += rss
            if hwm:
                self.hwm_kb[pid] = max(hwm, self.hwm_kb.get(pid, 0))
        self.peak_rss_bytes = max(self.peak_rss_bytes, 1024 * total)
        self.peak_pss_bytes = max(self.peak_pss_bytes, 1024 * pss_total)
        for kind, rss_bytes in by_role.items():
            self.peak_rss_by_role[kind] = max(rss_bytes, self.peak_rss_by_role.get(kind, 0))

    def _loop(self) -> None:
        client = None
        if self.redis_url is not None:
            import redis

            client = redis.Redis.from_url(self.redis_url)
        every = self.interval * self.memory_every
        while not self._stop.is_set():
            if client is not None:
                self._poll_redis(client)  # samples at each commit too
            if time.monotonic() - self._sampled_at >= every:
                self._sample_memory()
            self._stop.wait(self.interval)
        if client is not None:
            client.close()
