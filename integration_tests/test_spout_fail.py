"""At least once on real Spark: a free-form spout's tuples get ``fail`` and are re-emitted.

``ReliableNumbers`` (``spouts.py``) keeps ``msg id -> values`` and re-emits what ``fail``
names, as Storm's reliable spouts do (seed 001); ``FailFirst`` fails the first attempt of
every multiple of 7. The spout's ``fail`` must run for exactly those ids (in the Spark
source process that holds the spout), the spout re-emits them, and every number reaches
the sink once.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
from spouts import FailFirst, ReliableNumbers, acked, failed

from kstorm import Fields, TopologyBuilder
from kstorm.testing import CaptureSink, run_to_completion

pytestmark = pytest.mark.integration


def test_failed_tuples_reach_the_spouts_fail_and_are_re_emitted(spark, tmp_path: Path) -> None:
    n = 90
    b = TopologyBuilder()
    b.set_spout("numbers", ReliableNumbers(n, str(tmp_path), per_call=5))
    b.set_bolt("work", FailFirst(str(tmp_path), 7), 2).fields_grouping("numbers", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    conf = {"kstorm.checkpoint.dir": str(tmp_path / "cp"), "kstorm.spark.master": "local[2]",
            "kstorm.shuffle.partitions": 2, "kstorm.spout.max.batch.tuples": 20,
            "topology.guarantee": "at-least-once"}
    result = run_to_completion(b.create_topology(), conf, timeout=300)

    multiples = [m for m in range(n) if m % 7 == 0]
    assert sorted(failed(tmp_path)) == multiples  # fail(msg_id) for exactly those, once
    pids = {line.split()[0] for line in (tmp_path / "fails").read_text().splitlines()}
    assert pids and str(os.getpid()) not in pids  # in Spark's source process, not here
    out = Counter(v[0] for v in result.sinks["out"].values)
    assert out == Counter(range(n))  # each number once, the failed ones after their replay
    assert Counter(acked(tmp_path)) == Counter(range(n))  # and each acked once, not per batch
    progress = result.progress["components"]["numbers"]
    assert progress.get("failed") == len(multiples)
    notices = tmp_path / "cp" / "kstorm" / "acking" / "notices" / "numbers"
    assert (notices / "delivered").exists()


def test_trees_that_time_out_reach_fail_and_available_now_waits_for_them(
        spark, tmp_path: Path) -> None:
    n = 30
    b = TopologyBuilder()
    b.set_spout("numbers", ReliableNumbers(n, str(tmp_path), per_call=5))
    b.set_bolt("work", FailFirst(str(tmp_path), 11, hold=True)).shuffle_grouping("numbers")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("work")
    conf = {"kstorm.checkpoint.dir": str(tmp_path / "cp"), "kstorm.spark.master": "local[2]",
            "kstorm.shuffle.partitions": 2, "topology.guarantee": "at-least-once",
            "topology.message.timeout.secs": 3}
    started = time.monotonic()
    result = run_to_completion(b.create_topology(), conf, timeout=300)
    assert sorted(failed(tmp_path)) == [0, 11, 22]  # held, timed out, failed to the spout
    assert Counter(v[0] for v in result.sinks["out"].values) == Counter(range(n))
    assert Counter(acked(tmp_path)) == Counter(range(n))
    assert result.progress["components"]["numbers"].get("timed_out") == 3
    assert time.monotonic() - started >= 3  # the run waited for the time-out


@pytest.mark.parametrize("stop", ["committed", "in-commit"])
def test_a_new_instance_gets_the_acks_and_kstorm_replays_the_fails_of_the_old_one(
        spark, tmp_path: Path, stop: str) -> None:
    """Stop the topology while trees of the first spout instance are pending, start it again.

    The spout resumes after the last number it emitted, so only kstorm can bring back the
    tuples whose trees were pending: they time out after the restart, and, since the
    instance that emitted them is gone, kstorm re-emits them (their acks, later, go to the
    new instance). ``fail`` is never called on either instance. ``in-commit``: stopped as
    soon as the sink has the first batch, usually before Spark recorded its commit: the
    first batch is then planned again, and the spout's logged batch is what it replays.
    """
    from acking_topology import AppendSink

    from kstorm import submit_topology

    n = 40
    out_file = tmp_path / "out.txt"

    def lines() -> list[int]:
        return [int(x) for x in out_file.read_text().split()] if out_file.exists() else []

    def cursor() -> int:
        path = tmp_path / "cursor"
        return int(path.read_text()) if path.exists() else 0

    def run(until: int, label: str, committed: bool = False) -> None:
        b = TopologyBuilder()
        b.set_spout("numbers", ReliableNumbers(n, str(tmp_path), per_call=n,
                                               resume_emitted=True))
        b.set_bolt("work", FailFirst(str(tmp_path), 7, hold=True)).shuffle_grouping("numbers")
        b.set_bolt("out", AppendSink(str(out_file))).shuffle_grouping("work")
        conf = {"kstorm.checkpoint.dir": str(tmp_path / "cp"), "kstorm.trigger": "continuous",
                "kstorm.trigger.interval.ms": 100, "kstorm.spark.master": "local[2]",
                "kstorm.shuffle.partitions": 2, "topology.guarantee": "at-least-once",
                "topology.message.timeout.secs": 5}
        handle = submit_topology(f"orphans-{label}", conf, b.create_topology())
        try:
            deadline = time.monotonic() + 180
            while len(lines()) < until or (committed and not (
                    tmp_path / "cp" / "commits" / "0").exists()) or (
                    until == n and cursor() != n):  # the second run: until all are acked
                assert handle.is_active, f"{label} stopped"
                assert time.monotonic() < deadline, f"{label}: {sorted(lines())}"
                time.sleep(0.05)
        finally:
            handle.stop()

    held = [m for m in range(n) if m % 7 == 0]
    run(n - len(held), "first", stop == "committed")  # the rest is out: 6 trees pending
    assert sorted(lines()) == [m for m in range(n) if m % 7]
    assert not (tmp_path / "fails").exists()
    run(n, "second")
    assert set(lines()) == set(range(n))  # (in-commit: the replay appends its batch again)
    assert not (tmp_path / "fails").exists()  # neither instance was asked to re-emit them
    assert sorted(set(acked(tmp_path))) == list(range(n))
    opens = (tmp_path / "opens").read_text().splitlines()
    assert len(opens) == 2  # one instance per run


N_KILL = 2_000
START_TIMEOUT = 180.0


@pytest.mark.slow
def test_kill_9_mid_stream_every_number_reaches_the_sink(tmp_path: Path) -> None:
    """SIGKILL the topology's process session twice mid-stream, restart: nothing is lost.

    Tuples pending at a kill come back three ways, all at least once: a batch logged but not
    committed is replayed as logged; a fail for a tuple the dead instance emitted is
    re-emitted by kstorm; the spout resumes from the position it persisted in ``ack``.
    """
    import random
    import uuid

    from eo_topology import TopologyProcess

    argv = ["--count", str(N_KILL), "--state-dir", str(tmp_path), "--checkpoint",
            str(tmp_path / "checkpoint"), "--name", f"sf-{uuid.uuid4().hex[:6]}"]
    out_file = tmp_path / "out.txt"

    def lines() -> int:
        return len(out_file.read_text().split()) if out_file.exists() else 0

    rng = random.Random(1_515)
    timeline = []
    for index in (1, 2):
        run = TopologyProcess.start(argv, tmp_path, f"run{index}", module="spout_fail_topology")
        before = lines()
        deadline = time.monotonic() + START_TIMEOUT
        while lines() <= before:  # this run's first commit
            assert run.exited() is None, f"run{index} exited early:\n{run.tail()}"
            assert time.monotonic() < deadline, f"run{index} never committed:\n{run.tail()}"
            time.sleep(0.05)
        time.sleep(rng.uniform(0.3, 2.0))
        run.kill()
        timeline.append(f"run{index} killed with {lines()} lines out")
    final = TopologyProcess.start(argv, tmp_path, "final", module="spout_fail_topology")
    code = final.wait(START_TIMEOUT + 240)
    assert code == 0, f"final run exited {code}:\n{final.tail()}\n{timeline}"

    got = Counter(int(x) for x in out_file.read_text().split())
    assert set(got) == set(range(N_KILL)), (
        f"missing {sorted(set(range(N_KILL)) - set(got))[:10]}; {timeline}")
    fails = failed(tmp_path)
    assert fails and set(fails) <= {m for m in range(N_KILL) if m % 7 == 0}
    assert sorted(set(acked(tmp_path))) == list(range(N_KILL))
    print(f"{timeline}; {sum(got.values()) - N_KILL} duplicates; {len(fails)} fails")
