"""What the runtime knows about one batch before its commit phase: typed, parsed once.

Spark writes a batch's end offsets to its offset log before the batch runs (one JSON per
source, in the order of the query's sources); ``kstorm/_spark/offset_log.py`` reads that file
once per batch into a :class:`BatchOffsets`, and the commit phase hands it, already typed, to
reliability, windows and sinks. Nothing else parses offsets.

A source's end offset is its own JSON: ``{topic: {"partition": end}}`` for a Kafka spout,
``{"batch": n}`` for a list spout, ``{"seq": n}`` for a free-form spout. Keys that start with
``@`` are not topics but *marks* recorded with the ends so a replayed batch sees them again:
the streams' clocks (``@clocks``, windows) and the acking marks (``@acking``, retries and
the batch's planned time).

Example:
    >>> b = BatchOffsets.parse(3, 1_700, {"s": {"t": {"0": 10, "1": 4}, "@clocks": {"t/0": 5}}},
    ...                        kafka_spouts={"s"})
    >>> b.kafka_ends()
    {'t': {0: 10, 1: 4}}
    >>> b.spouts["s"].marks
    {'@clocks': {'t/0': 5}}
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kstorm._kafka.clocks import MARK_PREFIX

Ends = dict[str, dict[int, int]]
"""``{topic: {partition: end offset (exclusive)}}``."""


@dataclass(frozen=True)
class SpoutOffsets:
    """One spout's end of a batch."""

    ends: Ends = field(default_factory=dict)          # Kafka partitions read (Kafka spouts)
    marks: dict[str, Any] = field(default_factory=dict)  # the "@..." entries
    raw: Any = None                                    # the source's JSON as Spark logged it


@dataclass(frozen=True)
class BatchOffsets:
    """A batch's end offsets per spout, and Spark's batch timestamp."""

    batch_id: int
    timestamp_ms: int = 0
    spouts: dict[str, SpoutOffsets] = field(default_factory=dict)

    @classmethod
    def parse(cls, batch_id: int, timestamp_ms: int, sources: Mapping[str, Any], *,
              kafka_spouts: Collection[str]) -> BatchOffsets:
        """From each spout's logged JSON (``kafka_spouts``: which of them are Kafka spouts)."""
        spouts = {}
        for spout, raw in sources.items():
            if raw is None:
                continue
            marks = ({k: v for k, v in raw.items() if k.startswith(MARK_PREFIX)}
                     if isinstance(raw, dict) else {})
            ends: Ends = {}
            if spout in kafka_spouts and isinstance(raw, dict):
                ends = {topic: {int(p): int(o) for p, o in parts.items()}
                        for topic, parts in raw.items() if not topic.startswith(MARK_PREFIX)}
            spouts[spout] = SpoutOffsets(ends, marks, raw)
        return cls(batch_id, timestamp_ms, spouts)

    def kafka_ends(self) -> Ends:
        """Every Kafka partition's end over all spouts: what sinks record for reconcile."""
        flat: Ends = {}
        for offsets in self.spouts.values():
            for topic, parts in offsets.ends.items():
                flat.setdefault(topic, {}).update(parts)
        return flat

    def ends_of(self, spout: str) -> Ends:
        """One spout's Kafka ends (``{}`` for other spouts or a spout with no batch)."""
        found = self.spouts.get(spout)
        return {} if found is None else found.ends

    def marks_of(self, spout: str) -> dict[str, Any]:
        """One spout's marks."""
        found = self.spouts.get(spout)
        return {} if found is None else found.marks

    def summary(self) -> dict[str, Any]:
        """Per spout, its end offset as Spark logged it, marks left out (for progress)."""
        return {spout: ({k: v for k, v in o.raw.items() if not k.startswith(MARK_PREFIX)}
                        if isinstance(o.raw, dict) else o.raw)
                for spout, o in self.spouts.items()}
