"""The benchmark's memory figures: a page shared by two processes counts once in the Pss sum."""

from __future__ import annotations

import os
import signal
import time

import pytest

from bench.measure import Watcher, pss_kb

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"),
                                reason="needs Linux's /proc/<pid>/smaps_rollup")

MiB = 1 << 20


def test_pages_shared_by_a_fork_count_once_in_pss_and_twice_in_rss() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the tree's root: touches 128 MiB, forks a child that shares them, waits
        try:
            os.close(read)
            block = bytearray(128 * MiB)
            block[::4096] = b"x" * len(block[::4096])
            if os.fork() == 0:
                signal.pause()
                os._exit(0)
            os.write(write, b"r")
            signal.pause()
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"r"
        time.sleep(0.2)
        watcher = Watcher(pid, redis_url=None, interval=0.02).start()
        time.sleep(0.3)
        watcher.stop()
        rss, pss = watcher.peak_rss_bytes, watcher.peak_pss_bytes
        assert rss > 2 * 120 * MiB  # the shared block counted in both processes
        assert 120 * MiB < pss < 1.5 * 128 * MiB + 64 * MiB  # counted once (plus Python)
        assert pss < rss
    finally:
        for child in _children(pid):
            os.kill(child, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)


def test_a_process_that_is_gone_has_no_pss() -> None:
    assert pss_kb(2**22 + 1) == 0  # above any pid_max
    assert pss_kb(os.getpid()) > 0


def _children(pid: int) -> list[int]:
    from bench.measure import tree_pids

    return [p for p in tree_pids(pid) if p != pid]
