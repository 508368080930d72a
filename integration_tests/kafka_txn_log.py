"""Read a partition's raw log over the Kafka protocol and apply ``read_committed`` ourselves.

Why: a broker hides aborted transactional records from ``isolation.level=read_committed``
consumers by sending, with each fetch, the list of aborted transactions in the range. The
embedded broker (tansu 0.6) writes the COMMIT/ABORT control markers into the log but sends
no such list, so librdkafka shows aborted records too. This module is the tests' oracle of
what a read_committed consumer of Apache Kafka sees: it fetches the raw record batches
(Fetch v4, ``read_uncommitted``), and drops every transactional batch whose producer's next
control marker is ABORT, and the open transactions at the end (beyond the last stable
offset). Uncompressed batches only (the Kafka sink does not compress unless told to).

Example:
    >>> log = read_log("127.0.0.1:9092", "out", 0)  # doctest: +SKIP
    >>> [r.value for r in log.committed()], len(log.aborted())  # doctest: +SKIP
    ([b'a1', b'a2'], 2)
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from io import BytesIO

FETCH, FETCH_VERSION = 1, 4
TRANSACTIONAL, CONTROL = 0x10, 0x20
ABORT, COMMIT = 0, 1


@dataclass(frozen=True)
class Record:
    """One data record of the log."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    transactional: bool


@dataclass
class PartitionLog:
    """A partition's data records with each transactional record's fate."""

    records: list[Record] = field(default_factory=list)
    fate: dict[int, str] = field(default_factory=dict)  # offset -> committed|aborted|open
    markers: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, pid, type)

    def committed(self) -> list[Record]:
        """What a read_committed consumer of Apache Kafka reads, in offset order."""
        return [r for r in self.records if self.fate.get(r.offset, "committed") == "committed"]

    def aborted(self) -> list[Record]:
        """Records of aborted transactions (hidden by Kafka, shown by tansu)."""
        return [r for r in self.records if self.fate.get(r.offset) == "aborted"]


def read_log(bootstrap: str, topic: str, partition: int, *, timeout: float = 10.0
             ) -> PartitionLog:
    """Every batch of ``topic[partition]`` from offset 0 to the end, classified."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    log = PartitionLog()
    pending: dict[int, list[int]] = {}  # producer id -> offsets of its open transaction
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        offset = 0
        for correlation in range(1, 100_000):
            batches = _fetch(sock, correlation, topic, partition, offset)
            if not batches:
                break
            for base, attributes, pid, records in batches:
                if attributes & CONTROL:
                    kind = struct.unpack(">hh", records[0][1][:4])[1]
                    log.markers.append((base, pid, kind))
                    for at in pending.pop(pid, []):
                        log.fate[at] = "committed" if kind == COMMIT else "aborted"
                    offset = base + 1
                    continue
                for delta, key, value, headers in records:
                    at = base + delta
                    transactional = bool(attributes & TRANSACTIONAL)
                    log.records.append(Record(at, key, value, headers, pid, transactional))
                    if transactional:
                        pending.setdefault(pid, []).append(at)
                    offset = at + 1
    for offsets in pending.values():
        for at in offsets:
            log.fate[at] = "open"
    return log


# -- the wire format ---------------------------------------------------------------------


def _fetch(sock: socket.socket, correlation: int, topic: str, partition: int, offset: int
           ) -> list[tuple[int, int, int, list]]:
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 100, 0, 4 << 20, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">iiqi", 1, partition, offset, 4 << 20)
    client = b"kstorm-test-oracle"
    header = struct.pack(">hhih", FETCH, FETCH_VERSION, correlation, len(client)) + client
    request = header + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    buf = BytesIO(_exactly(sock, size))
    _, _ = struct.unpack(">ii", buf.read(8))  # correlation id, throttle
    data = b""
    for _ in range(_int(buf)):
        buf.read(_short(buf))  # topic name
        for _ in range(_int(buf)):
            _, error, _, _ = struct.unpack(">ihqq", buf.read(22))
            if error:
                msg = f"fetch {topic}[{partition}]@{offset}: error code {error}"
                raise RuntimeError(msg)
            aborted = _int(buf)
            buf.read(16 * max(aborted, 0))
            data = buf.read(_int(buf))
    return _batches(data)


def _batches(data: bytes) -> list[tuple[int, int, int, list]]:
    out = []
    buf = BytesIO(data)
    while len(data) - buf.tell() >= 12:
        base, length = struct.unpack(">qi", buf.read(12))
        if len(data) - buf.tell() < length:
            break  # a partial batch at the end of the fetch
        batch = BytesIO(buf.read(length))
        _, magic, _, attributes, _, _, _, pid, _, _, count = struct.unpack(
            ">ibIhiqqqhii", batch.read(49))
        if magic != 2 or attributes & 0x07:
            msg = f"batch at {base}: magic {magic}, attributes {attributes:#x} (compressed?)"
            raise RuntimeError(msg)
        out.append((base, attributes, pid, [_record(batch) for _ in range(count)]))
    return out


def _record(buf: BytesIO) -> tuple[int, bytes | None, bytes | None, tuple]:
    _varint(buf)  # length
    buf.read(1)  # attributes
    _varint(buf)  # timestamp delta
    delta = _varint(buf)
    key, value = _bytes(buf), _bytes(buf)
    headers = []
    for _ in range(_varint(buf)):
        name = _bytes(buf) or b""
        headers.append((name.decode(), _bytes(buf)))
    return delta, key, value, tuple(headers)


def _bytes(buf: BytesIO) -> bytes | None:
    size = _varint(buf)
    return None if size < 0 else buf.read(size)


def _varint(buf: BytesIO) -> int:
    shift = result = 0
    while True:
        byte = buf.read(1)[0]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1)  # zigzag
        shift += 7


def _int(buf: BytesIO) -> int:
    return struct.unpack(">i", buf.read(4))[0]


def _short(buf: BytesIO) -> int:
    return struct.unpack(">h", buf.read(2))[0]


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            msg = "broker closed the connection"
            raise ConnectionError(msg)
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
