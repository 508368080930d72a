"""Transactional spouts (seed 002): the same batch for the same transaction id.

Three interfaces, as in Storm; kstorm runs each as a Spark streaming source (the spout's
coordinator and, for partitioned spouts, its emitter in Spark's long-lived source process on
the driver; a coordinated spout's emitters in Spark's read tasks), and keeps the
transactional metadata in Spark's offset log and with the sinks' records (no ZooKeeper):

- :class:`ITransactionalSpout`: a coordinator decides each transaction's metadata
  (``initialize_transaction(txid, prev_metadata)``); ``parallelism`` emitter tasks each emit
  their part of the batch from it (``emit_batch(tx, metadata, collector)``). A replay gets
  the same metadata, so the emitters must emit the same batch.
- :class:`IPartitionedTransactionalSpout`: per partition, ``emit_partition_batch_new(tx,
  collector, partition, last_partition_meta)`` emits a new batch and returns its metadata;
  a replay calls ``emit_partition_batch(tx, collector, partition, partition_meta)``, which
  must emit the identical batch. kstorm keeps each partition's metadata.
- :class:`IOpaquePartitionedTransactionalSpout`: per partition, ``emit_partition_batch(tx,
  collector, partition, last_partition_meta)`` emits a batch and returns its metadata; a
  replay calls it again with the same ``last_partition_meta`` and may get a different batch
  (a partition gone, records deleted): sinks in opaque mode keep results exact.

:class:`MemoryTransactionalSpout` (seed 002's example spout) reads an in-memory partitioned
source; :class:`OpaqueMemoryTransactionalSpout` is its opaque twin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from kstorm.component import Component, OutputFieldsDeclarer, TopologyContext
from kstorm.errors import TopologyError
from kstorm.transactional.attempt import TransactionAttempt
from kstorm.tuple import Fields

if TYPE_CHECKING:
    from kstorm.transactional.bolt import BatchOutputCollector


class _TransactionalSpout(Component):
    is_spout: ClassVar[bool] = True
    source_kind: ClassVar[str] = "transactional"
    transactional_kind: ClassVar[str] = ""


# -- ITransactionalSpout ---------------------------------------------------------------------


class TransactionalCoordinator:
    """Decides each transaction's metadata (one instance, on the driver)."""

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        """The metadata of transaction ``txid`` (``prev_metadata``: the previous one's)."""
        msg = f"{type(self).__name__} must implement initialize_transaction(txid, prev)"
        raise NotImplementedError(msg)

    def is_ready(self) -> bool:
        """Whether a new transaction may start now."""
        return True

    def close(self) -> None:
        """The topology stops."""


class TransactionalEmitter:
    """Emits one task's part of a batch from its metadata (in Spark's read tasks).

    kstorm makes an emitter for one task and one batch: :meth:`cleanup_before` first (once
    a transaction has committed), then :meth:`emit_batch`, then :meth:`close`.
    """

    def emit_batch(self, tx: TransactionAttempt, coordinator_meta: Any,
                   collector: BatchOutputCollector) -> None:
        """Emit the batch of ``tx`` described by ``coordinator_meta``."""
        msg = f"{type(self).__name__} must implement emit_batch(tx, meta, collector)"
        raise NotImplementedError(msg)

    def cleanup_before(self, txid: int) -> None:
        """Transaction ``txid`` (the newest known) and all before it committed.

        Drop what was kept to replay them (Storm's ``cleanupBefore``).
        """

    def close(self) -> None:
        """The task is done."""


class ITransactionalSpout(_TransactionalSpout):
    """A coordinator plus emitters (Storm ``ITransactionalSpout``)."""

    transactional_kind: ClassVar[str] = "coordinated"

    def get_coordinator(self, conf: dict[str, Any], context: TopologyContext
                        ) -> TransactionalCoordinator:
        """The coordinator (created once, on the driver)."""
        raise NotImplementedError

    def get_emitter(self, conf: dict[str, Any], context: TopologyContext
                    ) -> TransactionalEmitter:
        """An emitter for task ``context.task_index`` (in a read task)."""
        raise NotImplementedError


# -- IPartitionedTransactionalSpout ----------------------------------------------------------


class PartitionedCoordinator:
    """How many partitions there are, and whether a new transaction may start."""

    def number_partitions(self) -> int:
        """The number of partitions."""
        raise NotImplementedError

    def is_ready(self) -> bool:
        """Whether a new transaction may start now."""
        return True

    def close(self) -> None:
        """The topology stops."""


class PartitionedEmitter:
    """Emits a partition's batch, new or replayed."""

    def emit_partition_batch_new(self, tx: TransactionAttempt,
                                 collector: BatchOutputCollector, partition: int,
                                 last_partition_meta: Any) -> Any:
        """Emit the next batch of ``partition`` after ``last_partition_meta``; return its meta."""
        raise NotImplementedError

    def emit_partition_batch(self, tx: TransactionAttempt, collector: BatchOutputCollector,
                             partition: int, partition_meta: Any) -> None:
        """Emit again exactly the batch ``partition_meta`` describes (a replay)."""
        raise NotImplementedError

    def close(self) -> None:
        """The spout stops."""


class IPartitionedTransactionalSpout(_TransactionalSpout):
    """Batches from partitions, replayable per partition (Storm's partitioned spout)."""

    transactional_kind: ClassVar[str] = "partitioned"

    def get_coordinator(self, conf: dict[str, Any], context: TopologyContext
                        ) -> PartitionedCoordinator:
        """The coordinator."""
        raise NotImplementedError

    def get_emitter(self, conf: dict[str, Any], context: TopologyContext
                    ) -> PartitionedEmitter:
        """The emitter."""
        raise NotImplementedError


# -- IOpaquePartitionedTransactionalSpout ----------------------------------------------------


class OpaqueCoordinator:
    """Whether a new transaction may start."""

    def is_ready(self) -> bool:
        """Whether a new transaction may start now."""
        return True

    def close(self) -> None:
        """The topology stops."""


class OpaqueEmitter:
    """Emits a partition's batch after ``last_partition_meta`` (a replay may differ)."""

    def emit_partition_batch(self, tx: TransactionAttempt, collector: BatchOutputCollector,
                             partition: int, last_partition_meta: Any) -> Any:
        """Emit a batch of ``partition`` after ``last_partition_meta``; return its meta."""
        raise NotImplementedError

    def number_partitions(self) -> int:
        """The number of partitions."""
        raise NotImplementedError

    def close(self) -> None:
        """The spout stops."""


class IOpaquePartitionedTransactionalSpout(_TransactionalSpout):
    """Partitioned batches that may change on replay (Storm's opaque partitioned spout)."""

    transactional_kind: ClassVar[str] = "opaque"

    def get_coordinator(self, conf: dict[str, Any], context: TopologyContext
                        ) -> OpaqueCoordinator:
        """The coordinator."""
        raise NotImplementedError

    def get_emitter(self, conf: dict[str, Any], context: TopologyContext) -> OpaqueEmitter:
        """The emitter."""
        raise NotImplementedError


# -- in-memory spouts (seed 002's example) ---------------------------------------------------


def _partitions(data: Mapping[int, Sequence[Sequence[Any]]] | Sequence[Sequence[Sequence[Any]]],
                fields: Fields) -> dict[int, list[list[Any]]]:
    items = data.items() if isinstance(data, Mapping) else enumerate(data)
    out: dict[int, list[list[Any]]] = {}
    for partition, rows in items:
        out[int(partition)] = [list(row) for row in rows]
        for row in out[int(partition)]:
            if len(row) != len(fields):
                msg = (f"memory transactional spout: partition {partition} has a row of "
                       f"{len(row)} values, fields are {fields.to_list()}: {row!r}")
                raise TopologyError(msg)
    if sorted(out) != list(range(len(out))):
        msg = f"memory transactional spout: partitions must be 0..n-1, got {sorted(out)}"
        raise TopologyError(msg)
    return out


class _MemoryEmitter(PartitionedEmitter, OpaqueEmitter):
    def __init__(self, data: dict[int, list[list[Any]]], take: int) -> None:
        self.data, self.take = data, take

    def _emit(self, tx: TransactionAttempt, collector: BatchOutputCollector, partition: int,
              start: int, amount: int) -> None:
        for row in self.data[partition][start:start + amount]:
            collector.emit([tx, *row])

    def emit_partition_batch_new(self, tx: TransactionAttempt,
                                 collector: BatchOutputCollector, partition: int,
                                 last_partition_meta: Any) -> dict[str, int]:
        start = 0 if last_partition_meta is None else (last_partition_meta["index"]
                                                       + last_partition_meta["amount"])
        amount = max(0, min(self.take, len(self.data[partition]) - start))
        self._emit(tx, collector, partition, start, amount)
        return {"index": start, "amount": amount}

    def emit_partition_batch(self, tx: TransactionAttempt, collector: BatchOutputCollector,
                             partition: int, partition_meta: Any) -> Any:
        if self._opaque:
            return self.emit_partition_batch_new(tx, collector, partition, partition_meta)
        self._emit(tx, collector, partition, partition_meta["index"], partition_meta["amount"])
        return partition_meta

    _opaque = False

    def number_partitions(self) -> int:
        return len(self.data)


class _MemoryCoordinator(PartitionedCoordinator, OpaqueCoordinator):
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def number_partitions(self) -> int:
        return self.partitions


class MemoryTransactionalSpout(IPartitionedTransactionalSpout):
    """Seed 002's ``MemoryTransactionalSpout``: an in-memory partitioned source.

    Args:
        data: per partition (a dict ``{0: rows, 1: rows...}`` or a list of partitions), its
            rows; each row has one value per field.
        fields: the fields of a row; the spout emits ``("tx", *fields)``, the
            :class:`TransactionAttempt` first, as Storm's does.
        max_per_partition: at most this many rows of a partition per batch.

    Example:
        >>> spout = MemoryTransactionalSpout({0: [["a"], ["b"]], 1: [["c"]]}, Fields("word"), 1)
    """

    tx_field = "tx"

    def __init__(self, data: Mapping[int, Sequence[Sequence[Any]]] | Sequence[Any],
                 fields: Fields, max_per_partition: int) -> None:
        if isinstance(max_per_partition, bool) or not isinstance(max_per_partition, int) \
                or max_per_partition < 1:
            msg = f"max_per_partition must be an int >= 1, got {max_per_partition!r}"
            raise TopologyError(msg)
        self.fields = fields
        self.data = _partitions(data, fields)
        self.max_per_partition = max_per_partition

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``tx`` then the data's fields."""
        declarer.declare(Fields(self.tx_field, *self.fields))

    def get_coordinator(self, conf: dict[str, Any], context: TopologyContext
                        ) -> _MemoryCoordinator:
        """The partitions are the data's."""
        return _MemoryCoordinator(len(self.data))

    def get_emitter(self, conf: dict[str, Any], context: TopologyContext) -> _MemoryEmitter:
        """Emits ``max_per_partition`` rows per partition and batch."""
        return _MemoryEmitter(self.data, self.max_per_partition)


class _OpaqueMemoryEmitter(_MemoryEmitter):
    _opaque = True


class OpaqueMemoryTransactionalSpout(IOpaquePartitionedTransactionalSpout):
    """The opaque twin of :class:`MemoryTransactionalSpout` (same arguments)."""

    tx_field = "tx"

    def __init__(self, data: Mapping[int, Sequence[Sequence[Any]]] | Sequence[Any],
                 fields: Fields, max_per_partition: int) -> None:
        self._inner = MemoryTransactionalSpout(data, fields, max_per_partition)
        self.fields, self.data = self._inner.fields, self._inner.data
        self.max_per_partition = max_per_partition

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``tx`` then the data's fields."""
        declarer.declare(Fields(self.tx_field, *self.fields))

    def get_coordinator(self, conf: dict[str, Any], context: TopologyContext
                        ) -> _MemoryCoordinator:
        """Always ready."""
        return _MemoryCoordinator(len(self.data))

    def get_emitter(self, conf: dict[str, Any], context: TopologyContext
                    ) -> _OpaqueMemoryEmitter:
        """Emits ``max_per_partition`` rows per partition and batch."""
        return _OpaqueMemoryEmitter(self.data, self.max_per_partition)
