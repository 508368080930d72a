"""Storm's ``BaseWindowedBolt`` builder methods, as a mixin.

Every ``with_*`` method validates its argument at once and returns the bolt, so a windowed
bolt is declared in one expression, as in Storm::

    builder.set_bolt("avg", AvgBolt().with_tumbling_window(Duration.seconds(10))
                                     .with_timestamp_field("ts").with_lag(Duration.seconds(5)))

Example:
    >>> class Bolt(WindowedBoltConfigMixin):
    ...     pass
    >>> cfg = Bolt().with_window(Count(30), Count(10)).window_config
    >>> cfg.window_length, cfg.sliding_interval
    (Count(30), Count(10))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

from kstorm.errors import ConfigError
from kstorm.windowing.config import WindowConfig, as_timestamp_extractor
from kstorm.windowing.durations import Count, Duration

_SETTINGS = "_kstorm_window_settings"
_NO_SESSION = {"session_gap": None, "session_max_duration": None, "session_key_fields": None}


def _length(value: object, what: str) -> Count | Duration:
    if not isinstance(value, Count | Duration):
        msg = f"{what} must be a Count or a Duration, got {value!r}"
        raise ConfigError(msg)
    if isinstance(value, Duration) and value.ms <= 0:
        msg = f"{what} must be positive, got {value!r}"
        raise ConfigError(msg)
    return value


def _duration(value: object, what: str) -> Duration:
    if not isinstance(value, Duration):
        msg = f"{what} must be a Duration, got {value!r}"
        raise ConfigError(msg)
    return value


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{what} must be a non-empty string, got {value!r}"
        raise ConfigError(msg)
    return value


class WindowedBoltConfigMixin:
    """Adds Storm's window builder methods and a validated :attr:`window_config`.

    The settings live in the instance's ``__dict__`` (no ``__init__`` to chain), so the bolt
    stays picklable.
    """

    def _window_settings(self) -> dict[str, Any]:
        return self.__dict__.setdefault(_SETTINGS, {})

    def _set(self, **values: Any) -> Self:
        self._window_settings().update(values)
        return self

    def with_window(self, length: Count | Duration,
                    sliding: Count | Duration | None = None) -> Self:
        """Sliding window of ``length``, evaluated every ``sliding`` (default: every tuple)."""
        length = _length(length, "window length")
        sliding = Count(1) if sliding is None else _length(sliding, "sliding interval")
        return self._set(window_length=length, sliding_interval=sliding, tumbling=False,
                         **_NO_SESSION)

    def with_tumbling_window(self, length: Count | Duration) -> Self:
        """Non-overlapping windows of ``length`` tuples or time."""
        length = _length(length, "window length")
        return self._set(window_length=length, sliding_interval=length, tumbling=True,
                         **_NO_SESSION)

    def with_session_window(self, gap: Duration, max_duration: Duration | None = None, *,
                            key_fields: Sequence[str] | None = None) -> Self:
        """Session windows: bursts of activity separated by at least ``gap`` of silence.

        Per task and per key, tuples whose timestamps are at most ``gap`` apart share a
        session; a tuple that bridges two sessions merges them. A session fires
        ``execute(window)`` once, when the watermark (event time) or the processing time
        passes its end: its last tuple + ``gap``, or ``first + max_duration`` if that is
        sooner (a tuple past it starts the next session). The key is ``key_fields`` or, by
        default, the fields of the bolt's fields grouping (``()``: one session stream per
        task). Rules in :mod:`kstorm.windowing.sessions`.

        Example:
            >>> class Bolt(WindowedBoltConfigMixin):
            ...     pass
            >>> cfg = Bolt().with_session_window(Duration.minutes(30), key_fields=["user"]
            ...                                  ).window_config
            >>> cfg.session_gap, cfg.session_key_fields
            (Duration.millis(1800000), ('user',))
        """
        gap = _duration(gap, "session gap")
        if max_duration is not None:
            max_duration = _duration(max_duration, "session max duration")
        if key_fields is not None:
            if isinstance(key_fields, str):
                msg = (f"key_fields must be a list of field names, got the string "
                       f"{key_fields!r}: write key_fields=[{key_fields!r}]")
                raise ConfigError(msg)
            key_fields = tuple(key_fields)
        return self._set(window_length=gap, sliding_interval=gap, tumbling=True,
                         session_gap=gap, session_max_duration=max_duration,
                         session_key_fields=key_fields)

    def with_window_boundaries(self, boundaries: str) -> Self:
        """Which bound of a time window holds a tuple exactly on it.

        ``"end-inclusive"`` (Storm's rule and the default: ``end - length < ts <= end``) or
        ``"start-inclusive"`` (``start <= ts < end``: what Spark, Flink and Kafka Streams
        do, so the same data gives the same windows as theirs).
        """
        return self._set(boundaries=boundaries)

    def with_timestamp_field(self, name: str) -> Self:
        """Use event time read from the int field ``name`` (ms)."""
        self._check_no_timestamp()
        return self._set(timestamp_field=_name(name, "timestamp field"))

    def with_timestamp_extractor(self, extractor: Callable[[Any], int] | Any) -> Self:
        """Use event time computed by ``extractor`` (ms; must be picklable).

        ``extractor`` is a callable ``(tuple) -> int`` or, as in Storm, an object with
        ``extract_timestamp(tuple) -> int`` (a ``TimestampExtractor``).
        """
        extractor = as_timestamp_extractor(extractor)
        self._check_no_timestamp()
        return self._set(timestamp_extractor=extractor)

    def with_lag(self, lag: Duration) -> Self:
        """Maximum out-of-orderness of tuple timestamps."""
        return self._set(lag=_duration(lag, "lag"))

    def with_watermark_interval(self, interval: Duration) -> Self:
        """The watermark advances at most once per ``interval`` (Storm's watermark interval).

        Without it the watermark is evaluated once per micro-batch (the trigger interval,
        ``kstorm.trigger.interval.ms``, is the watermark interval). With it, a windowed bolt
        advances its watermark at the first micro-batch at least ``interval`` of batch time
        after the last advance, as Storm's timer does; windows then close at most that often.
        The built-in ``WindowedAggregate`` closes windows every micro-batch and refuses it.
        """
        interval = _duration(interval, "watermark interval")
        if interval.ms <= 0:
            msg = f"watermark interval must be positive, got {interval!r}"
            raise ConfigError(msg)
        return self._set(watermark_interval=interval)

    def with_idle_timeout(self, timeout: Duration) -> Self:
        """Event time: input streams silent for longer than ``timeout`` leave the watermark.

        So one idle Kafka partition does not hold every window back (a kstorm addition).
        """
        timeout = _duration(timeout, "idle timeout")
        if timeout.ms <= 0:
            msg = f"idle timeout must be positive, got {timeout!r}"
            raise ConfigError(msg)
        return self._set(idle_timeout=timeout)

    def with_late_tuple_stream(self, stream_id: str) -> Self:
        """Emit late tuples on ``stream_id`` (field ``late_tuple``) instead of dropping them."""
        return self._set(late_tuple_stream=_name(stream_id, "late tuple stream id"))

    def with_message_id_field(self, name: str) -> Self:
        """Field holding a monotonically increasing id (stateful windowing bookkeeping)."""
        return self._set(message_id_field=_name(name, "message id field"))

    def with_persistence(self) -> Self:
        """Keep the window's tuples in the state backend (window checkpointing)."""
        return self._set(persistent=True)

    def with_max_events_in_memory(self, n: int) -> Self:
        """At most ``n`` tuples of a persistent window cached in memory."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            msg = f"max events in memory must be an int >= 1, got {n!r}"
            raise ConfigError(msg)
        return self._set(max_events_in_memory=n)

    @property
    def window_config(self) -> WindowConfig:
        """The validated configuration; ``ConfigError`` if no window was declared."""
        settings = dict(self._window_settings())
        if "window_length" not in settings:
            msg = (
                f"{type(self).__name__} has no window: call with_window(...) or "
                "with_tumbling_window(...)"
            )
            raise ConfigError(msg)
        return WindowConfig(**settings)

    def check_window_inputs(self, component_id: str, inputs: Sequence[Any], *,
                            declared: Mapping[str, Mapping[str, Any]]) -> None:
        """Refuse, when the topology is built, a window its inputs could never feed.

        Storm's ``WindowedBoltExecutor`` throws ``IllegalArgumentException`` at its start for
        a bolt without a window or with a late tuple stream but no timestamp field, and at
        each tuple for a timestamp field the tuple lacks: here each is a
        :class:`~kstorm.errors.ConfigError` naming the bolt, before anything runs.
        ``inputs`` are the bolt's groupings, ``declared`` each component's streams' fields.
        """
        try:
            config = self.window_config
        except ConfigError as exc:
            msg = f"windowed bolt {component_id!r}: {exc}"
            raise ConfigError(msg, hint=exc.hint) from exc
        for what, name in (("timestamp field", config.timestamp_field),
                           ("message id field", config.message_id_field)):
            if name is None:
                continue
            for g in inputs:
                fields = declared[g.component][g.stream]
                if name not in fields:
                    msg = (f"windowed bolt {component_id!r}: {what} {name!r} is not a field "
                           f"of its input {g.component}:{g.stream}, which declares "
                           f"{list(fields)}: every tuple of it would fail")
                    raise ConfigError(msg, hint=f"declare {name!r} on {g.component}:"
                                      f"{g.stream}, or name one of its fields")

    def _check_no_timestamp(self) -> None:
        settings = self._window_settings()
        if settings.get("timestamp_field") or settings.get("timestamp_extractor"):
            msg = (
                f"{type(self).__name__} is already configured with a timestamp field or "
                "extractor"
            )
            raise ConfigError(msg)
