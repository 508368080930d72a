"""Counters a running topology reports (``TopologyHandle.progress``); pure bookkeeping."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


class Progress:
    """Per-component counters and per-batch facts, updated by the commit phase."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.started = clock()
        self.counters: Counter[str] = Counter()
        self.gauges: dict[str, int] = {}
        self.batches = 0
        self.last_batch_id: int | None = None
        self.last_offsets: dict[str, Any] = {}
        self.first_commit_at: float | None = None
        self.commit_seconds = 0.0
        self.commit_blocking_seconds = 0.0  # of which the batches waited for

    def add_counters(self, counters: dict[str, Any]) -> None:
        """Fold one stage task's counters (``component.metric`` -> n) in."""
        with self._lock:
            self.counters.update({k: v for k, v in counters.items() if k != "stage"})

    def increment(self, counters: dict[str, int]) -> None:
        """Add to counters the driver keeps itself (``component.metric`` -> n)."""
        with self._lock:
            for key, n in counters.items():
                self.counters[key] = self.counters.get(key, 0) + n

    def set_gauges(self, gauges: dict[str, int]) -> None:
        """Set current values (``component.metric`` -> n), e.g. pending acker entries."""
        with self._lock:
            self.gauges.update(gauges)

    def batch_committed(self, batch_id: int, offsets: dict[str, Any], seconds: float,
                        blocking: float | None = None) -> None:
        """Record that ``batch_id`` went through the commit phase.

        ``seconds``: from the commit phase's start to its sinks' commit; ``blocking``: the
        part Spark waited for before its next batch (less when the sinks' commit overlapped
        the next batch, ``kstorm.commit.overlap``; None: all of it).
        """
        with self._lock:
            self.commit_blocking_seconds += seconds if blocking is None else blocking
            self.batches += 1
            self.last_batch_id = batch_id
            self.last_offsets = offsets
            self.commit_seconds += seconds
            if self.first_commit_at is None:
                self.first_commit_at = self._clock()

    def snapshot(self) -> dict[str, Any]:
        """A plain-dict view: ``components`` maps id -> {emitted, executed, acked, ...}."""
        with self._lock:
            components: dict[str, dict[str, int]] = {}
            for key, value in [*self.counters.items(), *self.gauges.items()]:
                component, _, metric = key.rpartition(".")
                components.setdefault(component, {})[metric] = value
            return {
                "batches": self.batches,
                "last_batch_id": self.last_batch_id,
                "offsets": self.last_offsets,
                "components": components,
                "elapsed_s": self._clock() - self.started,
                "first_commit_after_s": (None if self.first_commit_at is None
                                         else self.first_commit_at - self.started),
                "commit_seconds": self.commit_seconds,
                "commit_blocking_seconds": self.commit_blocking_seconds,
            }
