"""Submitting a topology and controlling it while it runs.

Example:
    >>> handle = submit_topology("word-count", {"kstorm.trigger": "available-now"},
    ...                          builder.create_topology())          # doctest: +SKIP
    >>> handle.await_termination()                                    # doctest: +SKIP
    >>> handle.progress["components"]["count"]["executed"]           # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError, KstormError
from kstorm.sink import BaseSink
from kstorm.topology import StormTopology

log = logging.getLogger("kstorm")


class TopologyHandle:
    """A running topology (a Spark streaming query plus its commit phase)."""

    def __init__(self, name: str, query: Any, commit: Any, settings: TopologyConfig) -> None:
        self.name = name
        self._query = query
        self._commit = commit
        self.settings = settings

    @property
    def sinks(self) -> dict[str, BaseSink]:
        """The topology's sinks (driver-side instances), by component id."""
        return self._commit.sinks

    @property
    def captured(self) -> list[tuple[str, str, list[Any]]]:
        """``(component, stream, values)`` of every emitted tuple, when capture is on."""
        return self._commit.captured

    @property
    def dead_letters(self) -> list[dict[str, Any]]:
        """The most recent dead-letter records (all of them are also in the DLQ topic)."""
        return list(self._commit.dead_letters.recent)

    @property
    def is_active(self) -> bool:
        """Whether the topology is still running."""
        return bool(self._query.isActive)

    @property
    def progress(self) -> dict[str, Any]:
        """Batches, offsets, per-component counters, input rows and rates."""
        snap = self._commit.progress.snapshot()
        recent = [p for p in self._query.recentProgress if p is not None]
        rows = sum(int(p["numInputRows"]) for p in recent)
        snap["input_rows_recent"] = rows
        snap["dead_letters"] = self._commit.dead_letters.count
        if recent:
            last = recent[-1]
            snap["input_rows_per_second"] = last["processedRowsPerSecond"]
            snap["last_batch_ms"] = last["durationMs"].get("triggerExecution")
        return snap

    @property
    def recent_batches(self) -> list[dict[str, Any]]:
        """Spark's progress reports of the recent micro-batches (durations, input rows)."""
        return [dict(p) for p in self._query.recentProgress if p is not None]

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the topology stops (available-now: until the topics are drained).

        Returns False if ``timeout`` (seconds) passed first. Raises :class:`KstormError` with
        the cause if the topology failed.
        """
        try:
            done = (self._query.awaitTermination() if timeout is None
                    else self._query.awaitTermination(timeout))
        except Exception as exc:
            self._commit.close()
            msg = f"topology {self.name!r} failed: {_cause(exc)}"
            raise KstormError(msg) from exc
        if done is None or done:
            self._commit.close()
            return True
        return False

    def process_all_available(self) -> None:
        """Block until everything available now has been processed (continuous mode)."""
        self._query.processAllAvailable()

    def stop(self) -> None:
        """Stop the topology (the batch in flight is finished or replayed on restart).

        Stopping a topology that already failed does not raise again: the failure was
        reported by :meth:`await_termination`.
        """
        try:
            self._query.stop()
        except Exception as exc:  # the query's own failure, re-raised by Spark on stop
            log.debug("topology %r stopped after failing: %s", self.name, _cause(exc))
        self._commit.close()


def _cause(exc: BaseException) -> str:
    """The kstorm error inside a Spark failure (``SerdeError: spout 'x': ...``), if any."""
    text = str(exc)
    found = re.findall(r"kstorm\.errors\.(\w+): (.+)", text)
    if found:
        name, message = found[-1]
        return f"{name}: {message}"
    # a user bolt's exception: the last line of the Python traceback inside Spark's message
    raised = [m for m in re.findall(r"^(\w+(?:Error|Exception|Exit|Interrupt)): (.+)$", text,
                                    re.MULTILINE)]
    if raised:
        name, message = raised[-1]
        return f"{name}: {message}"
    return text.splitlines()[0] if text else type(exc).__name__


def submit_topology(name: str, conf: Mapping[str, Any] | None,
                    topology: StormTopology) -> TopologyHandle:
    """Start ``topology`` on Spark and return its handle (Storm ``StormSubmitter``).

    Args:
        name: the topology's name: its checkpoint directory and sink keys are named after it.
        conf: Storm-style configuration (see :class:`kstorm.config.TopologyConfig`).
        topology: from :meth:`TopologyBuilder.create_topology`.
    """
    if not name or "/" in name:
        msg = f"topology names are non-empty and contain no '/', got {name!r}"
        raise ConfigError(msg)
    if not isinstance(topology, StormTopology):
        msg = (
            "submit_topology needs builder.create_topology(), got "
                          f"{type(topology).__name__}"
        )
        raise ConfigError(msg)
    from kstorm._spark.runner import start

    return start(name, dict(conf or {}), topology)
