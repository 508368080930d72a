"""confluent-kafka helpers shared by the driver and the executors (no Spark here).

Admin (topics, partitions), metadata, *confirmed* end offsets, consumer-group offsets.

Confirmed end offsets: a broker's high watermark is the end of a partition on Apache Kafka,
but the embedded broker (tansu) can report the base offset of the last record batch + 1
instead. :func:`latest_offsets` therefore reads the tail of every partition whose high
watermark moved past what is already known, and takes the offset the consumer reaches there.
On Kafka this costs one small fetch per partition that has new data and nothing otherwise.

Driver-side consumers are cached in this module (one per broker, group and settings) and
created on first use, never stored on a pickled object.

Example:
    >>> create_topic("127.0.0.1:9092", "clicks", partitions=4)  # doctest: +SKIP
    >>> spout = KafkaSpout("clicks").with_bootstrap("127.0.0.1:9092")  # doctest: +SKIP
    >>> latest_offsets(driver_consumer(spout.client_config()), {("clicks", 0): 0})  # doctest: +SKIP
    {('clicks', 0): 0}
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from kstorm._kafka.offsets import Offsets, TopicPartition
from kstorm.errors import SourceError
from kstorm.kafka.connection import KafkaConnection, as_connection

log = logging.getLogger("kstorm.kafka")
TAIL_TIMEOUT = 2.0  # seconds a tail read may take before its answer is used as is
TAIL_CHASE = 0.1  # seconds a tail read follows a partition after its first answer (see below)
_CACHE: dict[tuple[tuple[str, str], ...], Consumer] = {}
_KNOWN_ENDS: dict[tuple[str, str, int], int] = {}  # ends seen as end of partition
_SEEN_ENDS: dict[tuple[str, str, int], int] = {}  # offsets a read stopped at before the end
_LAST_HIGH: dict[tuple[str, str, int], int] = {}  # the high watermark of the previous answer


def client_config(bootstrap: str | KafkaConnection, extra: Mapping[str, Any] | None = None
                  ) -> dict[str, Any]:
    """Plain client settings for ``bootstrap`` (tests, tools): an admin-role connection."""
    return as_connection(bootstrap).client_config("admin", role_config=extra)


def driver_consumer(where: Mapping[str, Any] | str | KafkaConnection,
                    tuning: Mapping[str, Any] | None = None, group_id: str | None = None
                    ) -> Consumer:
    """The cached driver consumer for these settings.

    ``where``: a client config (``KafkaSpout.client_config(...)``), or brokers / a
    connection, with ``tuning`` and ``group_id`` (a ``group`` consumer when given).
    """
    if isinstance(where, Mapping):
        config = dict(where)
    elif group_id is not None:
        config = as_connection(where).client_config("group", group_id=group_id,
                                                    role_config=tuning)
    else:
        config = as_connection(where).client_config("consumer", role_config=tuning)
    key = config_key(config)
    if key not in _CACHE:
        _CACHE[key] = Consumer(config)
    return _CACHE[key]


def config_key(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable key of client settings, for caches of clients (the logger left out)."""
    return tuple(sorted((k, str(v)) for k, v in config.items() if k != "logger"))


@atexit.register
def close_driver_consumers(bootstrap: str | None = None) -> None:
    """Close the cached driver consumers (also run at interpreter exit).

    ``bootstrap``: only those of these brokers (``bootstrap.servers``), e.g. before the
    brokers stop: a consumer left behind retries them, logging an error for every attempt,
    until the process exits.
    """
    for key in list(_CACHE):
        if bootstrap is not None and dict(key).get("bootstrap.servers") != bootstrap:
            continue
        consumer = _CACHE.pop(key)
        try:
            consumer.close()
        except (KafkaException, RuntimeError):  # already closed or broker gone
            pass


# -- admin --------------------------------------------------------------------------------


def create_topic(bootstrap: str | KafkaConnection, name: str, partitions: int = 1, *,
                 timeout: float = 15.0) -> None:
    """Create ``name`` with ``partitions`` partitions and wait until metadata shows them."""
    admin = AdminClient(client_config(bootstrap))
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)
    try:
        futures[name].result(timeout)
    except KafkaException as exc:
        msg = (f"could not create topic {name!r} with {partitions} partition(s) on "
               f"{as_connection(bootstrap).bootstrap_servers}")
        raise SourceError(msg) from exc
    _await_partitions(admin, name, partitions, timeout)


def add_partitions(bootstrap: str | KafkaConnection, name: str, total: int, *,
                   timeout: float = 15.0) -> None:
    """Grow ``name`` to ``total`` partitions (Apache Kafka; tansu 0.6 cannot)."""
    admin = AdminClient(client_config(bootstrap))
    futures = admin.create_partitions([NewPartitions(name, total)], operation_timeout=timeout)
    try:
        futures[name].result(timeout)
    except KafkaException as exc:
        unsupported = exc.args and exc.args[0].code() == KafkaError._UNSUPPORTED_FEATURE
        hint = " (the broker has no CreatePartitions API, e.g. tansu)" if unsupported else ""
        where = as_connection(bootstrap).bootstrap_servers
        msg = f"could not grow topic {name!r} to {total} partitions on {where}{hint}"
        raise SourceError(msg) from exc
    _await_partitions(admin, name, total, timeout)


def _await_partitions(admin: AdminClient, name: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(timeout=timeout).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) >= count:
            return
        if time.monotonic() > deadline:
            msg = f"topic {name!r}: expected {count} partition(s) in metadata, got {topic}"
            raise SourceError(msg)
        time.sleep(0.05)


# -- metadata and offsets -----------------------------------------------------------------


def partitions_of(
    consumer: Consumer, subscribes: Callable[[str], bool], timeout: float = 10.0
) -> list[TopicPartition]:
    """The partitions of every existing topic ``subscribes`` accepts, sorted."""
    try:
        metadata = consumer.list_topics(timeout=timeout)
    except KafkaException as exc:
        msg = "kafka spout: could not fetch topic metadata from the brokers"
        raise SourceError(msg) from exc
    return sorted(
        (name, partition)
        for name, topic in metadata.topics.items()
        if topic.error is None and subscribes(name)
        for partition in topic.partitions
    )


def watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartition], timeout: float = 10.0
) -> dict[TopicPartition, tuple[int, int]]:
    """``(low, high)`` watermark of each partition, as the broker reports them."""
    marks: dict[TopicPartition, tuple[int, int]] = {}
    for topic, partition in partitions:
        try:
            marks[(topic, partition)] = consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=timeout
            )
        except KafkaException as exc:
            msg = f"kafka spout: could not read the offsets of {topic}[{partition}]"
            raise SourceError(msg) from exc
    return marks


def latest_offsets(
    consumer: Consumer,
    high: Mapping[TopicPartition, int],
    known: Mapping[TopicPartition, int] | None = None,
    *,
    bootstrap: str = "",
    clock: Callable[[], float] = time.monotonic,
    chase: float = TAIL_CHASE,
    every_tail: bool = False,
) -> Offsets:
    """Confirmed end offsets: the high watermark, raised to what the tail of each partition shows.

    A partition is read only when its high watermark is above the end an earlier answer for
    the same ``bootstrap`` confirmed. ``known`` (e.g. the batch start) only raises the result:
    a start inside the broker's last record batch is at or above an understated high
    watermark, yet the partition may hold more records after it.

    ``chase``: how long (seconds) a partition's tail is followed after its first records
    arrive. A partition being written to has no end to reach: following it costs the whole
    ``TAIL_TIMEOUT`` and what arrives meanwhile goes to the next batch anyway. A partition
    whose high watermark moved since the previous answer is being written to: it is not
    followed at all (its first answer, the broker's last record batch when asked, is taken),
    which spares up to ``chase`` per busy partition and batch (the embedded broker answers a
    fetch with one record batch, and a busy partition always has another). A read cut short
    still answers (those records exist) but confirms nothing: only an end reached (end of
    partition) is remembered as confirmed, so the next call reads that partition again, on
    from where this one stopped, even if the broker's high watermark stays short.
    An available-now target and a start at latest pass ``chase=TAIL_TIMEOUT`` and
    ``every_tail`` (read every tail to its end, now).
    """
    ends: Offsets = {}
    to_read: list[KafkaTopicPartition] = []
    moving: set[TopicPartition] = set()  # being written to: not followed
    for (topic, partition), hw in high.items():
        where = (bootstrap, topic, partition)
        confirmed = _KNOWN_ENDS.get(where, 0)
        seen = _SEEN_ENDS.get(where, 0)
        before = _LAST_HIGH.get(where)
        _LAST_HIGH[where] = hw
        floor = max((known or {}).get((topic, partition), 0), confirmed, seen)
        ends[(topic, partition)] = max(hw, floor)
        if max(hw, seen) > confirmed:  # read on from what is known to exist
            to_read.append(KafkaTopicPartition(topic, partition, max(hw, floor) - 1))
            if not every_tail and before is not None and hw > before:
                moving.add((topic, partition))
    reached: set[TopicPartition] = set(ends) - {(tp.topic, tp.partition) for tp in to_read}
    if to_read:
        found, at_end = _read_tails(consumer, to_read, ends, clock, chase, moving)
        ends.update(found)
        reached |= at_end
    for key, end in ends.items():
        where = (bootstrap, *key)
        if key in reached:
            _KNOWN_ENDS[where] = end
            _SEEN_ENDS.pop(where, None)
        else:
            _SEEN_ENDS[where] = end
    return ends


def _read_tails(
    consumer: Consumer,
    tails: list[KafkaTopicPartition],
    ends: Offsets,
    clock: Callable[[], float],
    chase: float,
    moving: Collection[TopicPartition] = (),
) -> tuple[Offsets, set[TopicPartition]]:
    """What each tail shows, and which partitions were read to their end.

    ``moving``: partitions not followed after their first answer.
    """
    found = {(tp.topic, tp.partition): ends[(tp.topic, tp.partition)] for tp in tails}
    pending = set(found)
    at_end: set[TopicPartition] = set()
    answered: dict[TopicPartition, float] = {}
    deadline = clock() + TAIL_TIMEOUT
    consumer.assign(tails)
    try:
        while pending and clock() < deadline:
            for msg in consumer.consume(1000, 0.01):
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                if topic is None or partition is None or offset is None:
                    continue  # a client-wide event, not about one partition
                key = (topic, partition)
                error = msg.error()
                if error is None:
                    found[key] = max(found[key], offset + 1)
                    answered.setdefault(key, clock())
                elif error.code() == KafkaError._PARTITION_EOF:
                    found[key] = max(found[key], offset)
                    pending.discard(key)
                    at_end.add(key)
                else:
                    log.warning("kafka spout: tail read of %s[%s]: %s", *key, error)
                    pending.discard(key)
            now = clock()
            pending -= {key for key, since in answered.items()
                        if key in moving or now - since >= chase}
    finally:
        consumer.unassign()
    if len(at_end) < len(found):
        log.debug("kafka spout: tail read stopped before the end of %s; using %s",
                  sorted(set(found) - at_end), found)
    return found, at_end


def committed_offsets(
    consumer: Consumer, partitions: Iterable[TopicPartition], timeout: float = 10.0
) -> dict[TopicPartition, int | None]:
    """The offsets the consumer's group committed (``None`` where it has none)."""
    request = [KafkaTopicPartition(t, p) for t, p in partitions]
    try:
        answer = consumer.committed(request, timeout=timeout) if request else []
    except KafkaException as exc:
        msg = "kafka spout: could not read the consumer group's committed offsets"
        raise SourceError(msg) from exc
    return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in answer}


def commit_offsets(consumer: Consumer, offsets: Mapping[TopicPartition, int]) -> bool:
    """Commit ``offsets`` for the consumer's group without joining it; log failures.

    Returns whether every partition was committed. Never raises: lag monitoring must not
    stop a topology.
    """
    request = [KafkaTopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    if not request:
        return True
    try:
        answer = consumer.commit(offsets=request, asynchronous=False) or []
    except KafkaException as exc:
        log.warning("kafka spout: committing group offsets failed: %s", exc)
        return False
    failed = [tp for tp in answer if tp.error is not None]
    for tp in failed:
        log.warning("kafka spout: commit of %s[%s] failed: %s", tp.topic, tp.partition, tp.error)
    return not failed
