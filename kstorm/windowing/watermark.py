"""Watermarks for event-time windows (Storm ``WaterMarkEventGenerator``).

The watermark is the minimum, over the input streams, of the latest tuple timestamp seen on
each, minus the lag: no tuple older than it is expected any more. A stream is any hashable key:
``(component, stream)`` as in Storm, or a Kafka topic-partition. A watermark is emitted only when
it advances. Like Storm, no watermark exists until every declared stream has delivered a tuple.

**Idle streams** (a kstorm addition; Storm has no such option, so one silent input holds every
window back forever). With ``idle_timeout``, a stream that has delivered nothing for that long
in *processing* time (the ``now_ms`` you pass) stops holding the watermark back; a declared
stream that never delivered counts from the first ``now_ms`` the tracker saw. When the stream
delivers again it rejoins the minimum; the watermark never goes back, so its tuples older than
the watermark are late. If every stream is idle the watermark stays where it is.

Example:
    >>> t = WatermarkTracker(lag=Duration.seconds(5), streams=["p0", "p1"])
    >>> t.track("p0", 36_000); t.emit() is None  # p1 has no data yet
    True
    >>> t.track("p1", 40_000); t.emit()
    31000
    >>> t.emit() is None  # unchanged: not emitted again
    True
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from kstorm.errors import ConfigError
from kstorm.windowing.durations import Duration


def _ms(value: Duration | int | None, what: str, minimum: int) -> int | None:
    if value is None:
        return None
    ms = value.ms if isinstance(value, Duration) else value
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < minimum:
        msg = f"{what} must be a Duration or int ms >= {minimum}, got {value!r}"
        raise ConfigError(msg)
    return ms


class WatermarkTracker:
    """Per-stream latest timestamps and the watermark derived from them.

    Args:
        lag: Maximum out-of-orderness (:class:`Duration` or ms).
        interval: Minimum processing time between two :meth:`poll` emissions.
        streams: Streams expected to deliver before any watermark is emitted.
        idle_timeout: After this much processing time without tuples a stream no longer holds
            the watermark back (``None``: never, as in Storm).
    """

    def __init__(self, lag: Duration | int = 0, *, interval: Duration | int = 1000,
                 streams: Iterable[Hashable] = (),
                 idle_timeout: Duration | int | None = None) -> None:
        self._lag = _ms(lag, "lag", 0) or 0
        self._interval = _ms(interval, "watermark interval", 1) or 1
        self._idle = _ms(idle_timeout, "idle timeout", 1)
        self._streams = tuple(dict.fromkeys(streams))
        self._latest: dict[Hashable, int] = {}
        self._active: dict[Hashable, int] = {}  # stream -> processing time of its last tuple
        self._since: int | None = None  # first processing time seen
        self._last: int | None = None  # last emitted watermark
        self._next_due: int | None = None

    def track(self, stream: Hashable, ts: int, now_ms: int | None = None) -> None:
        """Record a tuple with timestamp ``ts`` on ``stream``, received at ``now_ms``."""
        latest = self._latest.get(stream)
        if latest is None or ts > latest:
            self._latest[stream] = ts
        if now_ms is not None:
            self._active[stream] = now_ms
            if self._since is None:
                self._since = now_ms

    def latest(self, stream: Hashable) -> int | None:
        """The latest timestamp ``stream`` delivered (None: nothing yet)."""
        return self._latest.get(stream)

    @property
    def lag(self) -> int:
        """The lag in ms."""
        return self._lag

    def current(self, now_ms: int | None = None) -> int | None:
        """The watermark as of now (``None`` while some non-idle stream has no data)."""
        if now_ms is not None and self._since is None:
            self._since = now_ms
        low: int | None = None
        for stream in (*self._streams, *(s for s in self._latest if s not in self._streams)):
            if self._is_idle(stream, now_ms):
                continue
            ts = self._latest.get(stream)
            if ts is None:
                return None
            if low is None or ts < low:
                low = ts
        return None if low is None else low - self._lag

    def _is_idle(self, stream: Hashable, now_ms: int | None) -> bool:
        if self._idle is None or now_ms is None:
            return False
        active = self._active.get(stream, self._since)
        return active is not None and now_ms - active >= self._idle

    def emit(self, now_ms: int | None = None) -> int | None:
        """The new watermark if it advanced past the last emitted one, else ``None``."""
        watermark = self.current(now_ms)
        if watermark is None or (self._last is not None and watermark <= self._last):
            return None
        self._last = watermark
        return watermark

    def poll(self, now_ms: int) -> int | None:
        """Like :meth:`emit`, at most once per ``interval`` of processing time (Storm's timer)."""
        if self._since is None:
            self._since = now_ms
        if self._next_due is None:
            self._next_due = self._since + self._interval
        if now_ms < self._next_due:
            return None
        self._next_due = now_ms + self._interval
        return self.emit(now_ms)

    def next_poll_at(self, now_ms: int) -> int | None:
        """When :meth:`poll` would next emit an advanced watermark (``None``: no advance due).

        A runtime sets a timer there: Storm's watermark is a timer, so the windows that are
        due fire within one interval even when no tuple comes.

        Example:
            >>> t = WatermarkTracker(streams=["p0"], interval=1000)
            >>> t.track("p0", 5_000, now_ms=0); t.poll(0) is None
            True
            >>> t.next_poll_at(10)
            1000
        """
        watermark = self.current(now_ms)
        if watermark is None or (self._last is not None and watermark <= self._last):
            return None
        due = self._next_due if self._next_due is not None else (
            (self._since if self._since is not None else now_ms) + self._interval)
        return max(due, now_ms + 1)

    def next_idle_at(self, now_ms: int) -> int | None:
        """The next processing time at which a stream becomes idle (``None``: never).

        A runtime sets a timer there, so the watermark moves on without new tuples.

        Example:
            >>> t = WatermarkTracker(streams=["p0"], idle_timeout=500)
            >>> t.track("p0", 10, now_ms=1_000); t.next_idle_at(1_200)
            1500
        """
        if self._idle is None:
            return None
        moments = [self._active.get(s, self._since) for s in (*self._streams, *self._latest)]
        later = [m + self._idle for m in moments if m is not None and m + self._idle > now_ms]
        return min(later) if later else None

    @property
    def watermark(self) -> int | None:
        """The last emitted watermark."""
        return self._last

    def snapshot(self) -> dict[str, Any]:
        """Plain, picklable state."""
        return {"latest": dict(self._latest), "active": dict(self._active),
                "since": self._since, "last": self._last, "next_due": self._next_due}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace the state with a :meth:`snapshot`."""
        self._latest = dict(snapshot["latest"])
        self._active = dict(snapshot["active"])
        self._since, self._last = snapshot["since"], snapshot["last"]
        self._next_due = snapshot["next_due"]
