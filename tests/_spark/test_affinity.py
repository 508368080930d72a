"""Task affinity between Python worker processes (``kstorm/_spark/speedups/affinity.py``).

A partition runs in the process that first ran it (its owner) while that process lives;
another process given the partition forwards its rows there and yields what the owner's
runner produced. When the owner dies, the next process takes the partition over.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from kstorm._spark.speedups.affinity import (
    Affinity,
    ForwardError,
    Request,
    connect,
    forward,
    forwarded_task,
)

KEY = "run1.0.1"


def counting_runner() -> object:
    """A runner whose state lives across runs, as bolt instances do: a running total."""
    seen = [0]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            seen[0] += sum(batch.column("n").to_pylist())
            task = forwarded_task()
            yield pa.record_batch({"total": [seen[0]], "pid": [os.getpid()],
                                   "partition": [task[0] if task else -1]})

    return run


def failing_runner(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        msg = "a bolt failed"
        raise ValueError(msg)
    yield from ()


def _own(directory: str, ready: object, failing: bool) -> None:
    affinity = Affinity(Path(directory))
    runner = failing_runner if failing else counting_runner()
    assert affinity.owner(KEY, runner) is None
    ready.send(True)  # type: ignore[attr-defined]
    signal.pause()


@pytest.fixture
def owner_process(tmp_path: Path) -> Iterator[object]:
    processes = []

    def start(failing: bool = False) -> multiprocessing.Process:
        ctx = multiprocessing.get_context("fork")
        here, there = ctx.Pipe()
        process = ctx.Process(target=_own, args=(str(tmp_path), there, failing), daemon=True)
        process.start()
        assert here.poll(20), "the owner process did not start"
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(10)


def batches(*values: int) -> Iterator[pa.RecordBatch]:
    for value in values:
        yield pa.record_batch({"n": [value]})


def test_a_partition_runs_in_its_owner_and_keeps_its_state(tmp_path: Path,
                                                           owner_process: object) -> None:
    owner = owner_process()  # type: ignore[operator]
    here = Affinity(tmp_path)
    address = here.owner(KEY, counting_runner())
    assert address  # another live process owns it
    for sent, expected in (((1, 2), [1, 3]), ((3, 4), [6, 10])):  # the total carries on
        conn = connect(address)
        assert conn is not None
        out = list(forward(conn, Request(KEY, 1, {}), batches(*sent)))
        assert [b.column("total")[0].as_py() for b in out] == expected
        assert {b.column("pid")[0].as_py() for b in out} == {owner.pid}
        assert {b.column("partition")[0].as_py() for b in out} == {1}


def test_a_dead_owners_partition_is_taken_over(tmp_path: Path, owner_process: object) -> None:
    owner = owner_process()  # type: ignore[operator]
    here = Affinity(tmp_path)
    address = here.owner(KEY, counting_runner())
    assert address
    os.kill(owner.pid, signal.SIGKILL)
    owner.join(10)
    assert connect(address) is None  # its socket is gone with it
    assert here.owner(KEY, counting_runner()) is None  # the lock was freed: ours now
    out = list(here.run_owned(KEY, batches(5)))
    assert out[0].column("total")[0].as_py() == 5
    assert out[0].column("pid")[0].as_py() == os.getpid()
    here.close()


def test_the_owners_error_fails_the_forwarding_task(tmp_path: Path,
                                                    owner_process: object) -> None:
    owner_process(failing=True)  # type: ignore[operator]
    here = Affinity(tmp_path)
    address = here.owner(KEY, counting_runner())
    assert address
    conn = connect(address)
    assert conn is not None
    with pytest.raises(ForwardError, match="a bolt failed"):
        list(forward(conn, Request(KEY, 1, {}), batches(*range(10_000))))


def test_an_unusable_directory_runs_partitions_locally(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory should be
    here = Affinity(blocked / "tasks")
    assert here.owner(KEY, counting_runner()) == ""  # run here, unowned


def test_files_of_gone_processes_and_past_runs_are_removed(tmp_path: Path) -> None:
    import fcntl
    import time

    from kstorm._spark.speedups.affinity import STALE_OWNER_S, _remove_stale

    dead = tmp_path / "9999999-a.sock"  # above the kernel's pid_max: never a live process
    live = tmp_path / f"{os.getpid()}-b.sock"
    old_free, old_held, new_free = (tmp_path / f"{n}.owner" for n in ("r1.0.0", "r1.0.1", "r2.0.0"))
    for path in (dead, live, old_free, old_held, new_free):
        path.write_text("x")
    past = time.time() - STALE_OWNER_S - 10
    for path in (old_free, old_held):
        os.utime(path, (past, past))
    held = os.open(old_held, os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        _remove_stale(tmp_path)
    finally:
        os.close(held)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (live, old_held, new_free))


def _serve_and_report(directory: str, ready: object, released: object) -> None:
    affinity = Affinity(Path(directory))
    affinity.on_release = lambda prefix: released.send(prefix)  # type: ignore[attr-defined]
    affinity.serving()
    ready.send(True)  # type: ignore[attr-defined]
    signal.pause()


def test_a_stopped_runs_release_reaches_every_serving_worker(tmp_path: Path) -> None:
    from kstorm._spark.speedups.affinity import broadcast_release

    ctx = multiprocessing.get_context("fork")
    workers = []
    for _ in range(2):
        here, there = ctx.Pipe()
        report, reported = ctx.Pipe()
        process = ctx.Process(target=_serve_and_report, args=(str(tmp_path), there, reported),
                              daemon=True)
        process.start()
        assert here.poll(20)
        workers.append((process, report))
    try:
        assert broadcast_release("run7.", tmp_path) == 2
        for _, report in workers:
            assert report.poll(10) and report.recv() == "run7."
    finally:
        for process, _ in workers:
            os.kill(process.pid, signal.SIGKILL)
            process.join(10)


def test_one_stage_runs_one_partition_at_a_time_in_a_process(monkeypatch: object) -> None:
    """Its own Spark task and a forwarded one share the stage's bolt instances."""
    import threading
    import time
    from types import SimpleNamespace

    from kstorm._spark.stage import StageRunner

    active, overlaps = [0], [0]

    def partition(self: object, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        active[0] += 1
        overlaps[0] = max(overlaps[0], active[0])
        for batch in batches:
            time.sleep(0.01)  # a bolt at work; the other thread gets the GIL
            yield batch
        active[0] -= 1

    monkeypatch.setattr(StageRunner, "_run_partition", partition)  # type: ignore[attr-defined]
    runner = StageRunner(SimpleNamespace(run_id="run9.1"))  # type: ignore[arg-type]
    threads = [threading.Thread(target=lambda: list(runner.run(batches(*range(20)))))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert overlaps[0] == 1


def test_a_failing_input_fails_the_forwarding_task_with_its_error(
        tmp_path: Path, owner_process: object) -> None:
    owner_process()  # type: ignore[operator]
    here = Affinity(tmp_path)
    address = here.owner(KEY, counting_runner())
    assert address

    def broken_input() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"n": [1]})
        msg = "the task was killed"
        raise RuntimeError(msg)

    conn = connect(address)
    assert conn is not None
    with pytest.raises(RuntimeError, match="the task was killed"):
        list(forward(conn, Request(KEY, 1, {}), broken_input()))
    # the owner is still there for the partition's next run
    conn = connect(address)
    assert conn is not None
    out = list(forward(conn, Request(KEY, 1, {}), batches(2)))
    assert out[-1].column("pid")[0].as_py() != os.getpid()
