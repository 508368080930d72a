"""``TransactionalTopologyBuilder``: a transactional topology (seed 002) on the Spark runtime.

The Spark micro-batch is the transaction: the spout's batch is fixed before the batch runs,
batch bolts process it in parallel (the processing phase), committers finish it in the
ordered commit phase, and the sinks commit it with its txid. The topology's id keys its
checkpoint (``<kstorm.checkpoint.root>/<id>`` unless ``kstorm.checkpoint.dir`` is set) and
the transactional state kept there and with the sinks' records.
"""

from __future__ import annotations

from kstorm.component import Component
from kstorm.errors import TopologyError
from kstorm.topology import BoltDeclarer, StormTopology, TopologyBuilder

_SPOUT_KINDS = ("transactional", "kafka", "list")


class TransactionalTopologyBuilder(TopologyBuilder):
    """Storm's ``TransactionalTopologyBuilder``.

    Args:
        id: the transactional topology's id (its checkpoint and stored state).
        spout_id: the spout's component id.
        spout: a transactional spout (``ITransactionalSpout``,
            ``IPartitionedTransactionalSpout``, ``IOpaquePartitionedTransactionalSpout``,
            e.g. :class:`MemoryTransactionalSpout`), or a :class:`kstorm.KafkaSpout` (a
            partitioned transactional spout over offset ranges).
        parallelism: the spout's tasks (a coordinated spout's emitters).

    Example:
        >>> builder = TransactionalTopologyBuilder("global-count", "spout", spout, 3)
        ... # doctest: +SKIP
        >>> builder.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
        ... # doctest: +SKIP
        >>> builder.set_committer_bolt("sum", UpdateGlobalCount()).global_grouping(
        ...     "partial-count")                                       # doctest: +SKIP
    """

    def __init__(self, id: str, spout_id: str, spout: Component,  # noqa: A002 - Storm's name
                 parallelism: int = 1) -> None:
        super().__init__()
        if not isinstance(id, str) or not id or "/" in id:
            msg = f"a transactional topology id is a non-empty name without '/', got {id!r}"
            raise TopologyError(msg)
        kind = getattr(spout, "source_kind", None)
        if kind not in _SPOUT_KINDS:
            msg = (f"transactional spout {spout_id!r} is a {type(spout).__name__}: expected an "
                   "ITransactionalSpout, IPartitionedTransactionalSpout, "
                   "IOpaquePartitionedTransactionalSpout or KafkaSpout (a transactional "
                   "spout emits the same batch for the same txid)")
            raise TopologyError(msg)
        self._transactional_id = id
        self.set_spout(spout_id, spout, parallelism)

    def set_bolt(self, component_id: str, bolt: Component,
                 parallelism: int = 1) -> BoltDeclarer:
        """Add a batch bolt (``BaseBatchBolt``), a basic bolt or a sink."""
        if not (getattr(bolt, "is_batch_bolt", False) or getattr(bolt, "is_sink", False)
                or _is_basic(bolt)):
            msg = (f"bolt {component_id!r} is a {type(bolt).__name__}: a transactional "
                   "topology takes batch bolts (BaseBatchBolt, BaseTransactionalBolt), "
                   "basic bolts (BaseBasicBolt) and sinks; no acking or anchoring in user "
                   "code (Storm's Transactional topologies)")
            raise TopologyError(msg)
        return super().set_bolt(component_id, bolt, parallelism)

    def set_committer_bolt(self, component_id: str, bolt: Component,
                           parallelism: int = 1) -> BoltDeclarer:
        """Add a batch bolt whose ``finish_batch`` runs in the ordered commit phase."""
        if not getattr(bolt, "is_batch_bolt", False):
            msg = (f"committer {component_id!r} is a {type(bolt).__name__}: a committer is a "
                   "batch bolt (BaseBatchBolt / BaseTransactionalBolt)")
            raise TopologyError(msg)
        declarer = self.set_bolt(component_id, bolt, parallelism)
        self._committers.add(component_id)
        return declarer

    def build_topology(self) -> StormTopology:
        """Storm's name for :meth:`create_topology`."""
        return self.create_topology()


def _is_basic(bolt: Component) -> bool:
    from kstorm.bolt import BaseBasicBolt

    return isinstance(bolt, BaseBasicBolt)
