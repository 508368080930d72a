"""A running topology: its Spark query and commit phase, and how it reports a failure.

Example:
    >>> handle = submit_topology("word-count", conf, builder.create_topology())  # doctest: +SKIP
    >>> handle.await_termination()                                    # doctest: +SKIP
    >>> handle.progress["components"]["count"]["executed"]           # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from kstorm import errors
from kstorm.config import TopologyConfig
from kstorm.errors import KstormError
from kstorm.sink import BaseSink

log = logging.getLogger("kstorm")


class TopologyHandle:
    """A running topology (a Spark streaming query plus its commit phase)."""

    def __init__(self, name: str, query: Any, commit: Any, settings: TopologyConfig,
                 metrics: Any = None, on_stop: Callable[[], None] | None = None) -> None:
        self.name = name
        self._query = query
        self._commit = commit
        self.settings = settings
        self._metrics = metrics
        self._on_stop = on_stop  # lets the bolt instances go (cleanup()) once stopped
        self._closed = False  # _finished ran: the sinks are closed

    @property
    def metrics_url(self) -> str | None:
        """Where Prometheus scrapes this topology (``kstorm.metrics.port``), or None."""
        if self._metrics is None:
            return None
        return f"http://127.0.0.1:{self._metrics.port}/metrics"

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

        Returns False if ``timeout`` (seconds) passed first; ``0`` only looks. Raises
        :class:`KstormError` with the cause if the topology failed.
        """
        try:  # (pyspark refuses a timeout that is not positive: a millisecond for 0)
            done = (self._query.awaitTermination() if timeout is None
                    else self._query.awaitTermination(max(float(timeout), 0.001)))
        except Exception as exc:
            self._finished()
            raise failure(self.name, exc, self._commit.failure) from exc
        if done is None or done:
            self._finished()
            own = self._commit.sink_failure  # an overlapped sink commit that failed
            if own is not None:
                raise failure(self.name, own, own) from own
            return True
        return False

    def process_all_available(self) -> None:
        """Block until everything available now has been processed (continuous mode).

        Processed means committed by the sinks too (``kstorm.commit.overlap``: the last
        batch's sinks may still be committing when Spark has recorded it).
        """
        self._query.processAllAvailable()
        try:
            self._commit.wait_for_sinks()
        except KstormError as exc:
            raise failure(self.name, exc, exc) from exc

    def stop(self) -> None:
        """Stop the topology (the batch in flight is finished or replayed on restart).

        Stopping a topology that already failed does not raise again: the failure was
        reported by :meth:`await_termination`.
        """
        try:
            self._query.stop()
        except Exception as exc:  # the query's own failure, re-raised by Spark on stop
            log.debug("topology %r stopped after failing: %s", self.name, failure(self.name, exc))
        self._finished()
        if self._metrics is not None:  # kept after the end until now: the final figures
            self._metrics.close()
            self._metrics = None

    def _finished(self) -> None:
        """Once stopped: close the commit phase; the bolts' ``cleanup`` runs in the workers.

        Runs once, from whichever of ``await_termination`` and ``stop`` sees the end first.
        """
        if self._closed:
            return
        self._closed = True
        self._commit.close()
        on_stop, self._on_stop = self._on_stop, None
        if on_stop is not None:
            try:
                on_stop()
            except Exception as exc:  # noqa: BLE001 - the topology's own outcome stands
                log.warning("topology %r: its bolts' cleanup did not run everywhere: %s",
                            self.name, _last_exception_line(str(exc).strip()))
                log.debug("topology %r: the cleanup's failure in full", self.name,
                          exc_info=exc)


def failure(name: str, exc: BaseException, own: BaseException | None = None) -> KstormError:
    r"""The error a failed topology raises: the matching :class:`KstormError` subclass.

    ``own`` is what the commit phase raised in this process, if the failure began there (a
    sink out of retries, a dead-letter producer that cannot deliver...): its own class
    (or the nearest one in :mod:`kstorm.errors`). Otherwise the failure came from a Spark
    task, as text: the last ``kstorm.errors.<Class>: <message>`` line of the Python
    traceback Spark carries names the class (a bolt raising under the ``fail`` policy is a
    :class:`kstorm.errors.BoltError`); anything else is a :class:`KstormError` with
    the last exception line of that traceback.

    Example:
        >>> failure("wc", Exception("...\\nkstorm.errors.SerdeError: spout 'e': bad"))
        SerdeError("topology 'wc' failed: SerdeError: spout 'e': bad")
    """
    if own is not None:
        cls = next((c for c in type(own).__mro__ if c.__module__ == errors.__name__
                    and issubclass(c, KstormError)), KstormError)
        return cls(f"topology {name!r} failed: {type(own).__name__}: {own}")
    text = str(exc)
    found = re.findall(r"kstorm\.errors\.(\w+): (.+)", text)
    if found:
        kind, message = found[-1]
        cls = getattr(errors, kind, None)
        if not (isinstance(cls, type) and issubclass(cls, KstormError)):
            cls = KstormError
        return cls(f"topology {name!r} failed: {kind}: {message}")
    return KstormError(f"topology {name!r} failed: {_last_exception_line(text)}")


def _last_exception_line(text: str) -> str:
    r"""``Name: message`` of the last exception in a Python traceback inside Spark's text.

    When Spark's own Python runner failed while handling the user's exception, the user's
    (the one before "During handling of the above exception") is the cause that matters.

    Example:
        >>> _last_exception_line("ModuleNotFoundError: No module named 'x'\n\nDuring "
        ...     "handling of the above exception, another exception occurred:\n"
        ...     "UnboundLocalError: cannot access local variable 'reader'")
        "ModuleNotFoundError: No module named 'x'"
    """
    text = text.split("During handling of the above exception", 1)[0]
    raised = re.findall(r"^(\w+(?:Error|Exception|Exit|Interrupt)): (.+)$", text, re.MULTILINE)
    if raised:
        kind, message = raised[-1]
        return f"{kind}: {message}"
    return text.splitlines()[0] if text else "unknown error"


__all__ = ["TopologyHandle", "failure"]
