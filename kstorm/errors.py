"""Every error kstorm raises, under one root.

Hierarchy::

    KstormError
    ├── ConfigError (+ ValueError)           bad configuration value or option
    ├── TopologyError (+ ValueError)         the graph is invalid (unknown component or
    │                                        stream, undeclared field, duplicate or reserved
    │                                        id, cycle); names the component
    │   └── EmitError (+ TypeError)          an emit call in neither Storm's nor kstorm's
    │                                        form: stops the topology, never a dead letter
    ├── FieldError (+ KeyError)              a tuple has no field of that name
    ├── SerdeError                           bytes could not become fields (or back); carries
    │                                        the reason that a dead-letter record reports
    ├── MissingDependencyError (+ ImportError)  an optional extra or binary is missing;
    │                                        the message says what to install
    ├── EmbeddedServiceError                 an embedded broker / redis-server failed to start
    ├── JavaError                            no Java that Spark can run on (missing, or not
    │                                        17/21); names what was found and Spark's log
    ├── StateError                           a bolt's state cannot be kept (a provider that
    │   │                                    cannot reach its store, a state lost with its
    │   │                                    checkpoint, a parallelism change)
    │   └── StateServerError                 Spark's state server refused a state request
    ├── UnsupportedOperationError            a window does not support the call (Storm's
    │                                        UnsupportedOperationException)
    ├── StaleWindowError (+ RuntimeError)    a window read after later windows were evaluated
    ├── SourceError                          a spout could not read its source (Kafka
    │                                        topics; next_tuple failing again and again)
    ├── SinkError                            a sink could not commit a batch
    ├── BoltError                            a bolt raised and kstorm.bolt.error.policy is
    │                                        "fail"; names the bolt and the error
    └── FailedException                      raised by a bolt's ``execute`` to fail the
                                             input tuple (Storm's ``FailedException``)

Messages name the component id, what was expected and what was got; library errors are
wrapped at the boundary with ``raise ... from exc``. The first line of a message is the
problem; ``hint`` (optional, one line) says what to do about it. The ``kstorm`` command
prints that line and the hint (the traceback only with ``-v``).
"""

from __future__ import annotations


class KstormError(Exception):
    """Root of every kstorm error.

    Args:
        *args: the message (its first line is what the ``kstorm`` command shows).
        hint: one line saying what to do about it, e.g. what to install or which key to set;
            also added as a note, so a traceback shows it under the message.

    Example:
        >>> err = KstormError("Java not found", hint="apt-get install -y openjdk-17-jre-headless")
        >>> str(err), err.hint
        ('Java not found', 'apt-get install -y openjdk-17-jre-headless')
    """

    hint: str = ""

    def __init__(self, *args: object, hint: str = "") -> None:
        super().__init__(*args)
        if hint:
            self.hint = hint
            self.add_note(f"hint: {hint}")


class ConfigError(KstormError, ValueError):
    """A configuration key or option has a bad value."""


class TopologyError(KstormError, ValueError):
    """The topology graph is invalid."""


class FieldError(KstormError, KeyError):
    """A tuple has no field of the requested name."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else ""


class SerdeError(KstormError):
    """Bytes could not be turned into fields, or fields into bytes."""


class MissingDependencyError(KstormError, ImportError):
    """An optional dependency (Python extra or binary) is not installed."""


class EmbeddedServiceError(KstormError):
    """An embedded service (broker, redis-server) could not be started."""


class JavaError(KstormError):
    """Spark cannot start: no Java, or a Java version Spark cannot run on."""


class StateError(KstormError):
    """State a topology holds cannot be kept (e.g. it lived only in a lost checkpoint)."""


class StateServerError(StateError):
    """Spark's transformWithState state server refused a state request."""


class UnsupportedOperationError(KstormError):
    """The window does not support this call (Storm's ``UnsupportedOperationException``).

    Persistent windows (``with_persistence()``) do not track new and expired tuples.
    """


class StaleWindowError(KstormError, RuntimeError):
    """A window was read after its manager evaluated later windows (Storm: "Stale window")."""


class SourceError(KstormError):
    """A spout could not read from its source."""


class SinkError(KstormError):
    """A sink could not write or commit a batch."""


class BoltError(KstormError):
    """A bolt raised while ``kstorm.bolt.error.policy`` is ``fail``: the topology stops."""


class EmitError(TopologyError, TypeError):
    """A collector's ``emit`` was called in neither Storm's form nor kstorm's.

    A programming error, not bad data: it stops the topology at the first call (each input
    a dead letter would hide it), and the message shows both forms.
    """


class FailedException(KstormError):
    """Raise from ``BaseBasicBolt.execute`` to fail the input tuple (Storm semantics)."""


__all__ = [
    "BoltError",
    "ConfigError",
    "EmbeddedServiceError",
    "EmitError",
    "FailedException",
    "FieldError",
    "JavaError",
    "KstormError",
    "MissingDependencyError",
    "SerdeError",
    "SinkError",
    "SourceError",
    "StaleWindowError",
    "StateError",
    "StateServerError",
    "TopologyError",
    "UnsupportedOperationError",
]
