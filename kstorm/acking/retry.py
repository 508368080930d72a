"""When to replay a failed spout tuple, and when to give up (dead letter).

The schedule is storm-kafka-client's ``KafkaSpoutRetryExponentialBackoff``:
the first retry waits ``initial_delay_ms``; retry ``n`` (n >= 2) waits
``delay_period_ms * 2**(n - 1)``; no wait exceeds ``max_delay_ms``. After
``max_retries`` retries the next failure is final. Defaults are Storm's
(0 ms, 2 ms, unlimited retries, 10 s).

Example:
    >>> policy = RetryPolicy(initial_delay_ms=100, delay_period_ms=50, max_retries=3)
    >>> [policy.delay_ms(n) for n in (1, 2, 3)]
    [100, 100, 200]
    >>> policy.allows_retry(3), policy.allows_retry(4)
    (True, False)
"""

from __future__ import annotations

from dataclasses import dataclass

from kstorm.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with a cap, and an optional retry limit.

    Attributes:
        initial_delay_ms: Wait before the first retry.
        delay_period_ms: Base of the exponential wait for later retries.
        max_delay_ms: Upper bound of any wait.
        max_retries: Retries allowed per message; ``None`` means unlimited.
    """

    initial_delay_ms: int = 0
    delay_period_ms: int = 2
    max_delay_ms: int = 10_000
    max_retries: int | None = None

    def __post_init__(self) -> None:
        for name in ("initial_delay_ms", "delay_period_ms", "max_delay_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                msg = f"retry policy {name} must be an int >= 0, got {value!r}"
                raise ConfigError(msg)
        retries = self.max_retries
        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or retries < 0
        ):
            msg = f"retry policy max_retries must be None or an int >= 0, got {retries!r}"
            raise ConfigError(msg)

    def allows_retry(self, num_fails: int) -> bool:
        """Whether a message that has failed ``num_fails`` times may be replayed."""
        return self.max_retries is None or num_fails <= self.max_retries

    def delay_ms(self, num_fails: int) -> int:
        """Wait before replaying a message that has failed ``num_fails`` (>= 1) times."""
        if num_fails <= 1:
            delay = self.initial_delay_ms
        else:
            delay = self.delay_period_ms << min(num_fails - 1, 62)
        return min(delay, self.max_delay_ms)
