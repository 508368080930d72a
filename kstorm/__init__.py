"""kstorm: Apache Storm topologies on Spark Structured Streaming, with exactly-once sinks.

Example:
    >>> from kstorm import TopologyBuilder, Fields, KafkaSpout
    >>> builder = TopologyBuilder()
    >>> builder.set_spout("events", KafkaSpout("events"))         # doctest: +SKIP
"""

from kstorm.bolt import (
    BaseBasicBolt,
    BaseRichBolt,
    BaseStatefulBolt,
    BasicOutputCollector,
    OutputCollector,
)
from kstorm.component import OutputFieldsDeclarer, TopologyContext
from kstorm.config import (
    BadInputPolicy,
    BoltErrorPolicy,
    Config,
    Guarantee,
    TopologyConfig,
    TriggerMode,
)
from kstorm.errors import (
    BoltError,
    ConfigError,
    FailedException,
    FieldError,
    KstormError,
    SerdeError,
    SinkError,
    SourceError,
    StateError,
    TopologyError,
)
from kstorm.handle import TopologyHandle
from kstorm.kafka.connection import KafkaConnection
from kstorm.kafka.spout import KafkaSpout
from kstorm.sink import BaseSink, CommitRecord, SinkBatch, SinkContext
from kstorm.spout import BaseRichSpout, SpoutOutputCollector
from kstorm.state import (
    BaseState,
    InMemoryKeyValueState,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    State,
    StateProvider,
)
from kstorm.state.redis import RedisKeyValueState, RedisKeyValueStateProvider
from kstorm.submit import submit_topology
from kstorm.topology import BoltDeclarer, StormTopology, TopologyBuilder
from kstorm.transactional import (
    BaseBatchBolt,
    BaseTransactionalBolt,
    ICommitter,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
    TransactionAttempt,
)
from kstorm.tuple import Fields, Tuple, Values
from kstorm.windowing.bolt import BaseStatefulWindowedBolt, BaseWindowedBolt

__all__ = [
    "BadInputPolicy",
    "BaseBatchBolt",
    "BaseTransactionalBolt",
    "ICommitter",
    "MemoryTransactionalSpout",
    "TransactionAttempt",
    "TransactionalTopologyBuilder",
    "BaseBasicBolt",
    "BaseRichBolt",
    "BaseRichSpout",
    "BaseSink",
    "BaseState",
    "BaseStatefulBolt",
    "BaseStatefulWindowedBolt",
    "BaseWindowedBolt",
    "BasicOutputCollector",
    "BoltDeclarer",
    "BoltError",
    "BoltErrorPolicy",
    "CommitRecord",
    "Config",
    "ConfigError",
    "FailedException",
    "FieldError",
    "Fields",
    "Guarantee",
    "InMemoryKeyValueState",
    "KafkaConnection",
    "KafkaSpout",
    "KeyValueState",
    "RedisKeyValueState",
    "RedisKeyValueStateProvider",
    "State",
    "StateProvider",
    "InMemoryKeyValueStateProvider",
    "KstormError",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "SerdeError",
    "SinkBatch",
    "SinkContext",
    "SinkError",
    "SourceError",
    "SpoutOutputCollector",
    "StateError",
    "StormTopology",
    "TopologyBuilder",
    "TopologyConfig",
    "TopologyContext",
    "TopologyError",
    "TopologyHandle",
    "TriggerMode",
    "Tuple",
    "Values",
    "submit_topology",
]
