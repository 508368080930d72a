"""Sinks: components that run in the ordered commit phase of each batch (seed 002).

A sink is attached like a bolt (``builder.set_bolt("store", sink).fields_grouping(...)``) but
runs on the driver, after the batch's processing phase, in strictly increasing batch id
order. Its :meth:`BaseSink.commit` receives every tuple addressed to it in the batch, the
batch id (the txid) and the batch's source end offsets, so it can store state and offsets in
one atomic step, skip a txid it already has, and tell the runtime where to resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kstorm.component import Component, OutputFieldsDeclarer, TopologyContext
from kstorm.tuple import Tuple

# spout id -> that spout's end offsets after the batch (Kafka: {topic: {partition: offset}})
SourceOffsets = Mapping[str, Mapping[str, Any]]


class BaseSink(Component):
    """Base of exactly-once sinks. Subclasses implement :meth:`commit`."""

    is_sink = True
    stores_state = False  # True: commit() stores ``state`` atomically with the offsets
    txid_base = 0  # txid = txid_base + batch id; the runtime raises it after a lost checkpoint

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Sinks emit nothing."""

    def open(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once on the driver before the first commit (create clients here)."""

    def commit(self, batch_id: int, tuples: list[Tuple], offsets: SourceOffsets,
               state: Mapping[str, bytes] | None = None) -> None:
        """Apply one batch atomically; must be idempotent for a batch id it already has.

        ``state`` (for sinks with ``stores_state``) is the runtime's driver state after the
        batch (windowed aggregates' open windows), to store in the same atomic step.
        """
        msg = f"{type(self).__name__} must implement commit()"
        raise NotImplementedError(msg)

    def committed_offsets(self) -> tuple[int, Mapping[str, Mapping[int, int]]] | None:
        """``(txid, {topic: {partition: end}})`` of the last batch committed, if it stores them.

        Used on start to reconcile with the Spark checkpoint: when the checkpoint is missing
        or behind, the spouts resume from these offsets.
        """
        return None

    def committed_state(self) -> dict[str, bytes]:
        """The ``state`` stored with the last committed batch (sinks with ``stores_state``)."""
        return {}

    def close(self) -> None:
        """Called on the driver when the topology stops."""
