"""Fault-injection hooks for kill tests: hold a commit at a chosen point until a file is gone.

Set one of these in the environment of the process that commits:

- ``KSTORM_TEST_PAUSE_IN_COMMIT=<file>``: a sink's next commit, just before its atomic step
  (Redis: the commit script; Kafka: ``commit_transaction``, after the batch was produced and
  flushed), creates ``<file>`` (holding what is paused and the pid), then waits until the
  file is removed -- or the process is killed, which is the point.
- ``KSTORM_TEST_PAUSE_AFTER_COMMIT=<file>``: the same right after a sink's commit: a kill
  there leaves the sink one batch ahead of Spark's commit log.

Unset, each hook costs one environment lookup. A sink of your own gets the same kill tests
as kstorm's by calling :func:`pause_before_commit` just before its atomic step and
:func:`pause_after_commit` right after it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

PAUSE_ENV = "KSTORM_TEST_PAUSE_IN_COMMIT"
PAUSE_AFTER_ENV = "KSTORM_TEST_PAUSE_AFTER_COMMIT"
_POLL_S = 0.02
_MAX_PAUSE_S = 600.0


def pause_before_commit(what: str, settle: Callable[[], object] | None = None) -> None:
    """If ``$KSTORM_TEST_PAUSE_IN_COMMIT`` names a file: create it, wait until it is gone.

    ``settle`` runs first, only when pausing (the Kafka sink flushes its producer: a kill
    during the pause must leave the transaction's records on the broker, as aborted
    records, rather than in the killed producer's buffer).

    Example:
        >>> pause_before_commit("redis sink txid 3")  # a no-op unless the variable is set
    """
    marker = os.environ.get(PAUSE_ENV)
    if not marker:
        return
    if settle is not None:
        settle()
    _hold(Path(marker), what)


def pause_after_commit(what: str) -> None:
    """If ``$KSTORM_TEST_PAUSE_AFTER_COMMIT`` names a file: create it, wait until it is gone."""
    marker = os.environ.get(PAUSE_AFTER_ENV)
    if marker:
        _hold(Path(marker), what)


def _hold(path: Path, what: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{what} pid={os.getpid()}\n")
    os.replace(tmp, path)  # appears with its content: a watcher never reads it half-written
    deadline = time.monotonic() + _MAX_PAUSE_S
    while path.exists() and time.monotonic() < deadline:
        time.sleep(_POLL_S)
