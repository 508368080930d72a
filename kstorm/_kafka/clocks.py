"""Stream clocks recorded with each batch's offsets (driver side, plain files).

A windowed aggregate's commit phase writes, after each batch, the latest event timestamp of
every input stream (``topic/partition``). When the spout plans the next batch it records
those clocks inside the batch's end offsets, which Spark writes to its offset log before the
batch runs. A replayed batch therefore starts from exactly the clocks its first attempt saw,
and flags exactly the same tuples as late.

A processing-time session of the aggregate closes only in a batch whose time is past its
end, so its commit phase also writes when the next one is due (``"due"``); once that time
has come and the spout has nothing new, its source plans a batch without input all the
same, marked with :func:`due_mark` (Spark runs a batch only for an end offset that differs
from the last one). It is the aggregate's counterpart of a windowed bolt's Spark timers.
"""

from __future__ import annotations

import json
from typing import Any

CLOCKS_KEY = "@clocks"  # not a legal Kafka topic name, so it never collides with offsets
DUE_KEY = "@due"  # a batch planned without input, to close processing-time sessions
NEW_STREAM = "@new"  # in the clocks: where a stream with no clock yet starts (see clock_of)
MARK_PREFIX = "@"  # every key of a batch's end offsets that is not a topic starts with it


def read_clocks(path: str | None) -> dict[str, int]:
    """The clocks in ``path`` (``{}`` if there is no file yet)."""
    if not path:
        return {}
    try:
        with open(path) as f:
            return dict(json.load(f)["latest"])
    except FileNotFoundError:
        return {}


def due_mark(path: str | None, now_ms: int) -> dict[str, Any]:
    """``{DUE_KEY: now_ms}`` if the aggregate's next session close is due by ``now_ms``.

    ``{}`` otherwise (no file, nothing due, or due later). The mark is the planning time,
    so each due batch's end offsets differ from the batch before.

    Example:
        >>> due_mark(None, 5)
        {}
    """
    if not path:
        return {}
    try:
        with open(path) as f:
            due = json.load(f).get("due")
    except FileNotFoundError:
        return {}
    return {DUE_KEY: now_ms} if due is not None and due <= now_ms else {}


def stream_clocks(path: str | None) -> dict[str, Any]:
    """``{CLOCKS_KEY: clocks}`` to merge into a batch's end offsets, or ``{}``."""
    clocks = read_clocks(path)
    return {CLOCKS_KEY: clocks} if clocks else {}


def clock_of(clocks: dict[str, Any], stream: str) -> int | None:
    """A stream's clock (a stream with none yet: ``@new``, the closed watermark plus lag).

    So a partition that starts delivering late cannot reopen windows that already fired.

    Example:
        >>> clock_of({"t/0": 50, NEW_STREAM: 40}, "t/1"), clock_of({"t/0": 50}, "t/0")
        (40, 50)
    """
    found = clocks.get(stream)
    return clocks.get(NEW_STREAM) if found is None else found
