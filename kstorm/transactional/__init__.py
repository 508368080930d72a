"""Transactional topologies (seed 002): batches with a txid, batch bolts, committers.

Example (seed 002's ``TransactionalGlobalCount``; ``examples/transactional_global_count.py``
runs it)::

    spout = MemoryTransactionalSpout(DATA, Fields("word"), PARTITION_TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder("global-count", "spout", spout, 3)
    builder.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
    builder.set_committer_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    submit_topology("global-count", conf, builder.create_topology())
"""

from kstorm.transactional.attempt import TransactionAttempt
from kstorm.transactional.bolt import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    BatchOutputCollector,
    ICommitter,
)
from kstorm.transactional.builder import TransactionalTopologyBuilder
from kstorm.transactional.spout import (
    IOpaquePartitionedTransactionalSpout,
    IPartitionedTransactionalSpout,
    ITransactionalSpout,
    MemoryTransactionalSpout,
    OpaqueCoordinator,
    OpaqueEmitter,
    OpaqueMemoryTransactionalSpout,
    PartitionedCoordinator,
    PartitionedEmitter,
    TransactionalCoordinator,
    TransactionalEmitter,
)

__all__ = [
    "BaseBatchBolt",
    "BaseTransactionalBolt",
    "BatchOutputCollector",
    "ICommitter",
    "IOpaquePartitionedTransactionalSpout",
    "IPartitionedTransactionalSpout",
    "ITransactionalSpout",
    "MemoryTransactionalSpout",
    "OpaqueCoordinator",
    "OpaqueEmitter",
    "OpaqueMemoryTransactionalSpout",
    "PartitionedCoordinator",
    "PartitionedEmitter",
    "TransactionAttempt",
    "TransactionalCoordinator",
    "TransactionalEmitter",
    "TransactionalTopologyBuilder",
]
