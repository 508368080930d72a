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
from kstorm.config import Config, Guarantee, TopologyConfig, TriggerMode
from kstorm.errors import (
    ConfigError,
    FailedException,
    FieldError,
    KstormError,
    SerdeError,
    SinkError,
    SourceError,
    TopologyError,
)
from kstorm.kafka_spout import KafkaSpout
from kstorm.runtime import TopologyHandle, submit_topology
from kstorm.sink import BaseSink
from kstorm.spout import BaseRichSpout, SpoutOutputCollector
from kstorm.state import InMemoryKeyValueState, KeyValueState
from kstorm.topology import BoltDeclarer, StormTopology, TopologyBuilder
from kstorm.tuple import Fields, Tuple, Values
from kstorm.windowing.bolt import BaseStatefulWindowedBolt, BaseWindowedBolt

__all__ = [
    "BaseBasicBolt",
    "BaseRichBolt",
    "BaseRichSpout",
    "BaseSink",
    "BaseStatefulBolt",
    "BaseStatefulWindowedBolt",
    "BaseWindowedBolt",
    "BasicOutputCollector",
    "BoltDeclarer",
    "Config",
    "ConfigError",
    "FailedException",
    "FieldError",
    "Fields",
    "Guarantee",
    "InMemoryKeyValueState",
    "KafkaSpout",
    "KeyValueState",
    "KstormError",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "SerdeError",
    "SinkError",
    "SourceError",
    "SpoutOutputCollector",
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
