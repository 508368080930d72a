"""Window lengths and sliding intervals as value objects (Storm ``Count`` / ``Duration``).

A window length or sliding interval is either a number of tuples (:class:`Count`) or a span of
time in milliseconds (:class:`Duration`). Both are validated on construction, so a bad value
fails where it is written, not when the topology runs.

Example:
    >>> Count(30)
    Count(30)
    >>> Duration.seconds(10).millis
    10000
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kstorm.errors import ConfigError

_MS_PER = {"seconds": 1_000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}


def _whole_number(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{what} must be a whole number, got {type(value).__name__} {value!r}"
        raise ConfigError(msg)
    return value


@dataclass(frozen=True, slots=True)
class Count:
    """A number of tuples, at least 1.

    Example:
        >>> Count(3).n
        3
        >>> Count(0)
        Traceback (most recent call last):
        ...
        kstorm.errors.ConfigError: Count must be at least 1, got 0
    """

    n: int

    def __post_init__(self) -> None:
        if _whole_number(self.n, "Count") < 1:
            msg = f"Count must be at least 1, got {self.n}"
            raise ConfigError(msg)

    def __repr__(self) -> str:
        return f"Count({self.n})"


class _Millis:
    """``Duration.millis(n)`` builds a Duration; ``d.millis`` reads one (Storm has both)."""

    def __get__(self, obj: Duration | None, owner: type[Duration]) -> Any:
        if obj is None:
            return lambda value: owner(_whole_number(value, "Duration.millis"))
        return obj.ms


@dataclass(frozen=True, slots=True)
class Duration:
    """A non-negative span of time, held in milliseconds.

    Build one with a unit constructor (``Duration.millis(n)`` ... ``Duration.days(n)``) and
    read it back with the ``millis`` property; window lengths and sliding intervals must also be
    positive (checked by :class:`~kstorm.windowing.WindowConfig`), a lag may be zero.

    Example:
        >>> Duration.minutes(2) == Duration.seconds(120)
        True
        >>> Duration.millis(1500).millis
        1500
        >>> Duration.millis(-1)
        Traceback (most recent call last):
        ...
        kstorm.errors.ConfigError: Duration cannot be negative, got -1 ms
    """

    ms: int

    def __post_init__(self) -> None:
        if _whole_number(self.ms, "Duration") < 0:
            msg = f"Duration cannot be negative, got {self.ms} ms"
            raise ConfigError(msg)

    millis = _Millis()

    @classmethod
    def seconds(cls, value: int) -> Duration:
        """``value`` seconds."""
        return cls(_whole_number(value, "Duration.seconds") * _MS_PER["seconds"])

    @classmethod
    def minutes(cls, value: int) -> Duration:
        """``value`` minutes."""
        return cls(_whole_number(value, "Duration.minutes") * _MS_PER["minutes"])

    @classmethod
    def hours(cls, value: int) -> Duration:
        """``value`` hours."""
        return cls(_whole_number(value, "Duration.hours") * _MS_PER["hours"])

    @classmethod
    def days(cls, value: int) -> Duration:
        """``value`` days."""
        return cls(_whole_number(value, "Duration.days") * _MS_PER["days"])

    def __repr__(self) -> str:
        return f"Duration.millis({self.ms})"
