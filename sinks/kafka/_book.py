"""The Kafka sink's bookkeeping, as plain values (pure: no client, no I/O).

One name, ``kstorm.<topology>.<sink>`` by default, is the sink's transactional id, the id of
the consumer group that holds its committed offsets, and the name of its bookkeeping topic
(one partition, compacted). Each batch's transaction commits, besides the output records:

* in the group: every source partition's end offset (metadata ``kstorm txid=<txid>``) and
  the **marker**, the offset of ``<bookkeeping topic>[0]``, set to ``txid + 1``: the last
  committed txid (offset metadata would do on Apache Kafka, but tansu drops it);
* in the bookkeeping topic: a ``commit`` record (the txid and the source offsets as JSON:
  an offsets-only transaction is not applied by tansu, and it is a readable history), and the
  runtime's window state, each state blob in chunks of at most ``CHUNK`` bytes with headers
  ``kstorm.txid``, ``kstorm.chunk`` (``i/n``).

Example:
    >>> [(k, h) for k, _, h in state_records(7, {"window:agg": b"abc"})]
    [(b'state:window:agg:0', [('kstorm.txid', b'7'), ('kstorm.chunk', b'0/1')])]
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kstorm.errors import ConfigError

CHUNK = 512 * 1024  # bytes of state per record (Kafka's default record limit is ~1 MB)
COMMIT_KEY = b"commit"
STATE_PREFIX = "state:"
TXID_HEADER, CHUNK_HEADER = "kstorm.txid", "kstorm.chunk"
_LEGAL = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

Header = tuple[str, str | bytes | None]
Offsets = dict[str, dict[int, int]]


def check_topic_name(kind: str, name: Any, where: str) -> str:
    """``name`` if Kafka accepts it as a topic name (it is also used as one), else ConfigError."""
    if not isinstance(name, str) or not _LEGAL.match(name) or name in (".", ".."):
        msg = f"{where}: {kind} must be 1-249 letters, digits, '.', '_' or '-', got {name!r}"
        raise ConfigError(msg)
    return name


def sink_name(topology: str, sink_id: str) -> str:
    """The default transactional id, group id and bookkeeping topic of a sink."""
    return f"kstorm.{topology}.{sink_id}"


def marker_offset(txid: int) -> int:
    """The marker's committed offset for ``txid`` (``txid + 1``: offset 0 reads as unset)."""
    return txid + 1


def txid_of_marker(offset: int | None) -> int | None:
    """The last committed txid from the marker's committed offset (None: nothing committed)."""
    return None if offset is None or offset <= 0 else offset - 1


def commit_record(txid: int, offsets: Offsets) -> tuple[bytes, bytes, list[Header]]:
    """The ``commit`` record of a batch: key, JSON value, headers."""
    value = json.dumps({"txid": txid, "offsets": offsets}, sort_keys=True).encode()
    return COMMIT_KEY, value, [(TXID_HEADER, str(txid).encode())]


def state_records(txid: int, state: Mapping[str, bytes] | None
                  ) -> list[tuple[bytes, bytes, list[Header]]]:
    """The window state of a batch as bookkeeping records (key, chunk, headers)."""
    out = []
    for name, blob in sorted((state or {}).items()):
        chunks = [blob[at:at + CHUNK] for at in range(0, len(blob), CHUNK)] or [b""]
        for i, chunk in enumerate(chunks):
            headers: list[Header] = [(TXID_HEADER, str(txid).encode()),
                                     (CHUNK_HEADER, f"{i}/{len(chunks)}".encode())]
            out.append((f"{STATE_PREFIX}{name}:{i}".encode(), chunk, headers))
    return out


def assemble_state(records: Iterable[tuple[bytes | None, bytes | None, Any]], txid: int
                   ) -> dict[str, bytes]:
    """The state committed with ``txid``, from the bookkeeping topic's records in log order.

    Only records carrying ``txid`` count, and for each name the last complete set of chunks
    wins: an attempt of the same txid that aborted (visible on brokers that do not hide
    aborted records, like tansu) always comes before the attempt that committed.
    """
    sets: dict[str, dict[int, bytes]] = {}
    done: dict[str, bytes] = {}
    for key, value, headers in records:
        if key is None or not key.startswith(STATE_PREFIX.encode()):
            continue
        meta = {k: v.decode() for k, v in (headers or []) if v is not None}
        if meta.get(TXID_HEADER) != str(txid) or CHUNK_HEADER not in meta:
            continue
        name = key.decode()[len(STATE_PREFIX):].rpartition(":")[0]
        index, total = (int(x) for x in meta[CHUNK_HEADER].split("/"))
        if index == 0:
            sets[name] = {}
        chunks = sets.setdefault(name, {})
        chunks[index] = value or b""
        if len(chunks) == total and index == total - 1:
            done[name] = b"".join(chunks[i] for i in range(total))
    return done
