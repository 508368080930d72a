"""Spouts as streaming DataFrames."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from kstorm.errors import ConfigError, TopologyError
from kstorm.topology import ComponentSpec


def read_spout(spark: SparkSession, spec: ComponentSpec, settings: Any,
               pmax_file: str | None = None, fused: Any = None,
               acking: dict[str, Any] | None = None) -> DataFrame:
    """The raw rows of spout ``spec`` (its output fields, plus ids and error columns).

    ``acking``: the spout is tracked (at-least-once; Kafka spouts only): its book's path
    and ``topology.max.spout.pending``.
    """
    from kstorm.kafka_spout import KafkaSpout
    from kstorm.testing import ListSpout

    spout = spec.component
    if isinstance(spout, KafkaSpout):
        from kstorm._spark.kafka_source import read_stream

        if spout.bootstrap_servers is None:
            if not settings.bootstrap_servers:
                msg = (
                    f"spout {spec.id!r}: no Kafka bootstrap servers: pass "
                    "KafkaSpout(bootstrap_servers=...) or set 'kafka.bootstrap.servers'"
                )
                raise ConfigError(
                    msg)
            spout = spout.with_bootstrap(settings.bootstrap_servers)
        from kstorm._spark.envelope import ENVELOPE_DDL

        return read_stream(spark, spout, pmax_file, fused, ENVELOPE_DDL, acking)
    if isinstance(spout, ListSpout):
        from kstorm._spark.list_source import read_list_spout

        return read_list_spout(spark, spout.batches, spout.schema, spout.partitions, pmax_file)
    msg = (
        f"spout {spec.id!r} is a {type(spout).__name__}: kstorm runs replayable spouts "
        "(KafkaSpout, kstorm.testing.ListSpout), whose batches are fixed before they run"
    )
    raise TopologyError(
        msg)
