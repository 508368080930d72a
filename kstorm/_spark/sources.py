"""Spouts as streaming DataFrames: one Spark source per kind of spout (``source_kind``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.envelope import ENVELOPE_DDL
from kstorm._runtime.plan import source_kind
from kstorm.config import TopologyConfig
from kstorm.errors import TopologyError
from kstorm.spout import BaseRichSpout
from kstorm.topology import ComponentSpec


def read_spout(spark: SparkSession, spec: ComponentSpec, settings: TopologyConfig,
               pmax_file: str | None = None, fused: Any = None,
               acking: dict[str, Any] | None = None, *, topology_name: str = "",
               conf: dict[str, Any] | None = None, layout: CheckpointLayout | None = None,
               txid_base: int = 0, seeds: Mapping[str, bytes] | None = None,
               spout_task: int | None = None) -> DataFrame:
    """The raw rows of spout ``spec`` (its output fields, plus ids and error columns).

    ``acking``: the spout is tracked (at-least-once; Kafka and list spouts): its book's path
    and ``topology.max.spout.pending``. A free-form spout (``next_tuple``) needs its
    source stage as ``fused`` (its rows leave as envelope rows), the topology's name and
    ``conf`` (for ``open``), and the checkpoint ``layout`` (its batch log lives there). A
    transactional spout needs the same, plus ``txid_base`` (txid = base + batch id) and the
    sinks' stored state ``seeds`` (its metadata after a lost checkpoint). ``spout_task``: a
    free-form spout is tracked (at least once, with ackers) as this spout task.
    """
    spout = spec.component
    kind = source_kind(spout)
    if kind == "kafka":
        from kstorm._spark.kafka_source import read_stream

        return read_stream(spark, spout, pmax_file, fused, ENVELOPE_DDL, acking,
                           ack_on_emit=settings.acks_on_emit)
    if kind == "list":
        from kstorm._spark.list_source import read_list_spout

        acker = spout if settings.acks_on_emit and type(spout).ack is not BaseRichSpout.ack \
            else None
        return read_list_spout(spark, spout.batches, spout.schema, spout.partitions, pmax_file,
                               acking, acked_on_emit=acker)
    if kind == "transactional":
        return _read_transactional(spark, spec, topology_name, conf, fused, layout,
                                   txid_base, seeds or {})
    if not isinstance(spout, BaseRichSpout):
        msg = f"spout {spec.id!r} is a {type(spout).__name__}, not a BaseRichSpout"
        raise TopologyError(msg)
    if fused is None or layout is None:
        msg = f"spout {spec.id!r}: a free-form spout is read with its source stage and log"
        raise TopologyError(msg)
    from kstorm._runtime.spout_executor import BatchBounds
    from kstorm._spark.spout_source import SpoutSourceSpec, read_spout_stream

    bounds = BatchBounds(settings.spout_max_batch_tuples, settings.spout_max_batch_ms,
                         settings.spout_idle_calls, settings.spout_max_failures)
    notices = str(layout.notices_dir(spec.id)) if spout_task is not None else None
    source = SpoutSourceSpec(spout, spec.id, topology_name,
                             settings.component_conf(conf or {}, spec.conf),
                             dict(spec.streams), str(layout.spout_log_dir(spec.id)), bounds,
                             settings.acks_on_emit, spec.parallelism, fused, spout_task,
                             notices, settings.spout_max_pending(spec.conf))
    return read_spout_stream(spark, source, ENVELOPE_DDL)


def _read_transactional(spark: SparkSession, spec: ComponentSpec, topology_name: str,
                        conf: dict[str, Any] | None, fused: Any,
                        layout: CheckpointLayout | None, txid_base: int,
                        seeds: Mapping[str, bytes]) -> DataFrame:
    from kstorm._spark.txspout_source import TxSpoutSpec, read_txspout_stream, seed_from

    if fused is None or layout is None:
        msg = f"spout {spec.id!r}: a transactional spout is read with its source stage and log"
        raise TopologyError(msg)
    source = TxSpoutSpec(spec.component, spec.id, topology_name, {**(conf or {}), **spec.conf},
                         dict(spec.streams), str(layout.checkpoint), txid_base,
                         spec.parallelism, fused, seed_from(seeds, spec.id),
                         str(layout.txmeta_path(spec.id)))
    return read_txspout_stream(spark, source, ENVELOPE_DDL)
