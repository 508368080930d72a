"""The validated, frozen window configuration of one windowed bolt (seed 004).

:class:`WindowConfig` holds every windowing option with its default in exactly one place:
Storm's ``topology.bolts.window.*`` settings, minus the map. Users normally build it through
the ``with_*`` methods of :class:`~kstorm.windowing.WindowedBoltConfigMixin`.

Example:
    >>> cfg = WindowConfig(Duration.seconds(20), Duration.seconds(10),
    ...                    timestamp_field="ts", lag=Duration.seconds(5))
    >>> cfg.is_event_time, cfg.tumbling, cfg.watermark_interval
    (True, False, None)

``watermark_interval`` None: the watermark advances once per micro-batch (the trigger
interval, 1 s by default, as Storm's default watermark interval).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kstorm._ids import LATE_TUPLE_FIELD  # field of the late-tuple stream (Storm's name)
from kstorm.errors import ConfigError, FieldError
from kstorm.windowing.durations import Count, Duration

__all__ = ["LATE_TUPLE_FIELD", "FieldMessageIdExtractor", "FieldTimestampExtractor",
           "TimestampExtractor", "WindowConfig", "field_value"]


def field_value(item: Any, name: str) -> Any:
    """Read field ``name`` of a tuple-like object.

    Works with :class:`kstorm.Tuple` (``get_value_by_field``), mappings, and objects with an
    attribute of that name (named tuples, dataclasses).

    Example:
        >>> field_value({"ts": 5}, "ts")
        5
    """
    getter = getattr(item, "get_value_by_field", None)
    if getter is not None:
        return getter(name)
    if isinstance(item, Mapping):
        if name in item:
            return item[name]
    elif hasattr(item, name):
        return getattr(item, name)
    msg = f"tuple {item!r} has no field {name!r}"
    raise FieldError(msg)


class TimestampExtractor(ABC):
    """Storm's ``TimestampExtractor``: a tuple's event time, for ``with_timestamp_extractor``.

    Subclass it as a Storm extractor implements the interface (any object with
    ``extract_timestamp`` or a plain callable works too). It must be picklable.

    Example:
        >>> class Nested(TimestampExtractor):
        ...     def extract_timestamp(self, tuple_):
        ...         return tuple_["event"]["ts"]
        >>> Nested().extract_timestamp({"event": {"ts": 5}})
        5
    """

    @abstractmethod
    def extract_timestamp(self, tuple_: Any) -> int:
        """The timestamp of ``tuple_`` in milliseconds."""


@dataclass(frozen=True, slots=True)
class ObjectTimestampExtractor:
    """Calls ``extract_timestamp(tuple)`` of a Storm-style ``TimestampExtractor`` object.

    Storm's ``withTimestampExtractor`` takes an object implementing ``TimestampExtractor``;
    kstorm takes that or a plain callable, and wraps the object in this (picklable if the
    object is).

    Example:
        >>> class Ts:
        ...     def extract_timestamp(self, t):
        ...         return t["ts"]
        >>> ObjectTimestampExtractor(Ts())({"ts": 5})
        5
    """

    target: Any

    def __call__(self, item: Any) -> int:
        """The timestamp of ``item`` in ms, as ``target.extract_timestamp`` returns it."""
        return int(self.target.extract_timestamp(item))


def as_timestamp_extractor(extractor: Any) -> Callable[[Any], int]:
    """``extractor`` as a callable: a callable as is, an ``extract_timestamp`` object wrapped.

    Raises:
        ConfigError: neither callable nor with an ``extract_timestamp`` method.
    """
    if callable(getattr(extractor, "extract_timestamp", None)):
        return ObjectTimestampExtractor(extractor)
    if callable(extractor):
        return extractor  # type: ignore[no-any-return]
    msg = (f"timestamp extractor must be a callable (tuple -> ms) or an object with "
           f"extract_timestamp(tuple), got {extractor!r}")
    raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class FieldTimestampExtractor:
    """Reads a tuple's timestamp (ms) from a field (Storm ``TupleFieldTimestampExtractor``).

    Example:
        >>> FieldTimestampExtractor("ts")({"ts": 1_700_000_000_000})
        1700000000000
    """

    field_name: str

    def __call__(self, item: Any) -> int:
        """The timestamp of ``item`` in ms; ``FieldError`` if absent or not an int."""
        value = field_value(item, self.field_name)
        if isinstance(value, bool) or not isinstance(value, int):
            msg = (
                f"timestamp field {self.field_name!r} of tuple {item!r} holds "
                f"{type(value).__name__} {value!r}; expected an int timestamp in milliseconds"
            )
            raise FieldError(msg)
        return value


@dataclass(frozen=True, slots=True)
class FieldMessageIdExtractor:
    """Reads a tuple's monotonically increasing message id from a field."""

    field_name: str

    def __call__(self, item: Any) -> int:
        """The message id of ``item``; ``FieldError`` if absent or not an int."""
        value = field_value(item, self.field_name)
        if isinstance(value, bool) or not isinstance(value, int):
            msg = (
                f"message id field {self.field_name!r} of tuple {item!r} holds "
                f"{type(value).__name__} {value!r}; expected a monotonically increasing int"
            )
            raise FieldError(msg)
        return value


def _positive(value: object, what: str) -> Count | Duration:
    if not isinstance(value, Count | Duration):
        msg = f"{what} must be a Count or a Duration, got {value!r}"
        raise ConfigError(msg)
    if isinstance(value, Duration) and value.ms <= 0:
        msg = f"{what} must be positive, got {value!r}"
        raise ConfigError(msg)
    return value


BOUNDARIES = ("end-inclusive", "start-inclusive")


@dataclass(frozen=True)
class WindowConfig:
    """How a windowed bolt groups tuples into windows.

    Attributes:
        window_length: Tuples per window (:class:`Count`) or its span (:class:`Duration`).
        sliding_interval: How often the window is evaluated; ``Count(1)`` (every tuple) is
            Storm's default for ``with_window(length)``. Equal to the length when tumbling.
        tumbling: Non-overlapping windows; requires ``sliding_interval`` unset or equal.
        timestamp_field / timestamp_extractor: Use event time read from the tuple (at most
            one of the two); without them the processing time is used.
        lag: Maximum out-of-orderness of event timestamps; the watermark trails by it.
        watermark_interval: Event time: the watermark advances at most once per this much
            processing (batch) time; ``None`` (the default): once per micro-batch, i.e. the
            trigger interval is the watermark interval.
        late_tuple_stream: Stream on which late tuples are emitted (needs event time).
        message_id_field: Monotonically increasing id, to checkpoint only the last expired
            and last evaluated ids per source (seed 004 "Stateful windowing").
        persistent: Window tuples live in the state backend (``with_persistence()``);
            ``get_new``/``get_expired`` are then unsupported.
        max_events_in_memory: Cache bound for persistent windows.
        idle_timeout: Event time only: an input stream that delivered nothing for this long
            (in processing time) stops holding the watermark back (a kstorm addition).
        boundaries: Which bound of a time window holds a tuple exactly on it:
            ``"end-inclusive"`` (Storm: ``end - length < ts <= end``, the default) or
            ``"start-inclusive"`` (Spark, Flink, Kafka Streams: ``start <= ts < end``).
        session_gap: Session windows (``with_session_window``): tuples of one key whose
            timestamps are at most this far apart share a session
            (:mod:`kstorm.windowing.sessions`). ``window_length`` then equals the gap.
        session_max_duration: A session holds tuples up to ``first + max_duration`` at most;
            later ones start the next session (``None``: no bound).
        session_key_fields: The fields a session is per key of; ``None``: the bolt's fields
            grouping (bound by the runtime, :func:`~kstorm.windowing.sessions.bind_session_keys`),
            ``()``: one session stream per task.
    """

    window_length: Count | Duration
    sliding_interval: Count | Duration | None = None
    tumbling: bool = False
    timestamp_field: str | None = None
    timestamp_extractor: Callable[[Any], int] | None = None
    lag: Duration = field(default_factory=lambda: Duration(0))
    watermark_interval: Duration | None = None
    late_tuple_stream: str | None = None
    message_id_field: str | None = None
    persistent: bool = False
    max_events_in_memory: int | None = None
    idle_timeout: Duration | None = None
    boundaries: str = "end-inclusive"
    session_gap: Duration | None = None
    session_max_duration: Duration | None = None
    session_key_fields: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self._check_session()
        if self.boundaries not in BOUNDARIES:
            msg = f"window boundaries must be one of {BOUNDARIES}, got {self.boundaries!r}"
            raise ConfigError(msg)
        _positive(self.window_length, "window length")
        if self.tumbling:
            if self.sliding_interval not in (None, self.window_length):
                msg = (
                    f"a tumbling window slides by its length {self.window_length!r}; got "
                    f"sliding interval {self.sliding_interval!r}"
                )
                raise ConfigError(msg)
            object.__setattr__(self, "sliding_interval", self.window_length)
        elif self.sliding_interval is None:
            object.__setattr__(self, "sliding_interval", Count(1))
        _positive(self.sliding_interval, "sliding interval")
        if self.timestamp_field is not None and self.timestamp_extractor is not None:
            msg = "set either timestamp_field or timestamp_extractor, not both"
            raise ConfigError(msg)
        for name in ("timestamp_field", "late_tuple_stream", "message_id_field"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                msg = f"{name} must be a non-empty string, got {value!r}"
                raise ConfigError(msg)
        if self.timestamp_extractor is not None:
            object.__setattr__(self, "timestamp_extractor",
                               as_timestamp_extractor(self.timestamp_extractor))
        if not isinstance(self.lag, Duration):
            msg = f"lag must be a Duration, got {self.lag!r}"
            raise ConfigError(msg)
        if self.watermark_interval is not None and (
                not isinstance(self.watermark_interval, Duration)
                or self.watermark_interval.ms <= 0):
            msg = f"watermark interval must be a positive Duration, got {self.watermark_interval!r}"
            raise ConfigError(msg)
        if self.watermark_interval is not None and not self.is_event_time:
            msg = ("with_watermark_interval needs event time (with_timestamp_field or "
                   "with_timestamp_extractor): processing-time windows have no watermark")
            raise ConfigError(msg)
        if self.late_tuple_stream is not None and not self.is_event_time:
            msg = (
                f"late tuple stream {self.late_tuple_stream!r} can be defined only together "
                "with a timestamp field or extractor (with_timestamp_field)"
            )
            raise ConfigError(msg)
        if self.idle_timeout is not None:
            if not isinstance(self.idle_timeout, Duration) or self.idle_timeout.ms <= 0:
                msg = f"idle timeout must be a positive Duration, got {self.idle_timeout!r}"
                raise ConfigError(msg)
            if not self.is_event_time:
                msg = (
                    "an idle timeout applies to event-time windows only: set "
                    "with_timestamp_field(...) or with_timestamp_extractor(...) too"
                )
                raise ConfigError(msg)
        n = self.max_events_in_memory
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            msg = f"max_events_in_memory must be an int >= 1, got {n!r}"
            raise ConfigError(msg)

    @classmethod
    def session(cls, gap: Duration, max_duration: Duration | None = None,
                key_fields: Sequence[str] | None = None, **options: Any) -> WindowConfig:
        """Session windows of ``gap`` (see :mod:`kstorm.windowing.sessions`).

        Example:
            >>> cfg = WindowConfig.session(Duration.seconds(30), timestamp_field="ts")
            >>> cfg.is_session, cfg.session_gap, cfg.window_length
            (True, Duration.millis(30000), Duration.millis(30000))
        """
        return cls(gap, session_gap=gap, session_max_duration=max_duration,
                   session_key_fields=None if key_fields is None else tuple(key_fields),
                   **options)

    def _check_session(self) -> None:
        if self.session_gap is None:
            if self.session_max_duration is not None or self.session_key_fields is not None:
                msg = "session_max_duration and session_key_fields need a session_gap"
                raise ConfigError(msg)
            return
        for name in ("session_gap", "session_max_duration"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, Duration) or value.ms <= 0):
                msg = f"{name} must be a positive Duration, got {value!r}"
                raise ConfigError(msg)
        keys = self.session_key_fields
        if keys is not None:
            if isinstance(keys, str) or not all(isinstance(k, str) and k for k in keys):
                msg = f"session key fields must be a sequence of field names, got {keys!r}"
                raise ConfigError(msg)
            object.__setattr__(self, "session_key_fields", tuple(keys))
        if self.persistent or self.message_id_field is not None:
            msg = ("session windows keep their tuples in the task's window state: "
                   "with_persistence() and with_message_id_field() are not supported with "
                   "with_session_window() yet")
            raise ConfigError(msg)
        object.__setattr__(self, "window_length", self.session_gap)
        object.__setattr__(self, "sliding_interval", self.session_gap)
        object.__setattr__(self, "tumbling", True)

    @property
    def is_session(self) -> bool:
        """Whether the windows are session windows (``with_session_window``)."""
        return self.session_gap is not None

    @property
    def is_event_time(self) -> bool:
        """Whether windows follow tuple timestamps (watermarks) rather than processing time."""
        return self.timestamp_field is not None or self.timestamp_extractor is not None

    @property
    def extractor(self) -> Callable[[Any], int] | None:
        """The callable reading a tuple's timestamp, or ``None`` for processing time."""
        if self.timestamp_field is not None:
            return FieldTimestampExtractor(self.timestamp_field)
        return self.timestamp_extractor

    @property
    def message_id_extractor(self) -> Callable[[Any], int] | None:
        """The callable reading a tuple's message id, or ``None``."""
        if self.message_id_field is None:
            return None
        return FieldMessageIdExtractor(self.message_id_field)
