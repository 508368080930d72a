"""A hook for kill tests: hold a commit just before its atomic step.

Set ``KSTORM_TEST_PAUSE_IN_COMMIT=/some/marker`` in the environment of the process
that commits. Its next commit creates the marker file (holding the txid and pid),
then waits until the file is removed (or the process is killed, which is the point).
Unset, the hook costs one environment lookup.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PAUSE_ENV = "KSTORM_TEST_PAUSE_IN_COMMIT"
_POLL_S = 0.02
_MAX_PAUSE_S = 600.0


def pause_before_atomic_commit(what: str) -> None:
    """If ``$KSTORM_TEST_PAUSE_IN_COMMIT`` names a file: create it, wait until it is gone.

    Example:
        >>> pause_before_atomic_commit("redis sink txid 3")  # no-op unless the variable is set
    """
    marker = os.environ.get(PAUSE_ENV)
    if not marker:
        return
    path = Path(marker)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{what} pid={os.getpid()}\n")
    os.replace(tmp, path)  # appears with its content: a watcher never reads it half-written
    deadline = time.monotonic() + _MAX_PAUSE_S
    while path.exists() and time.monotonic() < deadline:
        time.sleep(_POLL_S)


__all__ = ["PAUSE_ENV", "pause_before_atomic_commit"]
