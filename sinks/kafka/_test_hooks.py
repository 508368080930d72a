"""Hooks for kill tests: hold a Kafka sink commit at a chosen point until a file is removed.

``KSTORM_TEST_PAUSE_IN_COMMIT=<file>`` (shared with the Redis sink) holds the next commit
after the batch was produced, before ``commit_transaction``; a kill there leaves an open
transaction that the next ``init_transactions()`` aborts. ``KSTORM_TEST_PAUSE_AFTER_COMMIT=
<file>`` holds it right after ``commit_transaction``: a kill there leaves the sink one batch
ahead of Spark's commit log, so the restarted topology replays a batch the sink has.
The hook creates the file (holding what is paused and the pid) and waits until it is gone.
Unset, each costs one environment lookup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from sinks.redis._test_hooks import PAUSE_ENV, pause_before_atomic_commit

PAUSE_AFTER_ENV = "KSTORM_TEST_PAUSE_AFTER_COMMIT"
_POLL_S = 0.02
_MAX_PAUSE_S = 600.0


def pause_before_commit(what: str, settle: Callable[[], object] | None = None) -> None:
    """If ``$KSTORM_TEST_PAUSE_IN_COMMIT`` names a file: create it, wait until it is gone.

    ``settle`` runs first, only when pausing (the sink flushes its producer: a kill during
    the pause must leave the transaction's records on the broker, as aborted records,
    rather than in the killed producer's buffer).
    """
    if settle is not None and os.environ.get(PAUSE_ENV):
        settle()
    pause_before_atomic_commit(what)


def pause_after_commit(what: str) -> None:
    """If ``$KSTORM_TEST_PAUSE_AFTER_COMMIT`` names a file: create it, wait until it is gone.

    Example:
        >>> pause_after_commit("kafka sink txid 3")  # a no-op unless the variable is set
    """
    marker = os.environ.get(PAUSE_AFTER_ENV)
    if not marker:
        return
    path = Path(marker)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{what} pid={os.getpid()}\n")
    os.replace(tmp, path)
    deadline = time.monotonic() + _MAX_PAUSE_S
    while path.exists() and time.monotonic() < deadline:
        time.sleep(_POLL_S)


__all__ = ["PAUSE_AFTER_ENV", "PAUSE_ENV", "pause_after_commit", "pause_before_commit"]
