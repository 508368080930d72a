"""Failing a transaction: re-run the batch in place, then the configured policy (seed 002).

Pure decisions (no Spark, no clock): the commit phase (``kstorm/_spark/commit.py``) runs a
batch -- its processing phase (the Spark job) and its commit phase -- as attempt 0, 1, ...
of one transaction: the same txid and content, a new attempt id each time. When an attempt
fails, :meth:`Transactions.decide` says what comes next:

1. Classify the failure (:func:`classify`): a ``FailedException`` (a bolt, batch bolt or
   committer failed the batch), an error in user code (a bolt raising under the ``fail``
   policy: ``BoltError``), a sink or a source that could not do its part (``SinkError``,
   ``SourceError``: often transient, e.g. Redis or a broker briefly away) -- all retried;
   or a failure no retry can cure (a topology or configuration error, a record the
   ``fail`` bad-input policy refuses): stop at once.
2. Retry while attempts remain (``kstorm.transaction.max.attempts`` in all), after an
   exponential backoff (``kstorm.transaction.backoff.ms``, doubling, at most 10 s).
3. After the last attempt, the policy (``kstorm.transaction.failure.policy``): ``fail``
   stops the topology with an error naming the component, the txid and the cause;
   ``dead-letter`` runs the batch once more with every spout tuple sent to the dead-letter
   topic instead of the bolts, commits it (empty) and goes on.

Example:
    >>> tx = Transactions(max_attempts=3, backoff_ms=100, policy="fail", run_base=1000)
    >>> d = tx.decide(0, FailedException("bolt 'b' failed"))
    >>> d.action, d.kind, d.delay_s, d.component
    ('retry', 'failed', 0.1, 'b')
    >>> tx.decide(2, FailedException("bolt 'b' failed")).action
    'fail'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kstorm.errors import (
    BoltError,
    ConfigError,
    FailedException,
    SerdeError,
    SinkError,
    SourceError,
    TopologyError,
)

Kind = Literal["failed", "error", "sink", "source", "fatal"]
Action = Literal["retry", "dead-letter", "fail"]
MAX_BACKOFF_S = 10.0
ATTEMPT_PROPERTY = "kstorm.attempt"         # Spark local property: the batch's attempt id
DEAD_LETTER_PROPERTY = "kstorm.dead_letter"  # ... set: every spout tuple is a dead letter
COMMITTED_PROPERTY = "kstorm.committed"     # ... the newest txid whose sinks committed

_RETRIED: dict[type[BaseException], Kind] = {
    FailedException: "failed", BoltError: "error", SinkError: "sink", SourceError: "source"}
_FATAL = (TopologyError, ConfigError, SerdeError)
_NAMES: dict[str, Kind] = {"FailedException": "failed", "BoltError": "error",
                           "SinkError": "sink", "SourceError": "source",
                           "TopologyError": "fatal", "ConfigError": "fatal",
                           "SerdeError": "fatal"}
_KSTORM_LINE = re.compile(r"kstorm\.errors\.(\w+): (.+)")
_COMPONENT = re.compile(r"(?:bolt|sink|spout|committer) '([^']+)'")


@dataclass(frozen=True)
class Decision:
    """What follows a failed attempt."""

    action: Action
    kind: Kind
    delay_s: float = 0.0
    component: str | None = None
    cause: str = ""


def classify(exc: BaseException) -> tuple[Kind, str | None, str]:
    r"""``(kind, component, cause)`` of a failed attempt.

    ``exc`` is either raised in this process (the commit phase: a committer, a sink) or the
    Spark job's failure, whose text carries the Python traceback of the task that failed:
    the last ``kstorm.errors.<Class>: <message>`` line names the class.

    Example:
        >>> classify(Exception("...\nkstorm.errors.BoltError: bolt 'split' raised ValueError"))
        ('error', 'split', "BoltError: bolt 'split' raised ValueError")
    """
    for klass, kind in _RETRIED.items():
        if isinstance(exc, klass):
            return kind, _component(str(exc)), f"{type(exc).__name__}: {exc}"
    if isinstance(exc, _FATAL):
        return "fatal", _component(str(exc)), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    found = _KSTORM_LINE.findall(text)
    if found:
        name, message = found[-1]
        return _NAMES.get(name, "error"), _component(message), f"{name}: {message}"
    lines = [line for line in text.splitlines() if line.strip()]
    return "error", None, lines[-1] if lines else type(exc).__name__


def _component(message: str) -> str | None:
    found = _COMPONENT.search(message)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Transactions:
    """The retry policy of a topology's transactions (see the module docstring).

    Attributes:
        max_attempts: attempts of one transaction in all (the first included).
        backoff_ms: the wait before the first retry; it doubles, up to 10 s.
        policy: after the last attempt: ``fail`` or ``dead-letter``.
        run_base: attempt ids of this run start here (distinct from every earlier run's).
    """

    max_attempts: int
    backoff_ms: int
    policy: Literal["fail", "dead-letter"]
    run_base: int

    def attempt_id(self, attempt: int) -> int:
        """The id of attempt ``attempt`` (0, 1, ...) of a batch in this run."""
        return self.run_base + attempt

    def decide(self, attempt: int, exc: BaseException) -> Decision:
        """What follows the failure ``exc`` of attempt ``attempt`` (0-based)."""
        kind, component, cause = classify(exc)
        if kind == "fatal":
            return Decision("fail", kind, 0.0, component, cause)
        if attempt + 1 < self.max_attempts:
            delay = min(self.backoff_ms / 1000 * 2 ** attempt, MAX_BACKOFF_S)
            return Decision("retry", kind, delay, component, cause)
        action: Action = "dead-letter" if self.policy == "dead-letter" else "fail"
        return Decision(action, kind, 0.0, component, cause)
