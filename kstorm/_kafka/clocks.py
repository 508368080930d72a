"""Stream clocks recorded with each batch's offsets (driver side, plain files).

A windowed aggregate's commit phase writes, after each batch, the latest event timestamp of
every input stream (``topic/partition``). When the spout plans the next batch it records
those clocks inside the batch's end offsets, which Spark writes to its offset log before the
batch runs. A replayed batch therefore starts from exactly the clocks its first attempt saw,
and flags exactly the same tuples as late.
"""

from __future__ import annotations

import json
from typing import Any

CLOCKS_KEY = "@clocks"  # not a legal Kafka topic name, so it never collides with offsets
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
