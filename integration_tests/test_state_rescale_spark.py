"""The stateful word count rescaled 2 -> 4 -> 3 through kill -9, its state in Spark (exact).

As ``test_state_rescale.py``, with ``topology.state.provider = spark``: WordCount's
``KeyValueState`` is a TWS map per task. Run with 2 tasks and SIGKILLed once the sink
committed txid 16; restarted with 4 (the state at the sinks' txid moves to a new checkpoint,
each key to the task of its key group: ``kstorm/_spark/state_rescale.py``) and SIGKILLed in
the first commit after the change, inside the sink's atomic step (the new checkpoint's first
batch is then committed nowhere) or right after it (committed by the sinks, not by Spark);
restarted with 3, which moves the state again and runs to the topic's end. Every word's
count must equal its count in the produced sentences.

A global-grouped word count refuses another parallelism, naming the reason, and runs on
exactly afterwards with the parallelism it had.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_state_rescale import _kill_past, _setup, _stored, _with

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("after", [False, True], ids=["inside-commit", "after-commit"])
def test_spark_state_word_count_rescaled_two_four_three_through_kills_is_exact(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any,
        after: bool) -> None:
    runs, truth = _setup(kafka, redis_server, tmp_path, produce, "spark")
    _with(runs, 2)
    _kill_past(runs, 15)
    _with(runs, 4)
    runs.kill_in_commit(after=after)
    _with(runs, 3)
    assert "(exited first)" not in "\n".join(runs.timeline), "\n".join(runs.timeline)
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert _stored(runs) == dict(truth), "\n".join(runs.timeline)
    keys = json.loads((tmp_path / "checkpoint" / "kstorm" / "task_keys.json").read_text())
    assert len(keys["count"]["keys"]) == 3
    logs = "".join(log.read_text(errors="replace") for log in runs.logs)
    assert "moved from 2 task(s) to 4 by key group" in logs, "\n".join(runs.timeline)
    assert "moved from 4 task(s) to 3 by key group" in logs or (
        not after and "moved from 2 task(s) to 3 by key group" in logs), "\n".join(
            runs.timeline)
    assert any(p.name.startswith("checkpoint.rescaled-at-") for p in tmp_path.iterdir())


def test_a_global_grouped_spark_state_refuses_another_parallelism(
        spark: Any, kafka: Any, redis_server: Any, tmp_path: Path, produce: Any) -> None:
    runs, truth = _setup(kafka, redis_server, tmp_path, produce, "spark")
    runs.argv.append("--grouping=global")
    _with(runs, 1)
    _kill_past(runs, 15)
    before = sorted(p.name for p in tmp_path.iterdir())
    _with(runs, 2)
    assert runs.finish() == 4, "\n".join(runs.timeline)  # refused: StateError
    log = (tmp_path / f"run{runs.count}.log").read_text(errors="replace")
    assert "now runs 2 task(s)" in log and "global grouping" in log, log[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".log")) == [
        n for n in before if not n.endswith(".log")]
    _with(runs, 1)
    assert runs.finish() == 0, "\n".join(runs.timeline)
    assert _stored(runs) == dict(truth)
