"""What every spout and bolt shares: output declarations and the topology context."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kstorm._ids import is_reserved
from kstorm.errors import TopologyError
from kstorm.tuple import DEFAULT_STREAM, Fields

_errors = logging.getLogger("kstorm.errors")


def report_error(error: BaseException) -> None:
    """Log an error a component reported (Storm's ``reportError``, shown in Storm's UI)."""
    _errors.error("reported: %s: %s", type(error).__name__, error,
                  exc_info=(type(error), error, error.__traceback__))


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

    def declare(self, fields: Fields | bool, direct_fields: Fields | None = None) -> None:
        """Declare the fields of the default stream.

        Storm's ``declare(direct, fields)`` works as written with ``direct`` False (kstorm has
        no direct streams).
        """
        self.declare_stream(DEFAULT_STREAM, fields, direct_fields)

    def declare_stream(self, stream_id: str, fields: Fields | bool,
                       direct_fields: Fields | None = None, *, _internal: bool = False) -> None:
        """Declare a named stream and its fields (Storm's ``(stream, direct, fields)`` too)."""
        if isinstance(fields, bool):  # Storm's form with the direct flag
            if fields:
                msg = (f"component {self.component_id!r}: stream {stream_id!r} is declared "
                       "direct, but kstorm has no direct streams (emit_direct)")
                raise TopologyError(msg, hint="declare it with direct False (or leave the "
                                    "flag out) and route with a fields grouping")
            fields = direct_fields  # type: ignore[assignment]
        elif direct_fields is not None:
            msg = (f"component {self.component_id!r}: stream {stream_id!r}: declare(fields) or "
                   f"Storm's declare(direct, fields), got {fields!r}, {direct_fields!r}")
            raise TopologyError(msg)
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


class GlobalStreamId(NamedTuple):
    """A stream of a component (Storm's ``GlobalStreamId``)."""

    component_id: str
    stream_id: str


@dataclass(frozen=True)
class TopologyContext:
    """Where a running component instance is: its id, task, and the current batch (txid).

    With the topology it runs in (``topology``, set by the runtime), it also answers Storm's
    questions about the graph: :meth:`get_this_sources`, :meth:`get_this_targets`,
    :meth:`get_component_output_fields`, :meth:`get_component_tasks`,
    :meth:`get_this_task_id`.
    """

    topology_name: str
    component_id: str
    task_index: int = 0
    num_tasks: int = 1
    batch_id: int = -1
    output_streams: dict[str, Fields] = field(default_factory=dict)
    topology: Any = field(default=None, compare=False, repr=False)  # a StormTopology

    def get_this_component_id(self) -> str:
        """The id of the component this task runs."""
        return self.component_id

    def get_this_task_index(self) -> int:
        """Index of this task among the component's tasks (0-based)."""
        return self.task_index

    def get_this_task_id(self) -> int:
        """The id of this task in the topology (Storm's ``getThisTaskId``).

        Storm numbers a topology's tasks from 1 in component-id order; so does this (the
        component's first task id plus :meth:`get_this_task_index`). Without the topology (a
        context built by hand) it is the task index plus 1.
        """
        if self.topology is None:
            return self.task_index + 1
        return self.get_component_tasks(self.component_id)[self.task_index]

    def get_component_tasks(self, component_id: str) -> list[int]:
        """The task ids of ``component_id`` (see :meth:`get_this_task_id`)."""
        components = self._topology().components
        if component_id not in components:
            msg = f"no component {component_id!r} (the topology has {sorted(components)})"
            raise TopologyError(msg)
        first = 1
        for cid in sorted(components):
            if cid == component_id:
                return list(range(first, first + components[cid].parallelism))
            first += components[cid].parallelism
        raise AssertionError  # pragma: no cover - component_id is in components

    def get_task_to_component(self) -> dict[int, str]:
        """Every task id of the topology and the component it runs (Storm's)."""
        return {task: cid for cid in sorted(self._topology().components)
                for task in self.get_component_tasks(cid)}

    def get_component_id(self, task_id: int) -> str:
        """The component task ``task_id`` runs (Storm's ``getComponentId``).

        Raises:
            TopologyError: no such task (names the task ids there are).
        """
        tasks = self.get_task_to_component()
        if task_id not in tasks:
            msg = f"no task {task_id!r} (the topology's tasks are 1..{len(tasks)})"
            raise TopologyError(msg)
        return tasks[task_id]

    def get_component_ids(self) -> set[str]:
        """The ids of every spout and bolt of the topology (Storm's ``getComponentIds``)."""
        return set(self._topology().components)

    def get_storm_id(self) -> str:
        """The topology's name (Storm's ``getStormId``: the running topology's id)."""
        return self.topology_name

    def get_this_output_fields(self, stream_id: str = DEFAULT_STREAM) -> Fields:
        """Declared fields of one of this component's output streams."""
        return self.output_streams[stream_id]

    def get_this_streams(self) -> set[str]:
        """The ids of the streams this component declares."""
        return set(self.output_streams)

    def get_component_output_fields(self, component_id: str,
                                    stream_id: str = DEFAULT_STREAM) -> Fields:
        """The declared fields of ``component_id``'s stream ``stream_id``.

        Raises:
            TopologyError: no such component or stream (names what there is).
        """
        if component_id == self.component_id and stream_id in self.output_streams:
            return self.output_streams[stream_id]
        components = self._topology().components
        spec = components.get(component_id)
        if spec is None:
            msg = f"no component {component_id!r} (the topology has {sorted(components)})"
            raise TopologyError(msg)
        if stream_id not in spec.streams:
            msg = (f"component {component_id!r} declares no stream {stream_id!r} (it "
                   f"declares {sorted(spec.streams)})")
            raise TopologyError(msg)
        return spec.streams[stream_id]

    def get_this_sources(self) -> dict[GlobalStreamId, Any]:
        """The streams this component subscribes to, each with its grouping (Storm's)."""
        spec = self._topology().components[self.component_id]
        return {GlobalStreamId(g.component, g.stream): g for g in spec.inputs}

    def get_this_targets(self) -> dict[str, dict[str, Any]]:
        """``{stream id: {subscribing component: grouping}}`` of this component's streams."""
        targets: dict[str, dict[str, Any]] = {s: {} for s in self.output_streams}
        for bolt, grouping in self._topology().consumers(self.component_id):
            targets.setdefault(grouping.stream, {})[bolt] = grouping
        return targets

    def _topology(self) -> Any:
        if self.topology is None:
            msg = (f"component {self.component_id!r}: this TopologyContext was built without "
                   "its topology, so it cannot describe the graph")
            raise TopologyError(msg, hint="pass topology=... when building a TopologyContext "
                                "by hand (the runtime sets it)")
        return self.topology


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
