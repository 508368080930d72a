"""One driver per checkpoint: a second one is refused, naming the first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from kstorm._runtime.checkpoint_lock import CheckpointLock, lock_path
from kstorm.errors import StateError

HOLD = """
import sys, time
from pathlib import Path
from kstorm._runtime.checkpoint_lock import CheckpointLock
CheckpointLock.acquire(Path(sys.argv[1]), "other")
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_lock_in_this_process_is_refused_until_released(tmp_path):
    cp = tmp_path / "cp"
    first = CheckpointLock.acquire(cp, "counts")
    assert lock_path(cp) == cp / ".lock" and cp.is_dir()
    with pytest.raises(StateError, match=r"in use by another running topology \(topology "
                                         r"'counts', this process") as err:
        CheckpointLock.acquire(cp, "counts")
    assert "kstorm.checkpoint.dir" in err.value.hint
    first.release()
    first.release()  # idempotent
    CheckpointLock.acquire(cp, "counts").release()


def test_a_driver_in_another_process_holds_it_until_it_dies(tmp_path):
    cp = tmp_path / "cp"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(cp)], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateError, match=f"topology 'other', pid {holder.pid} on "):
            CheckpointLock.acquire(cp, "counts")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    CheckpointLock.acquire(cp, "counts").release()  # a killed driver let go at once


def test_a_lock_whose_query_ended_is_taken_over_in_this_process(tmp_path):
    cp = tmp_path / "cp"
    ended = CheckpointLock.acquire(cp, "counts")
    ended.running = lambda: True
    with pytest.raises(StateError):
        CheckpointLock.acquire(cp, "counts")
    ended.running = lambda: False  # an available-now run that finished, never stopped
    again = CheckpointLock.acquire(cp, "counts")
    assert again.held and not ended.held
    again.release()


def test_a_checkpoint_moved_aside_takes_its_lock_along_and_the_driver_follows(tmp_path):
    cp = tmp_path / "cp"
    lock = CheckpointLock.acquire(cp, "counts")
    stale = cp.with_name("cp.stale-1")
    cp.rename(stale)
    lock.follow("counts")
    assert lock.held and (cp / ".lock").exists()
    with pytest.raises(StateError):
        CheckpointLock.acquire(cp, "counts")
    CheckpointLock.acquire(stale, "old").release()  # the old one is free again
    lock.release()


def test_follow_fails_when_another_driver_took_the_new_directory(tmp_path):
    cp = tmp_path / "cp"
    lock = CheckpointLock.acquire(cp, "counts")
    cp.rename(cp.with_name("cp.stale-1"))
    other = CheckpointLock.acquire(cp, "other")
    with pytest.raises(StateError, match="topology 'other'"):
        lock.follow("counts")
    assert lock.held  # still holding the old one, released with the driver
    lock.release()
    other.release()


def test_a_refused_start_on_a_new_checkpoint_leaves_no_directory(tmp_path):
    cp = tmp_path / "cp"
    CheckpointLock.acquire(cp, "counts").release(discard=True)
    assert not cp.exists()
    lock = CheckpointLock.acquire(cp, "counts")
    (cp / "offsets").mkdir()  # the run got further: what it wrote stays
    lock.release(discard=True)
    assert (cp / "offsets").is_dir()
    CheckpointLock.acquire(cp, "counts").release()  # and the checkpoint can be locked again


def test_a_lock_file_replaced_after_it_was_opened_is_not_trusted(tmp_path, monkeypatch):
    from kstorm._runtime import checkpoint_lock

    cp = tmp_path / "cp"
    calls = []
    real = checkpoint_lock._same_file

    def replaced_once(fd, path):
        calls.append(path)
        return len(calls) > 1 and real(fd, path)

    monkeypatch.setattr(checkpoint_lock, "_same_file", replaced_once)
    lock = CheckpointLock.acquire(cp, "counts")
    assert len(calls) == 2 and lock.held  # opened and locked again
    lock.release()
