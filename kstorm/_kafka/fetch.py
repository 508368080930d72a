"""Read one offset range of one partition into Arrow record batches (runs on executors).

``read_range`` is what a Spark read task does: assign the partition at the range start,
consume until the range end (exclusive), and turn each chunk of records into one
``pyarrow.RecordBatch`` with :meth:`KafkaSpout.arrow_schema`. Values are deserialized a chunk
at a time with ``Serde.deserialize_batch``; columns are built from lists, with no per-record
Python object beyond the client's own message.

The same range always gives the same rows (replay determinism): records below ``start`` or at
``end`` and beyond are dropped; a range that cannot be read fully is an error, never a
shorter batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kstorm._kafka.client import config_key
from kstorm._kafka.offsets import OffsetRange
from kstorm.errors import SourceError
from kstorm.kafka.spout import HEADERS_TYPE, KafkaSpout
from serdes.base import DecodeResult, Serde

log = logging.getLogger("kstorm.kafka")
CHUNK_ROWS = 10_000
# A read task wants its range, not the partition's tail. librdkafka prefetches up to
# queued.max.messages.kbytes (default 64 MiB) per partition, and a task's consumer is closed
# at the range end, so with the defaults a 5,000-record range fetched and decoded up to ~100k
# records: 68 ms per 5,000-record task, 15 ms with a 1 MiB queue (read_range on the embedded
# broker, 1,000,000 standard-benchmark events, median of 8). A full queue makes librdkafka
# wait fetch.queue.backoff.ms (default 1 s) before fetching again: 5 ms keeps a long range
# streaming (125,000 records: 221 -> 182 ms). A spout's consumer_config overrides these.
# A consumer is kept for the partition's next range only while the stream is catching up
# (see _Kept).
_READ_TUNING = {"fetch.wait.max.ms": "100", "max.partition.fetch.bytes": "1048576",
                "queued.max.messages.kbytes": "1024", "fetch.queue.backoff.ms": "5"}


def read_range(
    spout: KafkaSpout,
    task: OffsetRange,
    *,
    chunk_rows: int = CHUNK_ROWS,
    clock: Callable[[], float] = time.monotonic,
    keep: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[task.start, task.end)`` of one partition as record batches.

    Every batch but the last has ``chunk_rows`` rows, so the batches of a range are the same
    on every read. Raises :class:`SourceError` naming the range if it cannot be read fully:
    records deleted by retention, an unknown partition, or no progress for
    ``spout.read_timeout`` seconds. An opaque spout (``KafkaSpout(opaque=True)``) yields
    what is left of a range whose records were deleted or whose partition is gone.

    ``keep``: more records follow the range (the stream is catching up); the consumer is
    kept for the partition's next range (:class:`_Kept`).
    """
    if task.size <= 0:
        return
    config = spout.client_config("consumer", tuning=_READ_TUNING)
    kept = _KEPT.take(config, task)
    consumer = kept.consumer if kept is not None else Consumer(config)
    read = _Read(task.start if kept is None else kept.next_offset)
    try:
        if kept is None:
            consumer.assign([KafkaTopicPartition(task.topic, task.partition, task.start)])
        pending: list[Message] = []
        for messages in _consume(consumer, spout, task, clock, read):
            pending.extend(messages)
            while len(pending) >= chunk_rows:
                yield to_record_batch(spout, task.topic, task.partition, pending[:chunk_rows])
                del pending[:chunk_rows]
        if pending:
            yield to_record_batch(spout, task.topic, task.partition, pending)
        read.complete = True
    finally:
        if keep and read.complete and read.reusable:
            _KEPT.give_back(config, task, consumer, read.next_offset)
        else:
            consumer.close()


@dataclass
class _Read:
    """How far a consumer delivered: the offset after the last record it returned."""

    next_offset: int
    complete: bool = False  # the range was read to its end
    reusable: bool = True  # False once an opaque spout's read skipped deleted records


@dataclass
class _KeptConsumer:
    consumer: Consumer
    next_offset: int
    used_at: float


class _Kept:
    """Read consumers a Python worker keeps for the partition's next range, while catching up.

    A fresh consumer per range pays a connection, a first fetch from the broker and a close
    (~9 ms of a 17 ms 5,000-record range on the embedded broker); one kept from the
    previous range has prefetched the next records into its queue (5,000 records in ~1 ms).
    Kept only when the planner capped the batch short of the records it saw on the partition
    (``read_range(keep=True)``: the stream is catching up): at the tail of a live stream a
    kept consumer's long-poll fetch can delay the next range's records (window latency
    tripled when every consumer was kept), so there the consumer is closed as before.

    Spark hands a batch's tasks to any idle worker, so a worker's consumer may be a range
    behind: records it delivers below the range start are dropped (``_consume`` trims), up
    to :data:`SKIP_MAX` offsets; further behind, or ahead, a fresh consumer reads the range.
    Which consumer reads a range never changes its rows: offsets outside the range are
    dropped, and the range must be read to its end. At most :data:`KEEP_MAX` consumers are
    kept; one unused for :data:`IDLE_S` seconds is closed at the next read task (those on
    a thread of their own: a close waits for the consumer's fetch in flight).
    """

    KEEP_MAX = 16
    IDLE_S = 60.0
    SKIP_MAX = 20_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._consumers: OrderedDict[tuple[Any, ...], _KeptConsumer] = OrderedDict()

    @staticmethod
    def _key(config: dict[str, Any], task: OffsetRange) -> tuple[Any, ...]:
        return (config_key(config), task.topic, task.partition)

    def take(self, config: dict[str, Any], task: OffsetRange) -> _KeptConsumer | None:
        """The kept consumer that can read ``task`` from where it is, else None."""
        now = time.monotonic()
        with self._lock:
            found = self._consumers.pop(self._key(config, task), None)
            stale = [k for k, c in self._consumers.items() if now - c.used_at > self.IDLE_S]
            closing = [self._consumers.pop(k).consumer for k in stale]
        if found is not None and not 0 <= task.start - found.next_offset <= self.SKIP_MAX:
            closing.append(found.consumer)
            found = None
        _close_aside(closing)
        return found

    def give_back(self, config: dict[str, Any], task: OffsetRange, consumer: Consumer,
                  next_offset: int) -> None:
        """Keep ``consumer`` for the partition's next range."""
        evicted = None
        with self._lock:
            self._consumers[self._key(config, task)] = _KeptConsumer(
                consumer, next_offset, time.monotonic())
            if len(self._consumers) > self.KEEP_MAX:
                evicted = self._consumers.popitem(last=False)[1].consumer
        if evicted is not None:
            _close_aside([evicted])


def _close_aside(consumers: list[Consumer]) -> None:
    """Close consumers no read task uses any more, off the task's path.

    A close waits for the consumer's fetch in flight: at a partition's tail that is a long
    poll of up to ``fetch.wait.max.ms``.
    """
    if consumers:
        threading.Thread(target=lambda: [c.close() for c in consumers], daemon=True,
                         name="kstorm-close-read-consumers").start()


_KEPT = _Kept()


def _consume(
    consumer: Consumer, spout: KafkaSpout, task: OffsetRange, clock: Callable[[], float],
    read: _Read | None = None,
) -> Iterator[list[Message]]:
    """Lists of messages of the range, in offset order, until the end is reached.

    ``read`` (when given) follows the offset after the last record the consumer returned,
    and says whether the consumer skipped deleted records.
    """
    read = read if read is not None else _Read(task.start)
    position = task.start
    progress_at = clock()
    while position < task.end:
        behind = max(task.start - read.next_offset, 0)  # a kept consumer a range behind
        wanted = min(task.end - position + behind, CHUNK_ROWS)
        got = consumer.consume(wanted, spout.poll_timeout)
        records = [m for m in got if m.error() is None]
        if len(records) != len(got) and read.next_offset < task.start:
            # a kept consumer still behind the range: its error concerns records before the
            # range (e.g. deleted by retention since); read the range from its start
            consumer.assign([KafkaTopicPartition(task.topic, task.partition, task.start)])
            read.next_offset = task.start
            continue
        if len(records) != len(got) and _check_errors(got, task, position,
                                                      opaque=spout.opaque):
            resumed = _skip_deleted(consumer, task, position)
            read.reusable = False  # the consumer skipped records: never kept
            if resumed is None:
                return
            position, progress_at = resumed, clock()
            continue
        if records:
            first, last = _offset(records[0]), _offset(records[-1])
            read.next_offset = max(read.next_offset, last + 1)
            if first < task.start or last >= task.end:  # trim to the range
                records = [m for m in records if task.start <= _offset(m) < task.end]
            position = max(position, last + 1)
            progress_at = clock()
            if records:
                yield records
            continue
        # Nothing new: the rest of the range may be transaction markers or compacted away.
        reached = consumer.position([KafkaTopicPartition(task.topic, task.partition)])[0].offset
        if reached >= task.end:
            return
        if clock() - progress_at > spout.read_timeout:
            msg = (
                f"kafka spout: reading {task.topic}[{task.partition}] offsets "
                f"[{task.start}, {task.end}): no record after offset {position} for "
                f"{spout.read_timeout}s (is the broker reachable? were the records deleted?)"
            )
            raise SourceError(msg)


def _offset(message: Message) -> int:
    offset = message.offset()
    return -1 if offset is None else offset


_GONE = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
_FATAL = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
)


def _skip_deleted(consumer: Consumer, task: OffsetRange, position: int) -> int | None:
    """An opaque spout's replay: go on at the partition's first record, None if nothing is left.

    Records the range needs were deleted (or the partition is gone): the batch emits what
    is still there, and says which offsets it could not read.
    """
    where = f"{task.topic}[{task.partition}] offsets [{task.start}, {task.end})"
    try:
        low, _high = consumer.get_watermark_offsets(
            KafkaTopicPartition(task.topic, task.partition), timeout=10.0)
    except Exception as exc:  # noqa: BLE001 - the partition is gone: nothing left to emit
        log.warning("opaque kafka spout: %s cannot be read from offset %s (%s); the batch "
                    "emits what it read", where, position, exc)
        return None
    if low >= task.end or low < 0:
        log.warning("opaque kafka spout: %s: offsets [%s, %s) were deleted; the batch emits "
                    "what it read", where, position, task.end)
        return None
    log.warning("opaque kafka spout: %s: offsets [%s, %s) were deleted; the batch goes on at "
                "%s", where, position, low, low)
    consumer.assign([KafkaTopicPartition(task.topic, task.partition, low)])
    return low


def _check_errors(messages: Sequence[Message], task: OffsetRange, position: int, *,
                  opaque: bool = False) -> bool:
    """Raise on errors that waiting cannot cure; log the rest (the client retries them).

    ``opaque`` (an opaque spout): records the range needs are gone -- deleted by retention,
    or the partition no longer exists; returns True instead of raising.
    """
    where = f"{task.topic}[{task.partition}] offsets [{task.start}, {task.end})"
    for message in messages:
        error = message.error()
        if error is None or error.code() == KafkaError._PARTITION_EOF:
            continue
        if opaque and (error.code() in _GONE or error.code() in _FATAL[:3]):
            return True
        if error.code() in _GONE:
            msg = (
                f"kafka spout: {where} cannot be read: offset {position} is out of range "
                f"({error}); retention deleted records the batch needs"
            )
            raise SourceError(msg)
        if error.fatal() or error.code() in _FATAL:
            msg = f"kafka spout: reading {where} failed at offset {position}: {error}"
            raise SourceError(msg)
        log.warning("kafka spout: reading %s at offset %s: %s (retrying)", where, position, error)
    return False


def to_record_batch(
    spout: KafkaSpout, topic: str, partition: int, messages: Sequence[Any]
) -> pa.RecordBatch:
    """Messages of one partition -> one record batch with ``spout.arrow_schema()``."""
    n = len(messages)
    values = [m.value() for m in messages]
    keys = [m.key() for m in messages]
    stamps = [m.timestamp() for m in messages]
    headers = [m.headers() for m in messages]
    errors: list[str | None] = [None] * n
    where = f"{topic}[{partition}] offsets {messages[0].offset()}..{messages[-1].offset()}"
    columns = _decoded(spout.value_serde, values, errors, "", where)  # type: ignore[arg-type]
    if spout.key_serde is not None:
        columns += _decoded(spout.key_serde, keys, errors, "key: ", where)
    columns += [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array([m.offset() for m in messages], pa.int64()),
        pa.array(keys, pa.binary()),
        pa.array([ts if kind else None for kind, ts in stamps], pa.int64()),
        _headers_array(headers),
        *_error_columns(errors, values),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=spout.arrow_schema())


def _error_columns(errors: list[str | None], values: list[bytes | None]) -> list[pa.Array]:
    """``__error`` and ``__raw``: null except on rows that failed to deserialize."""
    n = len(errors)
    if not any(errors):
        return [pa.nulls(n, pa.string()), pa.nulls(n, pa.binary())]
    raw = [v if e is not None else None for e, v in zip(errors, values, strict=True)]
    return [pa.array(errors, pa.string()), pa.array(raw, pa.binary())]


def _decoded(
    serde: Serde, data: list[bytes | None], errors: list[str | None], prefix: str, where: str
) -> list[pa.Array]:
    """The serde's columns for ``data``; failed rows are null and noted in ``errors``."""
    schema = serde.arrow_schema()
    try:
        result: DecodeResult = serde.deserialize_batch(data)
    except Exception as exc:  # a serde bug, not a bad record: fail the task, say where
        msg = f"kafka spout: {type(serde).__name__}.deserialize_batch raised on {where}: {exc}"
        raise SourceError(msg) from exc
    if not result.failures and len(result.good) == len(data):
        return [_as(col, f.type) for col, f in zip(result.batch.columns, schema, strict=True)]
    for failure in result.failures:
        note = f"{prefix}{failure.error_type}: {failure.message}"
        current = errors[failure.index]
        errors[failure.index] = note if current is None else f"{current}; {note}"
    index = np.full(len(data), -1, dtype=np.int64)
    index[np.asarray(result.good, dtype=np.int64)] = np.arange(len(result.good))
    take = pa.array(index, mask=index < 0)
    return [
        _as(col.take(take), f.type) for col, f in zip(result.batch.columns, schema, strict=True)
    ]


def _as(column: pa.Array, type_: pa.DataType) -> pa.Array:
    return column if column.type == type_ else column.cast(type_)


def _headers_array(headers: list[list[tuple[str, bytes]] | None]) -> pa.Array:
    """``list<struct<key, value>>`` from the client's header lists (null: no headers)."""
    if not any(headers):
        return pa.nulls(len(headers), HEADERS_TYPE)
    offsets, keys, values = [0], [], []
    for pairs in headers:
        for key, value in pairs or ():
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
    entries = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], names=["key", "value"]
    )
    mask = pa.array([h is None for h in headers])
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), entries, type=HEADERS_TYPE, mask=mask
    )
