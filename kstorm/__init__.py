"""kstorm: Apache Storm topologies on Spark Structured Streaming, with exactly-once sinks.

Example:
    >>> from kstorm import TopologyBuilder, Fields, KafkaSpout
    >>> builder = TopologyBuilder()
    >>> builder.set_spout("events", KafkaSpout("events"))         # doctest: +SKIP

The names below are imported on first use (PEP 562): importing ``kstorm`` or one of its
modules imports nothing else, so Spark's worker daemon (``kstorm._spark.speedups.daemon``)
starts no thread before it forks (pyarrow's would), and ``from kstorm import X`` works as
it always did.
"""

import importlib as _importlib
import typing as _typing

# Each public name and the module it comes from.
_WHERE = {
    # kstorm.kafka.connection
    "KafkaConnection": "kstorm.kafka.connection",
    # kstorm.bolt
    "BaseBasicBolt": "kstorm.bolt",
    "BaseRichBolt": "kstorm.bolt",
    "BaseStatefulBolt": "kstorm.bolt",
    "BasicOutputCollector": "kstorm.bolt",
    "OutputCollector": "kstorm.bolt",
    # kstorm.component
    "OutputFieldsDeclarer": "kstorm.component",
    "TopologyContext": "kstorm.component",
    # kstorm.config
    "BadInputPolicy": "kstorm.config",
    "BoltErrorPolicy": "kstorm.config",
    "Config": "kstorm.config",
    "Guarantee": "kstorm.config",
    "TopologyConfig": "kstorm.config",
    "TriggerMode": "kstorm.config",
    # kstorm.errors
    "BoltError": "kstorm.errors",
    "ConfigError": "kstorm.errors",
    "FailedException": "kstorm.errors",
    "FieldError": "kstorm.errors",
    "KstormError": "kstorm.errors",
    "SerdeError": "kstorm.errors",
    "SinkError": "kstorm.errors",
    "SourceError": "kstorm.errors",
    "StateError": "kstorm.errors",
    "TopologyError": "kstorm.errors",
    # kstorm.handle
    "TopologyHandle": "kstorm.handle",
    # kstorm.kafka.spout
    "KafkaSpout": "kstorm.kafka.spout",
    # kstorm.state.redis
    "RedisKeyValueState": "kstorm.state.redis",
    "RedisKeyValueStateProvider": "kstorm.state.redis",
    # kstorm.submit
    "submit_topology": "kstorm.submit",
    # kstorm.sink
    "BaseSink": "kstorm.sink",
    "CommitRecord": "kstorm.sink",
    "SinkBatch": "kstorm.sink",
    "SinkContext": "kstorm.sink",
    # kstorm.spout
    "BaseRichSpout": "kstorm.spout",
    "SpoutOutputCollector": "kstorm.spout",
    # kstorm.state
    "BaseState": "kstorm.state",
    "InMemoryKeyValueState": "kstorm.state",
    "InMemoryKeyValueStateProvider": "kstorm.state",
    "KeyValueState": "kstorm.state",
    "State": "kstorm.state",
    "StateProvider": "kstorm.state",
    # kstorm.topology
    "BoltDeclarer": "kstorm.topology",
    "StormTopology": "kstorm.topology",
    "TopologyBuilder": "kstorm.topology",
    # kstorm.transactional
    "BaseBatchBolt": "kstorm.transactional",
    "BaseTransactionalBolt": "kstorm.transactional",
    "ICommitter": "kstorm.transactional",
    "MemoryTransactionalSpout": "kstorm.transactional",
    "TransactionalTopologyBuilder": "kstorm.transactional",
    "TransactionAttempt": "kstorm.transactional",
    # kstorm.tuple
    "Fields": "kstorm.tuple",
    "Tuple": "kstorm.tuple",
    "TupleUtils": "kstorm.tuple",
    "Values": "kstorm.tuple",
    # kstorm.windowing.bolt
    "BaseStatefulWindowedBolt": "kstorm.windowing.bolt",
    "BaseWindowedBolt": "kstorm.windowing.bolt",
    # kstorm.windowing.join
    "JoinBolt": "kstorm.windowing.join",
    "TableJoinBolt": "kstorm.windowing.join",
}

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
    "JoinBolt",
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
    "TableJoinBolt",
    "TopologyBuilder",
    "TopologyConfig",
    "TopologyContext",
    "TopologyError",
    "TopologyHandle",
    "TriggerMode",
    "Tuple",
    "TupleUtils",
    "Values",
    "submit_topology",
]


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        try:  # a submodule (``kstorm.errors``) as an attribute, as eager imports made it
            return _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            msg = f"module {__name__!r} has no attribute {name!r}"
            raise AttributeError(msg) from None
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if _typing.TYPE_CHECKING:  # what type checkers and IDEs see: the eager imports
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
    from kstorm.tuple import Fields, Tuple, TupleUtils, Values
    from kstorm.windowing.bolt import BaseStatefulWindowedBolt, BaseWindowedBolt
    from kstorm.windowing.join import JoinBolt, TableJoinBolt
