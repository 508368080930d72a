"""Seed 002's update rules as plain Python, and the commit pause hook (no Redis)."""

from __future__ import annotations

import threading
import time

from hypothesis import given
from hypothesis import strategies as st

from kstorm.failpoints import PAUSE_ENV
from kstorm.failpoints import pause_before_commit as pause_before_atomic_commit
from sinks.redis._rules import ABSENT, Stored, update


def add(old, new):
    return old + new


def test_transactional_skips_a_key_already_written_by_the_txid() -> None:
    assert update("transactional", 7, Stored(10, 7), [3], add) is None


def test_transactional_merges_a_new_txid() -> None:
    assert update("transactional", 8, Stored(10, 7), [3], add) == Stored(13, 8)


def test_first_write_stores_the_new_value() -> None:
    assert update("transactional", 1, Stored(), [3], add) == Stored(3, 1)
    assert update("opaque", 1, Stored(), [3], add) == Stored(3, 1, prev=ABSENT)


def test_opaque_new_txid_moves_value_to_prev() -> None:
    assert update("opaque", 8, Stored(10, 7, prev=4), [3], add) == Stored(13, 8, prev=10)


def test_opaque_replay_recomputes_from_prev_with_the_new_content() -> None:
    # The seed: "If the transaction id for the current batch is the same as the transaction
    # id in the database, set val.count = val.prevCount + partialCount."
    assert update("opaque", 8, Stored(13, 8, prev=10), [5], add) == Stored(15, 8, prev=10)


def test_opaque_replay_of_a_first_write_takes_the_new_content() -> None:
    assert update("opaque", 1, Stored(3, 1), [9], add) == Stored(9, 1, prev=ABSENT)


def test_several_new_values_fold_in_order() -> None:
    assert update("opaque", 2, Stored("a", 1), ["b", "c"], add) == Stored("abc", 2, prev="a")


# Hypothesis: a key's history is a sequence of batch attempts with increasing txids; a txid
# may be attempted several times (a crash before the batch record was written), each time
# with possibly different content (opaque spout). Every attempt reaches the store.
attempts = st.lists(st.tuples(st.booleans(), st.lists(st.integers(-50, 50), min_size=1,
                                                      max_size=3)), min_size=1, max_size=12)


def history(steps):
    """[(txid, content)], a retry of the previous txid when the flag says so."""
    txid, out = 0, []
    for retry, content in steps:
        if not (retry and out):
            txid += 1
        out.append((txid, content))
    return out


@given(attempts)
def test_opaque_ends_as_if_each_txid_ran_once_with_its_last_attempt(steps) -> None:
    stored = Stored()
    for txid, content in history(steps):
        stored = update("opaque", txid, stored, content, add)
    last = dict(history(steps))  # txid -> content of its last attempt
    assert stored.value == sum(sum(c) for c in last.values())


@given(attempts)
def test_transactional_ends_as_if_each_txid_ran_once_with_its_first_attempt(steps) -> None:
    stored = Stored()
    for txid, content in history(steps):
        stored = update("transactional", txid, stored, content, add) or stored
    first: dict[int, list[int]] = {}
    for txid, content in history(steps):
        first.setdefault(txid, content)
    assert stored.value == sum(sum(c) for c in first.values())


def test_pause_hook_holds_until_the_marker_is_removed(tmp_path, monkeypatch) -> None:
    marker = tmp_path / "paused"
    monkeypatch.setenv(PAUSE_ENV, str(marker))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (pause_before_atomic_commit("txid 3"), done.set()))
    worker.start()
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "txid 3" in marker.read_text()
    assert not done.wait(0.2)  # still held
    marker.unlink()
    worker.join(10)
    assert done.is_set()


def test_pause_hook_is_a_no_op_when_unset(monkeypatch) -> None:
    monkeypatch.delenv(PAUSE_ENV, raising=False)
    started = time.monotonic()
    pause_before_atomic_commit("txid 1")
    assert time.monotonic() - started < 0.5
