"""Read one offset range of one partition into Arrow record batches (runs on executors).

``read_range`` is what a Spark read task does: assign the partition at the range start,
consume until the range end (exclusive), and turn each chunk of records into one
``pyarrow.RecordBatch`` with :meth:`KafkaSpout.arrow_schema`. A process keeps the consumer
of a range it read to the end (:class:`ConsumerPool`): the next batch's range of that
partition starts where it stopped, so the next read reuses its connection and the records
it already prefetched. Values are deserialized a chunk
at a time with ``Serde.deserialize_batch``; columns are built from lists, with no per-record
Python object beyond the client's own message.

The same range always gives the same rows (replay determinism): records below ``start`` or at
``end`` and beyond are dropped; a range that cannot be read fully is an error, never a
shorter batch.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kstorm._kafka.offsets import OffsetRange
from kstorm.errors import SourceError
from kstorm.kafka_spout import HEADERS_TYPE, KafkaSpout
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
_READ_TUNING = {"fetch.wait.max.ms": "100", "max.partition.fetch.bytes": "1048576",
                "queued.max.messages.kbytes": "1024", "fetch.queue.backoff.ms": "5"}


class ConsumerPool:
    """Consumers of finished reads, kept for the next read of the same partition.

    A new consumer costs a read task ~10 ms (connect, first fetch, close: 8 + 2.5 ms on the
    embedded broker), a batch of 5,000 records per partition ~15 ms in all; and a consumer
    closed at the range end throws away the records it prefetched, which are the next
    batch's first ones. :meth:`take` gives the kept consumer of ``(client config, topic,
    partition)`` when it stopped at ``start`` (or up to :data:`REUSE_GAP` offsets before it:
    the records in between are dropped as below the range, e.g. a transaction marker),
    re-assigned at ``start`` otherwise, or a new one. :meth:`give_back` keeps a consumer
    whose read ended normally (a failed or abandoned read closes its consumer): at most
    ``size`` per process, least recently used first out, none idle for more than
    ``idle_s`` (a kept consumer goes on prefetching, at most ``queued.max.messages.kbytes``,
    and polling its broker: a daemon thread closes it once idle, e.g. after its topology
    stopped). Thread-safe: a consumer is out of the pool while a read uses it.
    """

    REUSE_GAP = 64

    def __init__(self, size: int = 8, idle_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.size, self.idle_s, self._clock = size, idle_s, clock
        self._lock = threading.Lock()
        self._idle: OrderedDict[tuple[Any, ...], tuple[Consumer, float]] = OrderedDict()
        self._reaper_pid = 0  # the process whose reaper thread runs (none after a fork)
        self.created = self.reused = 0

    def take(self, config: dict[str, Any], topic: str, partition: int,
             start: int) -> tuple[tuple[Any, ...], Consumer]:
        """A consumer assigned ``topic[partition]`` whose next record is ``start``'s."""
        key = (_config_key(config), topic, partition)
        with self._lock:
            stale = self._evict(self.size)
            entry = self._idle.pop(key, None)
        _close_all(stale)
        where = KafkaTopicPartition(topic, partition, start)
        if entry is not None:
            consumer = entry[0]
            try:
                position = consumer.position([KafkaTopicPartition(topic, partition)])[0].offset
                if not 0 <= start - position <= self.REUSE_GAP:
                    consumer.assign([where])
                self.reused += 1
                return key, consumer
            except KafkaException as exc:
                log.debug("kafka spout: a kept consumer of %s[%s] failed (%s); a new one",
                          topic, partition, exc)
                _close_all([consumer])
        consumer = Consumer(config)
        consumer.assign([where])
        self.created += 1
        return key, consumer

    def give_back(self, key: tuple[Any, ...], consumer: Consumer) -> None:
        """Keep ``consumer`` (its read ended at its range end) for the next read."""
        with self._lock:
            self._idle[key] = (consumer, self._clock())
            stale = self._evict(self.size)
            if self._reaper_pid != os.getpid():
                self._reaper_pid = os.getpid()
                threading.Thread(target=self._reap, name="kstorm-consumer-reaper",
                                 daemon=True).start()
        _close_all(stale)

    def _reap(self) -> None:
        while True:
            time.sleep(self.idle_s / 2)
            with self._lock:
                stale = self._evict(self.size)
            _close_all(stale)

    def close(self) -> None:
        """Close every kept consumer (at exit; tests)."""
        with self._lock:
            stale = self._evict(0)
        _close_all(stale)

    def _evict(self, keep: int) -> list[Consumer]:
        """Remove (under the lock) what is over ``keep`` or idle too long; close outside."""
        now = self._clock()
        out = [self._idle.pop(k)[0] for k, (_, at) in list(self._idle.items())
               if now - at > self.idle_s]
        while len(self._idle) > keep:
            out.append(self._idle.popitem(last=False)[1][0])
        return out


def _config_key(config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in config.items()))


def _close_all(consumers: list[Consumer]) -> None:
    for consumer in consumers:
        try:
            consumer.close()
        except (KafkaException, RuntimeError):  # already closed, or the client is broken
            pass


CONSUMERS = ConsumerPool()
atexit.register(CONSUMERS.close)


def read_range(
    spout: KafkaSpout,
    task: OffsetRange,
    *,
    chunk_rows: int = CHUNK_ROWS,
    clock: Callable[[], float] = time.monotonic,
    pool: ConsumerPool | None = CONSUMERS,
) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[task.start, task.end)`` of one partition as record batches.

    Every batch but the last has ``chunk_rows`` rows, so the batches of a range are the same
    on every read. Raises :class:`SourceError` naming the range if it cannot be read fully:
    records deleted by retention, an unknown partition, or no progress for
    ``spout.read_timeout`` seconds. An opaque spout (``KafkaSpout(opaque=True)``) yields
    what is left of a range whose records were deleted or whose partition is gone.
    ``pool``: where the consumer comes from and goes back to (None: a consumer of its own,
    closed at the end).
    """
    if task.size <= 0:
        return
    config = spout.client_config("consumer", tuning=_READ_TUNING)
    if pool is None:
        key, consumer = (), Consumer(config)
        consumer.assign([KafkaTopicPartition(task.topic, task.partition, task.start)])
    else:
        key, consumer = pool.take(config, task.topic, task.partition, task.start)
    finished = False
    try:
        pending: list[Message] = []
        for messages in _consume(consumer, spout, task, clock):
            pending.extend(messages)
            while len(pending) >= chunk_rows:
                yield to_record_batch(spout, task.topic, task.partition, pending[:chunk_rows])
                del pending[:chunk_rows]
        if pending:
            yield to_record_batch(spout, task.topic, task.partition, pending)
        finished = True
    finally:
        if finished and pool is not None:
            pool.give_back(key, consumer)
        else:
            _close_all([consumer])


def _consume(
    consumer: Consumer, spout: KafkaSpout, task: OffsetRange, clock: Callable[[], float]
) -> Iterator[list[Message]]:
    """Lists of messages of the range, in offset order, until the end is reached."""
    position = task.start
    progress_at = clock()
    while position < task.end:
        wanted = min(task.end - position, CHUNK_ROWS)
        got = consumer.consume(wanted, spout.poll_timeout)
        records = [m for m in got if m.error() is None]
        if len(records) != len(got) and _check_errors(got, task, position,
                                                      opaque=spout.opaque):
            resumed = _skip_deleted(consumer, task, position)
            if resumed is None:
                return
            position, progress_at = resumed, clock()
            continue
        if records:
            first, last = _offset(records[0]), _offset(records[-1])
            if first < task.start or last >= task.end:  # trim to the range (rare)
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
