"""Sinks: the components that commit a batch's results in the ordered commit phase (seed 002).

A sink is attached like a bolt (``builder.set_bolt("store", sink).fields_grouping(...)``)
but runs on the driver, after the batch's processing phase, in strictly increasing txid
order: seed 002's committers. The contract (the sink guide, ``docs/sinks.md``, says it for users):

1. **A declaration.** The object a user builds is pickled and copied; it holds settings only.
   :meth:`BaseSink.open` builds the live client (a connection, a producer) from a
   :class:`SinkContext`, once, on the driver, before the first commit.
2. **One batch value.** :meth:`BaseSink.commit` receives a :class:`SinkBatch`: the txid, the
   tuples addressed to the sink, and the Kafka end offsets the batch read to. The runtime
   computes ``txid = txid base + Spark batch id`` once; txids only grow, also across a lost
   checkpoint, so a sink keyed by txid never confuses two batches.
3. **Idempotent per txid.** A batch can reach ``commit`` again after a crash (the sink
   committed, Spark had not recorded it). Writing with the txid and skipping a txid already
   written (or recomputing from the value before it, seed 002's opaque rule) keeps the
   output exact. ``abort`` is called when the batch fails after ``commit`` was called, so a
   sink with an open transaction can drop it; it must be idempotent too.
4. **Records for reconcile** (optional, ``records_offsets = True``): the sink stores
   ``batch.offsets``, the txid and ``batch.state`` (the runtime's state after the batch:
   open windows, window snapshots, un-acked offsets) *in the same atomic step* as its values,
   and answers :meth:`BaseSink.committed_offsets` / :meth:`BaseSink.committed_state` on
   start. When the checkpoint is lost or behind, the topology resumes from that record.
5. **Carrying the states** (optional, :meth:`BaseSink.accepts_states`): a sink that can
   commit the state provider's task states in its own atomic step (a RedisSink on the Redis
   server of ``topology.state.provider = redis``) gets them as ``batch.states``; the first
   sink that accepts carries them, and the values, the record and the states then commit
   together. Otherwise the driver commits the states after the sinks (seed 000's order,
   reconciled at start).
6. **Columns** (optional, ``accepts_table = True``): when a sink's whole input is the
   closed windows of one built-in windowed aggregate, the runtime may hand them over as
   Arrow columns (``batch.table``, named by the output fields) with ``batch.tuples`` empty,
   instead of a Python tuple per window.
7. **Combining at the source** (optional, :meth:`BaseSink.combine`): a sink whose commit
   only folds its tuples per key with an order-free fold (a sum, a max) may fold each
   task's tuples in the executor, before they travel to the driver, as Trident combines
   partial aggregates before a ``persistentAggregate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from kstorm.component import Component, OutputFieldsDeclarer
from kstorm.tuple import Fields, Tuple

if TYPE_CHECKING:
    import pyarrow as pa

    from kstorm.config import TopologyConfig
    from kstorm.kafka.connection import KafkaConnection

Offsets = dict[str, dict[int, int]]
"""``{topic: {partition: end offset (exclusive)}}``."""


class CommitRecord(NamedTuple):
    """What a recording sink last committed: its txid and the source end offsets."""

    txid: int
    offsets: Offsets


@dataclass(frozen=True)
class SinkContext:
    """What :meth:`BaseSink.open` gets: where the sink runs and the topology's settings.

    Attributes:
        topology_name: the topology's name (sinks name their bookkeeping after it).
        component_id: the sink's id in the topology.
        settings: the validated topology configuration.
        conf: the configuration as the user gave it, with the component's own keys
            (Storm style; ``user.*`` keys included).
        kafka: the topology's Kafka connection (``kafka.*`` keys), if it has one; a Kafka
            sink puts its own brokers/security on top (``KafkaConnection.with_overrides``).
    """

    topology_name: str
    component_id: str
    settings: TopologyConfig
    conf: Mapping[str, Any] = field(default_factory=dict)
    kafka: KafkaConnection | None = None


@dataclass(frozen=True)
class SinkBatch:
    """One batch for one sink (see the module docstring).

    Attributes:
        txid: the transaction id: the same for every replay of the batch, strictly growing,
            never reused (also after a lost checkpoint).
        batch_id: Spark's batch id (``txid - batch_id`` is the checkpoint's txid base).
        tuples: the tuples addressed to this sink in this batch, in arrival order (made
            when first read: :meth:`values_by_fields` gives their values without them).
        offsets: the Kafka end offsets the batch read to, ``{topic: {partition: end}}``.
        state: the runtime's state after this batch (name -> bytes); a sink with
            ``records_offsets`` stores it atomically with the offsets.
        attempt: 0 for the first attempt of this txid in this process, then 1, 2, ...
        states: the state provider's commit of this txid when this sink said it carries it
            (``accepts_states(states)``: a ``kstorm.state.redis.StateCommit``); the sink
            then applies it in the same atomic step as its values, or raises.
        table: only for a sink with ``accepts_table``: its tuples as Arrow columns named
            by their fields (``tuples`` is then empty), or None.
    """

    txid: int
    batch_id: int
    tuples: list[Tuple]
    offsets: Offsets = field(default_factory=dict)
    state: Mapping[str, bytes] = field(default_factory=dict)
    attempt: int = 0
    states: Any = None
    table: pa.Table | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tuples, UnmadeTuples):  # made on first use (__getattr__)
            object.__setattr__(self, "_unmade", self.tuples)
            object.__delattr__(self, "tuples")

    def __getattr__(self, name: str) -> Any:
        unmade = self.__dict__.get("_unmade")
        if name != "tuples" or unmade is None:
            raise AttributeError(name)
        made = unmade.make()
        object.__setattr__(self, "tuples", made)
        return made

    @property
    def size(self) -> int:
        """How many tuples the batch holds (as tuples or as table rows)."""
        if self.table is not None:
            return self.table.num_rows
        if "tuples" not in self.__dict__:
            return self.__dict__["_unmade"].size
        return len(self.tuples)

    def values_by_fields(self) -> tuple[tuple[str, ...], list[list[Any]]] | None:
        """``(field names, each tuple's values)`` when every tuple has those fields, or None.

        For a sink that reads values only: where the runtime has not made the batch's
        :class:`Tuple` objects yet (the packed rows of the processing phase), none is made.
        """
        if "tuples" not in self.__dict__:
            found = self.__dict__["_unmade"].values_by_fields()
            if found is not None:
                return found
        tuples = self.tuples
        if not tuples:
            return None
        first = tuples[0].fields
        names = first.names
        if not all(t.fields is first or t.fields.names == names for t in tuples):
            return None
        return tuple(names), [t.values for t in tuples]

    @property
    def first_of_lineage(self) -> bool:
        """Whether no earlier txid exists for this sink's record (batch 0 of a checkpoint)."""
        return self.batch_id == 0


@dataclass(frozen=True)
class UnmadeTuples:
    """A sink batch's tuples before they are made (the runtime's packed rows).

    ``SinkBatch(..., tuples=UnmadeTuples(...))`` makes them (``make()``) when ``tuples`` is
    first read; ``values_by_fields()`` gives the values without making them, or None.
    """

    size: int
    make: Callable[[], list[Tuple]]
    values_by_fields: Callable[[], tuple[tuple[str, ...], list[list[Any]]] | None]


class BaseSink(Component):
    """Base of sinks. Subclasses implement :meth:`commit` (and :meth:`open` for clients).

    Example:
        >>> class PrintSink(BaseSink):
        ...     def commit(self, batch):
        ...         for t in batch.tuples:
        ...             print(batch.txid, t.values)
    """

    is_sink: ClassVar[bool] = True
    records_offsets: ClassVar[bool] = False
    """True: ``commit`` stores offsets + state with the values and reconcile may use them."""
    accepts_table: ClassVar[bool] = False
    """True: ``commit`` reads ``batch.table`` when it is set (see the module docstring, 6)."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Sinks emit nothing."""

    def needed_fields(self) -> tuple[str, ...]:
        """Fields this sink reads from every tuple it gets (its key template, its value...).

        Checked against the fields each input stream declares when the topology is built, so
        a misspelt field is a :class:`~kstorm.errors.TopologyError` then, not a failed commit
        at the first batch. The default, ``()``, checks nothing.
        """
        return ()

    def combine(self, fields: Fields, values: list[list[Any]]) -> list[list[Any]] | None:
        """Fold one task's tuples for this sink before they leave the executor (optional).

        Called in executors, on the sink as declared (not opened), with the values of the
        tuples one task emitted to this sink on one stream (fields ``fields``), in emit
        order. Return fewer rows of the same fields whose commit gives the very same
        result as the rows given (e.g. one row per key holding the sum, for a sink that
        adds values per key), or None to send them as they are (the default). The rows
        given are the runtime's: return new lists for rows you change.

        The rows given may include rows this method returned earlier for the same task,
        followed by newer tuples (a task's combined rows wait for its next tuples until its
        input ends), so a fold must hold for its own output too: summing a count field
        does; counting rows (as if each said 1) does not.
        """
        return None

    def open(self, context: SinkContext) -> None:
        """Called once on the driver before the first commit: create clients here."""

    def commit(self, batch: SinkBatch) -> None:
        """Apply one batch atomically; a txid already applied must change nothing."""
        msg = f"{type(self).__name__} must implement commit(batch)"
        raise NotImplementedError(msg)

    def abort(self, batch: SinkBatch) -> None:
        """The batch failed after :meth:`commit` was called: drop what it left open."""

    def committed_offsets(self) -> CommitRecord | None:
        """``(txid, offsets)`` of the last committed batch (sinks that record offsets)."""
        return None

    def committed_state(self) -> dict[str, bytes]:
        """The ``state`` stored with the last committed batch (sinks that record offsets)."""
        return {}

    def accepts_states(self, states: Any) -> bool:
        """Whether :meth:`commit` applies ``states`` (a provider's state commit) atomically.

        Saying yes is a promise: ``batch.states`` is then committed with the batch's values
        in one step, also when the batch itself was already committed (a replay).
        """
        return False

    def close(self) -> None:
        """Called on the driver when the topology stops."""
