"""``KafkaSink``: writes each batch's tuples to a Kafka topic in one Kafka transaction.

Attach it like a bolt; the kstorm runtime calls it on the driver in the ordered commit phase
of each micro-batch (txid = the checkpoint's txid base + Spark batch id)::

    builder.set_bolt("out", KafkaSink("word-counts", key="word")).shuffle_grouping("count")

Readers with ``isolation.level=read_committed`` see every output record exactly once, however
often the topology is killed and restarted (see :meth:`KafkaSink.commit`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from confluent_kafka import TopicPartition

from kstorm.errors import ConfigError, SinkError
from kstorm.failpoints import pause_after_commit, pause_before_commit
from kstorm.kafka.connection import KafkaConnection
from kstorm.sink import BaseSink, CommitRecord, SinkBatch, SinkContext
from serdes.base import Serde
from serdes.json import JsonSerde

from . import _txn
from ._book import (
    check_topic_name,
    commit_record,
    marker_offset,
    sink_name,
    state_records,
    txid_of_marker,
)
from ._read import create_book_topic, read_group_offsets, read_state, require_topic
from ._records import KeySpec, RecordEncoder, check_key

log = logging.getLogger("kstorm.sinks.kafka")


class KafkaSink(BaseSink):
    """An exactly-once Kafka sink: each batch is one Kafka transaction.

    One transactional producer per sink, not one per Spark partition: the commit phase runs
    on the driver, once per batch and in batch order, and a Kafka transaction may span every
    partition of the output topic, so one producer writes the whole batch atomically. Its
    ``transactional.id`` is stable (``kstorm.<topology>.<sink>``), so the driver of a
    restarted topology calls ``init_transactions()`` with the same id, which aborts whatever
    the dead driver left open and fences it: a zombie that is still running fails on its next
    write instead of committing.

    Each batch's transaction also commits, in the sink's consumer group (same name), the
    batch's source end offsets and the batch's txid, so a replayed batch that already
    committed is skipped, and a topology whose checkpoint is lost resumes from these
    offsets (``committed_offsets``). The runtime's window state goes to the sink's
    bookkeeping topic (same name, compacted) in the same transaction. See ``_book.py``.

    Args:
        topic: The output topic (must exist).
        bootstrap_servers: Brokers; default ``kafka.bootstrap.servers`` from the topology conf.
        connection: A :class:`kstorm.KafkaConnection` (brokers and security) to use instead of
            the topology's; ``bootstrap_servers`` and the security settings in
            ``producer_config`` still apply on top. Every client of the sink (the producer,
            its group consumer, the admin client) uses it.
        value_serde: Any ``serdes`` serde; default ``JsonSerde()``: a JSON object of the fields.
        key: Field whose value is the record key, a function ``tuple -> bytes | str | None``,
            or None. Records with equal keys go to one partition (the Java client's murmur2
            partitioner, unless ``producer_config`` sets ``partitioner``).
        fields: The tuple fields to serialize (default: all, in the tuple's order).
        producer_config: Extra librdkafka producer settings (not the reserved ones).
        transactional_id: Overrides ``kstorm.<topology>.<sink>``; keep it stable across
            restarts, and unique per running sink.
        timeout_s: How long one Kafka call may keep retrying before the batch fails.

    Example:
        >>> sink = KafkaSink("word-counts", key="word",
        ...                  value_serde=JsonSerde({"word": str, "count": int}))
        >>> sink.records_offsets
        True
    """

    records_offsets = True  # offsets and the runtime's state go in the batch's transaction

    def __init__(self, topic: str, *, bootstrap_servers: str | None = None,
                 value_serde: Serde | None = None, key: KeySpec = None,
                 fields: Sequence[str] | None = None,
                 producer_config: Mapping[str, Any] | None = None,
                 transactional_id: str | None = None, timeout_s: float = 60.0,
                 connection: KafkaConnection | None = None) -> None:
        where = f"KafkaSink({topic!r})"
        self.topic = check_topic_name("topic", topic, "KafkaSink")
        if bootstrap_servers is not None and (not isinstance(bootstrap_servers, str)
                                              or not bootstrap_servers.strip()):
            msg = f"{where}: bootstrap_servers must be 'host:port[,...]' or None, " \
                  f"got {bootstrap_servers!r}"
            raise ConfigError(msg)
        serde = JsonSerde() if value_serde is None else value_serde
        if not isinstance(serde, Serde):
            msg = f"{where}: value_serde must be a serdes serde (fields(), serialize(), ...), " \
                  f"got {type(serde).__name__}"
            raise ConfigError(msg)
        if connection is not None and not isinstance(connection, KafkaConnection):
            msg = f"{where}: connection must be a kstorm.KafkaConnection, got {connection!r}"
            raise ConfigError(msg)
        self.bootstrap_servers = bootstrap_servers
        self.connection = connection
        self.value_serde = serde
        self.key = check_key(key, where)
        self.producer_config = _check_producer_config(producer_config, where)
        self.transactional_id = None if transactional_id is None else check_topic_name(
            "transactional_id", transactional_id, where)
        if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            msg = f"{where}: timeout_s must be a positive number of seconds, got {timeout_s!r}"
            raise ConfigError(msg)
        self.timeout_s = float(timeout_s)
        self.encoder = RecordEncoder(serde, key=self.key, fields=fields, where=where)
        self.fields = self.encoder.fields
        self.name: str | None = self.transactional_id  # set by open()
        self._connection: KafkaConnection | None = None  # set by open()
        self._open_txid: int | None = None  # the transaction begun and not ended yet
        self._producer: Any = None
        self._consumer: Any = None
        self._broken: str | None = None  # why this instance refuses to commit

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_producer": None, "_consumer": None}

    def __repr__(self) -> str:
        return f"KafkaSink({self.topic!r}, name={self.name!r})"

    # -- the kstorm sink protocol (driver, commit phase) ----------------------------------

    def needed_fields(self) -> tuple[str, ...]:
        """The key field and the listed value fields (a key function reads what it likes)."""
        names = [self.key] if isinstance(self.key, str) else []
        return tuple(dict.fromkeys([*names, *(self.fields or ())]))

    def open(self, context: SinkContext) -> None:
        """Check the output topic, create the bookkeeping topic if needed, then the producer.

        The connection is the sink's own (``connection=``) or the topology's, with this
        sink's ``bootstrap_servers`` and security settings on top. ``init_transactions()``
        aborts what an earlier instance with the same transactional id left open, and
        fences that instance if it still runs.
        """
        where = repr(self)
        if self.connection is not None:
            self._connection = self.connection.with_overrides(self.bootstrap_servers,
                                                              self.producer_config)
        else:
            self._connection = context.settings.kafka_connection(
                self.bootstrap_servers, self.producer_config, where=where)
        self.name = self.transactional_id or check_topic_name(
            "'kstorm.<topology>.<sink id>'",
            sink_name(context.topology_name, context.component_id), "KafkaSink")
        require_topic(self._connection, self.topic, self.timeout_s, where)
        create_book_topic(self._connection, self.name, self.timeout_s)
        self._connect()

    def _connect(self) -> None:
        name, connection = self._name, self._conn
        producer = _txn.make_producer(connection, name, self.producer_config)
        _txn.call(f"{self!r}: init_transactions", producer.init_transactions, self.timeout_s)
        self._producer = producer
        if self._consumer is None:
            self._consumer = _txn.make_consumer(connection, name)
        self._broken = None
        self._open_txid = None

    def commit(self, batch: SinkBatch) -> None:
        """Write one batch in one transaction (txid = ``batch.txid``).

        1. Refuse if this instance was fenced: a newer one owns the transactional id.
        2. Read the group's marker: a txid at or above this one means the batch committed
           already (a replay after a crash between this commit and Spark's): skip it.
        3. Encode every tuple (a serde error fails the batch before anything is sent).
        4. Begin the transaction; produce the records (partitioned by key), then the
           ``commit`` record and the window state to the bookkeeping topic.
        5. ``send_offsets_to_transaction``: the batch's source end offsets and the marker
           (``txid + 1``), in the sink's group.
        6. Test hook: pause here if ``KSTORM_TEST_PAUSE_IN_COMMIT`` is set
           (``kstorm/failpoints.py``).
        7. ``commit_transaction``: records, offsets and marker become visible at once.

        A failure aborts the transaction and raises SinkError; the batch is replayed under the
        same txid when the topology restarts. Fenced: SinkError saying so, nothing committed.
        """
        txid, ends, tuples, state = batch.txid, batch.offsets, batch.tuples, batch.state
        # Step 1
        if self._broken is not None:
            msg = f"{self!r}: refusing txid {txid} after an earlier failure: {self._broken}"
            raise SinkError(msg)
        if self._producer is None:
            self._connect()
        # Step 2
        committed = self._committed(txid, ends)
        if committed is not None and committed >= txid:
            log.info("%r: txid %s is already committed (marker %s): skipped", self, txid,
                     committed)
            return
        # Step 3
        name = self._name
        records = [self.encoder(t) for t in tuples]
        book = [commit_record(txid, ends), *state_records(txid, state)]
        marker = TopicPartition(name, 0, marker_offset(txid))
        sources = [TopicPartition(t, p, end, metadata=f"kstorm txid={txid}")
                   for t, parts in sorted(ends.items()) for p, end in sorted(parts.items())]
        producer, what = self._producer, f"{self!r} txid {txid}"
        try:
            # Step 4
            producer.begin_transaction()
            self._open_txid = txid
            for key, value in records:
                _txn.produce(producer, self.topic, key, value)
            for key, value, headers in book:
                _txn.produce(producer, name, key, value, headers)
            # Step 5
            _txn.call(f"{what}: send_offsets_to_transaction", lambda left:
                      producer.send_offsets_to_transaction(
                          [*sources, marker], self._consumer.consumer_group_metadata(), left),
                      self.timeout_s)
            # Step 6
            pause_before_commit(f"kafka sink {name} txid {txid}",
                                settle=lambda: producer.flush(self.timeout_s))
        except Exception as exc:  # KafkaCallError, KafkaException from begin/produce, ...
            self._failed(_txn.as_call_error(exc, what), what, committing=False)
        try:
            # Step 7
            _txn.call(f"{what}: commit_transaction", producer.commit_transaction,
                      self.timeout_s)
            self._open_txid = None
        except Exception as exc:
            self._failed(_txn.as_call_error(exc, what), what, committing=True)
        log.debug("%r: committed txid %s: %d records", self, txid, len(records))
        pause_after_commit(f"kafka sink {name} txid {txid}")  # test hook

    def abort(self, batch: SinkBatch) -> None:
        """Abort the transaction of ``batch`` if it is still open (idempotent)."""
        if self._producer is None or self._open_txid != batch.txid:
            return
        try:
            _txn.call(f"{self!r} txid {batch.txid}: abort_transaction",
                      self._producer.abort_transaction, self.timeout_s)
        except _txn.KafkaCallError as exc:
            self._stop(f"txid {batch.txid}: aborting the transaction failed ({exc})")
        finally:
            self._open_txid = None

    @property
    def _name(self) -> str:
        if self.name is None or self._connection is None:
            msg = f"{self!r}: open() it first (the kstorm runtime does)"
            raise SinkError(msg)
        return self.name

    @property
    def _conn(self) -> KafkaConnection:
        if self._connection is None:
            msg = f"{self!r}: open() it first (the kstorm runtime does)"
            raise SinkError(msg)
        return self._connection

    def _committed(self, txid: int, ends: Mapping[str, Mapping[int, int]]) -> int | None:
        """The marker's txid; checks a batch found committed has the offsets it committed."""
        asked = [TopicPartition(self._name, 0)]
        asked += [TopicPartition(t, p) for t, parts in ends.items() for p in parts]
        marker, *rest = _txn.call(f"{self!r}: read the committed offsets",
                                  lambda left: self._consumer.committed(asked, timeout=left),
                                  self.timeout_s)
        last = txid_of_marker(marker.offset if marker.offset >= 0 else None)
        if last == txid:
            found = {(tp.topic, tp.partition): tp.offset for tp in rest}
            wrong = {f"{t}[{p}]": (end, found.get((t, p))) for t, parts in ends.items()
                     for p, end in parts.items() if found.get((t, p)) != end}
            if wrong:
                msg = (f"{self!r}: txid {txid} is committed, but with other source offsets "
                       f"(partition: (this batch's end, committed)): {wrong}; is another "
                       f"topology using transactional id {self.name!r}?")
                raise SinkError(msg)
        return last

    def _failed(self, exc: _txn.KafkaCallError, what: str, *, committing: bool) -> NoReturn:
        """Abort what can be aborted; stop this instance when its producer is unusable."""
        if exc.kind == "fenced":
            self._stop(f"{what}: this sink was fenced: another producer with transactional.id "
                       f"{self.name!r} started after it (a restarted topology?), so this "
                       f"instance is a zombie and must stop; this batch was not committed")
        elif exc.kind == "fatal":
            self._stop(f"{what}: the producer failed and cannot go on; this batch was not "
                       "committed (it is replayed when the topology restarts)")
        elif committing and exc.kind == "retriable":  # commit_transaction ran out of time
            self._stop(f"{what}: commit_transaction got no answer in {self.timeout_s}s, so the "
                       "batch's outcome is unknown (its replay is skipped if it did commit): "
                       "either the brokers are unreachable, or this producer was fenced by a "
                       f"newer one with transactional.id {self.name!r} (tansu answers a fenced "
                       "commit by closing the connection)")
        else:
            try:
                _txn.call(f"{what}: abort_transaction", self._producer.abort_transaction,
                          self.timeout_s)
                self._open_txid = None
            except _txn.KafkaCallError as abort_error:
                self._stop(f"{what} was not committed, and aborting it failed too "
                           f"({abort_error})")
        msg = self._broken or f"{what} was not committed (the batch is replayed): {exc}"
        raise SinkError(f"{msg} [{exc}]" if self._broken else msg) from exc

    def _stop(self, reason: str) -> None:
        """Refuse every later commit: only open() (a restart) makes the sink usable again."""
        self._producer = None
        self._open_txid = None
        self._broken = reason

    def committed_offsets(self) -> CommitRecord | None:
        """``(txid, {topic: {partition: end}})`` committed with the last batch, or None."""
        marker, offsets = read_group_offsets(self._conn, self._name, self.timeout_s)
        txid = txid_of_marker(marker)
        return None if txid is None else CommitRecord(txid, offsets)

    def committed_state(self) -> dict[str, bytes]:
        """The window state committed with the last batch (name -> bytes)."""
        record = self.committed_offsets()
        if record is None:
            return {}
        return read_state(self._conn, self._name, record.txid, self.timeout_s)

    def close(self) -> None:
        """Flush and drop the clients (the sink can be opened again)."""
        if self._producer is not None:
            self._producer.flush(self.timeout_s)
        if self._consumer is not None:
            self._consumer.close()
        self._producer = self._consumer = None


def _check_producer_config(config: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, Mapping) or any(not isinstance(k, str) for k in config):
        msg = f"{where}: producer_config must be a mapping of librdkafka settings, got {config!r}"
        raise ConfigError(msg)
    for key in config:
        if key in _txn.RESERVED:
            msg = f"{where}: producer_config may not set {key!r}; use {_txn.RESERVED[key]}"
            raise ConfigError(msg)
    return dict(config)


__all__ = ["KafkaSink"]
