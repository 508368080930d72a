"""Window lengths and sliding intervals as value objects (Storm ``Count`` / ``Duration``).

A window length or sliding interval is either a number of tuples (:class:`Count`) or a span of
time in milliseconds (:class:`Duration`). Both are validated on construction, so a bad value
fails where it is written, not when the topology runs.

Storm's spellings work too: ``Count.of(5)``, ``Duration.of(1500)`` (milliseconds, as
Storm's ``Duration.of``) and ``Duration(10, TimeUnit.SECONDS)`` (Storm's
``new Duration(10, TimeUnit.SECONDS)``).

Example:
    >>> Count(30)
    Count(30)
    >>> Duration.seconds(10).millis
    10000
    >>> Duration(10, TimeUnit.SECONDS) == Duration.of(10, TimeUnit.SECONDS) == Duration.seconds(10)
    True
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass
from enum import Enum
from typing import Any

from kstorm.errors import ConfigError

_MS_PER = {"seconds": 1_000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}


def _whole_number(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{what} must be a whole number, got {type(value).__name__} {value!r}"
        raise ConfigError(msg)
    return value


class TimeUnit(Enum):
    """Java's ``TimeUnit``, for Storm's ``new Duration(value, TimeUnit.SECONDS)``.

    Each member's value is its length in nanoseconds; :meth:`to_millis` truncates to whole
    milliseconds, as Java's ``TimeUnit.toMillis`` does.

    Example:
        >>> TimeUnit.MINUTES.to_millis(2)
        120000
    """

    NANOSECONDS = 1
    MICROSECONDS = 1_000
    MILLISECONDS = 1_000_000
    SECONDS = 1_000_000_000
    MINUTES = 60_000_000_000
    HOURS = 3_600_000_000_000
    DAYS = 86_400_000_000_000

    def to_millis(self, value: int) -> int:
        """``value`` of this unit in whole milliseconds (truncated, as Java's)."""
        return _whole_number(value, f"Duration in {self.name}") * self.value // 1_000_000


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

    @classmethod
    def of(cls, n: int) -> Count:
        """``n`` tuples (Storm's ``Count.of(n)``)."""
        return cls(n)

    @property
    def value(self) -> int:
        """The number of tuples (Storm's ``Count.value``)."""
        return self.n

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

    Build one with a unit constructor (``Duration.millis(n)`` ... ``Duration.days(n)``), or
    as Storm does with a :class:`TimeUnit` (``Duration(10, TimeUnit.SECONDS)``,
    ``Duration.of(10, TimeUnit.SECONDS)``; ``Duration(n)`` alone is ``n`` milliseconds),
    and read it back with the ``millis`` property; window lengths and sliding intervals must also be
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
    unit: InitVar[TimeUnit | None] = None

    def __post_init__(self, unit: TimeUnit | None) -> None:
        if unit is not None:
            if not isinstance(unit, TimeUnit):
                msg = f"Duration unit must be a TimeUnit, got {unit!r}"
                raise ConfigError(msg)
            object.__setattr__(self, "ms", unit.to_millis(self.ms))
        if _whole_number(self.ms, "Duration") < 0:
            msg = f"Duration cannot be negative, got {self.ms} ms"
            raise ConfigError(msg)

    millis = _Millis()

    @property
    def value(self) -> int:
        """The span in milliseconds (Storm's ``Duration.value``)."""
        return self.ms

    @classmethod
    def of(cls, value: int, unit: TimeUnit = TimeUnit.MILLISECONDS) -> Duration:
        """``value`` of ``unit``; milliseconds by default, as Storm's ``Duration.of(ms)``."""
        return cls(value, unit)

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
