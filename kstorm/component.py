"""What every spout and bolt shares: output declarations and the topology context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kstorm._ids import is_reserved
from kstorm.errors import TopologyError
from kstorm.tuple import DEFAULT_STREAM, Fields


class OutputFieldsDeclarer:
    """Collects the streams a component emits on (Storm ``OutputFieldsDeclarer``).

    Example:
        >>> d = OutputFieldsDeclarer("split")
        >>> d.declare(Fields("word"))
        >>> d.declare_stream("errors", Fields("line", "reason"))
        >>> sorted(d.streams)
        ['default', 'errors']
    """

    def __init__(self, component_id: str) -> None:
        self.component_id = component_id
        self.streams: dict[str, Fields] = {}

    def declare(self, fields: Fields) -> None:
        """Declare the fields of the default stream."""
        self.declare_stream(DEFAULT_STREAM, fields)

    def declare_stream(self, stream_id: str, fields: Fields, *, _internal: bool = False) -> None:
        """Declare a named stream and its fields."""
        if not isinstance(fields, Fields):
            msg = (
                f"component {self.component_id!r}: stream {stream_id!r} must be declared with "
                f"Fields(...), got {type(fields).__name__}"
            )
            raise TopologyError(
                msg
            )
        if not stream_id or not isinstance(stream_id, str):
            msg = f"component {self.component_id!r}: stream ids are non-empty str"
            raise TopologyError(msg)
        if is_reserved(stream_id) and not _internal:
            msg = (
                f"component {self.component_id!r}: stream id {stream_id!r} is reserved "
                f"(ids starting with '__' belong to kstorm)"
            )
            raise TopologyError(
                msg
            )
        if stream_id in self.streams:
            msg = f"component {self.component_id!r} declares stream {stream_id!r} twice"
            raise TopologyError(
                msg
            )
        self.streams[stream_id] = fields


@dataclass(frozen=True)
class TopologyContext:
    """Where a running component instance is: its id, task, and the current batch (txid)."""

    topology_name: str
    component_id: str
    task_index: int = 0
    num_tasks: int = 1
    batch_id: int = -1
    output_streams: dict[str, Fields] = field(default_factory=dict)

    def get_this_component_id(self) -> str:
        """The id of the component this task runs."""
        return self.component_id

    def get_this_task_index(self) -> int:
        """Index of this task among the component's tasks (0-based)."""
        return self.task_index

    def get_this_output_fields(self, stream_id: str = DEFAULT_STREAM) -> Fields:
        """Declared fields of one of this component's output streams."""
        return self.output_streams[stream_id]


class Component:
    """Base of spouts and bolts (Storm ``IComponent``).

    Components are picklable *declarations*: they are built on the driver and copied to
    every task. Create connections and clients in ``open``/``prepare``, not in ``__init__``.
    """

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the output streams; the default declares none."""

    def get_component_configuration(self) -> dict[str, Any] | None:
        """Component-specific configuration overrides (Storm semantics)."""
        return None
