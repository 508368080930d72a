"""Spouts (Storm ``IRichSpout``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kstorm.component import Component, TopologyContext
from kstorm.tuple import DEFAULT_STREAM


class SpoutOutputCollector:
    """Emits spout tuples; a tuple emitted with a ``message_id`` is tracked for ack/fail."""

    def __init__(self, emit: Callable[[str, list[Any], Any], None]) -> None:
        self._emit = emit

    def emit(self, values: Sequence[Any], message_id: Any = None, *,
             stream: str = DEFAULT_STREAM) -> None:
        """Emit ``values`` on ``stream``; ``message_id`` None means untracked."""
        self._emit(stream, list(values), message_id)


class BaseRichSpout(Component):
    """A source of tuples (Storm ``BaseRichSpout``).

    kstorm runs replayable spouts: :class:`kstorm.KafkaSpout` (offsets are message ids) and
    :class:`kstorm.testing.ListSpout`. Batches of a spout are fixed before they run.
    """

    def open(self, conf: dict[str, Any], context: TopologyContext,
             collector: SpoutOutputCollector) -> None:
        """Called once before the first ``next_tuple``."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples."""

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out."""

    def close(self) -> None:
        """Called when the spout shuts down."""
