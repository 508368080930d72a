"""Building and validating topologies (Storm ``TopologyBuilder``).

Example:
    >>> from kstorm import TopologyBuilder, Fields
    >>> builder = TopologyBuilder()
    >>> builder.set_spout("sentences", spout)                                 # doctest: +SKIP
    >>> split = builder.set_bolt("split", SplitSentence(), 2)              # doctest: +SKIP
    >>> split.shuffle_grouping("sentences")                                # doctest: +SKIP
    >>> count = builder.set_bolt("count", WordCount(), 4)                  # doctest: +SKIP
    >>> count.fields_grouping("split", Fields("word"))                     # doctest: +SKIP
    >>> topology = builder.create_topology()                                   # doctest: +SKIP
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kstorm._ids import is_reserved
from kstorm.component import Component, OutputFieldsDeclarer
from kstorm.errors import TopologyError
from kstorm.grouping import Grouping, GroupingKind
from kstorm.spout import BaseRichSpout
from kstorm.tuple import DEFAULT_STREAM, Fields


@dataclass(frozen=True)
class ComponentSpec:
    """One validated component of a topology."""

    id: str
    component: Component
    parallelism: int
    is_spout: bool
    inputs: tuple[Grouping, ...]
    streams: Mapping[str, Fields]
    conf: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StormTopology:
    """A validated topology: components in topological order (spouts first)."""

    components: Mapping[str, ComponentSpec]
    order: tuple[str, ...]
    committers: frozenset[str] = frozenset()  # bolts whose finish_batch is in the commit phase
    transactional_id: str | None = None  # a transactional topology's id (seed 002)

    def is_committer(self, component: str) -> bool:
        """Whether ``component`` commits (``set_committer_bolt`` or an ``ICommitter``)."""
        return component in self.committers or bool(
            getattr(self.components[component].component, "is_committer", False))

    def spouts(self) -> list[ComponentSpec]:
        """The spout specs."""
        return [self.components[c] for c in self.order if self.components[c].is_spout]

    def bolts(self) -> list[ComponentSpec]:
        """The bolt specs, upstream before downstream."""
        return [self.components[c] for c in self.order if not self.components[c].is_spout]

    def consumers(self, component: str, stream: str | None = None) -> list[tuple[str, Grouping]]:
        """``(bolt id, grouping)`` of every subscription to ``component`` (and ``stream``)."""
        return [
            (spec.id, g)
            for spec in self.bolts()
            for g in spec.inputs
            if g.component == component and (stream is None or g.stream == stream)
        ]


# Storm's keys a component may set for itself (Storm's component-level configuration),
# and what kstorm does with each; any other topology.*, kstorm.* or kafka.* key is
# topology-wide and refused on a component. Keys of the user's own pass to prepare/open.
COMPONENT_KEYS = {
    "topology.max.spout.pending": "spout",  # this spout's cap (setMaxSpoutPending)
    "topology.debug": "any",                 # passed to prepare/open
    "topology.tick.tuple.freq.secs": "bolt",  # this bolt's tick period (_runtime/ticks.py)
}
_TOPOLOGY_WIDE = ("topology.", "kstorm.", "kafka.", "storm.", "nimbus.", "supervisor.")


def _check_component_key(kind_of: str, cid: str, key: str, value: Any) -> None:
    """Refuse a component-level key that is topology-wide or not for this kind of component."""
    kind = COMPONENT_KEYS.get(key)
    if kind is None and key.startswith(_TOPOLOGY_WIDE):
        msg = (f"{kind_of} {cid!r}: {key!r} is a topology-wide key, not one a "
               f"component sets for itself (per component: {sorted(COMPONENT_KEYS)})")
        raise TopologyError(msg, hint=f"set {key} in the topology's configuration")
    if kind == "spout" and kind_of != "spout":
        msg = f"{kind_of} {cid!r}: {key!r} applies to spouts only"
        raise TopologyError(msg, hint=f"set {key} on the spout's declarer")
    if kind == "bolt" and kind_of != "bolt":
        msg = f"{kind_of} {cid!r}: {key!r} applies to bolts only"
        raise TopologyError(msg, hint=f"set {key} on a bolt's declarer")
    if key == "topology.max.spout.pending" and value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1):
        msg = f"spout {cid!r}: {key} must be an int >= 1 or None, got {value!r}"
        raise TopologyError(msg)
    if key == "topology.tick.tuple.freq.secs" and value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
        msg = f"bolt {cid!r}: {key} must be a number of seconds > 0 or None, got {value!r}"
        raise TopologyError(msg)


class _Declarer:
    _kind = "component"

    def __init__(self, builder: TopologyBuilder, component_id: str) -> None:
        self._builder = builder
        self.id = component_id

    def add_configuration(self, key: str, value: Any) -> _Declarer:
        """Set a component-level configuration key (Storm's ``addConfiguration``).

        The keys Storm lets a component set that kstorm honours per component
        (:data:`COMPONENT_KEYS`), or keys of your own (given to ``prepare``/``open``).

        Raises:
            TopologyError: a topology-wide key (e.g. ``topology.message.timeout.secs``),
                naming the component and the key.
        """
        _check_component_key(self._kind, self.id, key, value)
        self._builder._conf[self.id][key] = value
        return self

    def add_configurations(self, conf: Mapping[str, Any]) -> _Declarer:
        """:meth:`add_configuration` for each key of ``conf``."""
        for key, value in conf.items():
            self.add_configuration(key, value)
        return self

    def set_debug(self, debug: bool) -> _Declarer:
        """``topology.debug`` for this component (Storm's ``setDebug``)."""
        return self.add_configuration("topology.debug", bool(debug))

    def set_max_task_parallelism(self, n: int) -> _Declarer:
        """Cap the component's parallelism at ``n`` tasks (Storm's ``setMaxTaskParallelism``).

        The component runs ``min(declared parallelism, n)`` tasks, as Storm caps its
        executors; a cap above the declared parallelism changes nothing.

        Raises:
            TopologyError: ``n`` is not an int >= 1.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            msg = f"{self.id!r}: set_max_task_parallelism needs an int >= 1, got {n!r}"
            raise TopologyError(msg)
        self._builder._max_parallelism[self.id] = n
        return self


    def set_num_tasks(self, n: int) -> _Declarer:
        """The component's number of tasks (Storm's ``setNumTasks``).

        A kstorm task is Storm's task (what a fields grouping routes to, what keeps a
        stateful bolt's state); kstorm runs one per parallelism unit, so this sets the
        parallelism given to ``set_spout``/``set_bolt`` to ``n`` (Storm's executors run
        those tasks; Spark's cores run kstorm's).

        Raises:
            TopologyError: ``n`` is not an int >= 1.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            msg = f"{self.id!r}: set_num_tasks needs an int >= 1, got {n!r}"
            raise TopologyError(msg)
        comp, _, is_spout = self._builder._components[self.id]
        self._builder._components[self.id] = (comp, n, is_spout)
        return self


class SpoutDeclarer(_Declarer):
    """Returned by :meth:`TopologyBuilder.set_spout`."""

    _kind = "spout"

    def set_max_spout_pending(self, n: int | None) -> SpoutDeclarer:
        """At most ``n`` of this spout's tuples pending at once.

        Storm's ``setMaxSpoutPending``: ``topology.max.spout.pending`` for this spout alone.
        """
        self.add_configuration("topology.max.spout.pending", n)
        return self


class BoltDeclarer(_Declarer):
    """Returned by :meth:`TopologyBuilder.set_bolt`; subscribes the bolt to streams."""

    _kind = "bolt"

    def _add(self, kind: GroupingKind, component: str, stream: str,
             fields: Fields | None = None) -> BoltDeclarer:
        self._builder._inputs[self.id].append(Grouping(kind, component, stream, fields))
        return self

    def shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Tuples are spread randomly over the bolt's tasks."""
        return self._add(GroupingKind.SHUFFLE, component, stream)

    def local_or_shuffle_grouping(self, component: str,
                                  stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Prefer a task in the same worker (on Spark: the same partition)."""
        return self._add(GroupingKind.LOCAL_OR_SHUFFLE, component, stream)

    def none_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """No preference (currently the same as shuffle, as in Storm)."""
        return self._add(GroupingKind.NONE, component, stream)

    def fields_grouping(self, component: str, fields: Fields,
                        stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Tuples with equal values of ``fields`` go to the same task."""
        if not isinstance(fields, Fields) or len(fields) == 0:
            msg = (
                f"bolt {self.id!r}: fields_grouping on {component!r} needs non-empty "
                f"Fields(...), got {fields!r}"
            )
            raise TopologyError(
                msg
            )
        return self._add(GroupingKind.FIELDS, component, stream, fields)

    def global_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """The whole stream goes to a single task (the lowest id)."""
        return self._add(GroupingKind.GLOBAL, component, stream)

    def all_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Every task receives every tuple."""
        return self._add(GroupingKind.ALL, component, stream)

    def partial_key_grouping(self, component: str, fields: Fields,
                             stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Storm's partial key grouping: each key's tuples go to one task (of at most two).

        Storm splits a key over two candidate tasks by load; kstorm routes it to one, which
        its contract allows (a bolt merging partial results downstream still works) and
        which a replay repeats. The same as :meth:`fields_grouping` on ``fields``.
        """
        return self.fields_grouping(component, fields, stream)

    def direct_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Refused: kstorm has no direct grouping (``emit_direct``) (see docs/limits.md)."""
        msg = (f"bolt {self.id!r}: direct_grouping on {component!r} is not supported (kstorm "
               "routes tuples by Spark partitioning, not by an emitter's choice of task)")
        raise TopologyError(msg, hint="fields_grouping on a field holding a key (equal keys "
                            "reach one task), or all_grouping with each task keeping the tuples "
                            "addressed to context.get_this_task_index()")

    def custom_grouping(self, component: str, grouping: Any,
                        stream: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Refused: kstorm has no ``CustomStreamGrouping`` (see docs/limits.md)."""
        msg = (f"bolt {self.id!r}: custom_grouping on {component!r} is not supported (kstorm "
               "routes tuples by Spark partitioning, decided when the topology is built)")
        raise TopologyError(msg, hint="put the routing key in a field and fields_grouping "
                            "on it, or use shuffle, global or all grouping")


class TopologyBuilder:
    """Declares spouts and bolts and wires them with groupings."""

    def __init__(self) -> None:
        self._components: dict[str, tuple[Component, int, bool]] = {}
        self._inputs: dict[str, list[Grouping]] = {}
        self._conf: dict[str, dict[str, Any]] = {}
        self._max_parallelism: dict[str, int] = {}  # set_max_task_parallelism caps
        self._committers: set[str] = set()
        self._transactional_id: str | None = None

    def set_spout(self, component_id: str, spout: Component,
                  parallelism: int = 1) -> SpoutDeclarer:
        """Add a spout; ``parallelism`` is its number of tasks."""
        self._add(component_id, spout, parallelism, is_spout=True)
        return SpoutDeclarer(self, component_id)

    def set_bolt(self, component_id: str, bolt: Component, parallelism: int = 1) -> BoltDeclarer:
        """Add a bolt; subscribe it to streams with the returned declarer's groupings."""
        self._add(component_id, bolt, parallelism, is_spout=False)
        return BoltDeclarer(self, component_id)

    def _add(self, cid: str, comp: Component, parallelism: int, *, is_spout: bool) -> None:
        kind = "spout" if is_spout else "bolt"
        if not isinstance(cid, str) or not cid:
            msg = f"{kind} ids must be non-empty strings, got {cid!r}"
            raise TopologyError(msg)
        if is_reserved(cid):
            msg = (
                f"{kind} id {cid!r} is reserved (ids starting with '__' "
                                "belong to kstorm's implicit components)"
            )
            raise TopologyError(msg)
        if cid in self._components:
            msg = f"duplicate component id {cid!r}: ids must be unique"
            raise TopologyError(msg)
        if not isinstance(comp, Component):
            msg = (
                f"{kind} {cid!r} must be a kstorm spout/bolt, "
                                f"got {type(comp).__name__}"
            )
            raise TopologyError(msg)
        if is_spout and not isinstance(comp, BaseRichSpout) and not _is_spout_like(comp):
            msg = f"spout {cid!r} is a {type(comp).__name__}, not a spout"
            raise TopologyError(msg)
        if not is_spout and (isinstance(comp, BaseRichSpout) or _is_spout_like(comp)):
            msg = (
                f"bolt {cid!r} is a spout ({type(comp).__name__}); "
                                "use set_spout"
            )
            raise TopologyError(msg)
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            msg = (
                f"{kind} {cid!r}: parallelism must be an int >= 1, "
                                f"got {parallelism!r}"
            )
            raise TopologyError(msg)
        self._components[cid] = (comp, parallelism, is_spout)
        self._inputs[cid] = []
        self._conf[cid] = {}

    def create_topology(self) -> StormTopology:
        """Validate the graph and freeze it; raises :class:`TopologyError` naming the part."""
        if not any(s for _, _, s in self._components.values()):
            msg = "a topology needs at least one spout"
            raise TopologyError(msg)
        streams = {cid: _declared_streams(cid, comp)
                   for cid, (comp, _, _) in self._components.items()}
        for cid, (comp, par, is_spout) in self._components.items():
            if not is_spout:
                _check_inputs(cid, self._inputs[cid], streams, self._components)
                window = getattr(comp, "check_window_inputs", None)  # a windowed bolt's
                if window is not None:
                    window(cid, list(self._inputs[cid]), declared=MappingProxyType(streams))
                own = getattr(comp, "check_subscriptions", None)  # e.g. JoinBolt's inputs
                if own is not None:  # with the tasks it runs and its inputs' declared fields
                    own(cid, list(self._inputs[cid]),
                        parallelism=min(par, self._max_parallelism.get(cid, par)),
                        declared=MappingProxyType(streams))
        order = _topological_order(self._components, self._inputs)
        specs = {
            cid: ComponentSpec(
                id=cid,
                component=_declaration_copy(cid, comp, is_spout),
                parallelism=min(par, self._max_parallelism.get(cid, par)),
                is_spout=is_spout,
                inputs=tuple(self._inputs[cid]),
                streams=MappingProxyType(streams[cid]),
                conf=MappingProxyType(_component_conf(cid, comp, is_spout, self._conf[cid])),
            )
            for cid, (comp, par, is_spout) in self._components.items()
        }
        return StormTopology(MappingProxyType(specs), order, frozenset(self._committers),
                             self._transactional_id)


def _declaration_copy(cid: str, comp: Component, is_spout: bool) -> Component:
    """A copy of the declaration: what the runtime ships to the executors (pickled).

    A component that cannot be copied holds a live resource (a lock, a socket, a client)
    made in ``__init__``; it would fail to pickle on Spark too, so it is refused here, by id.
    """
    try:
        return copy.deepcopy(comp)
    except Exception as exc:
        kind, start = ("spout", "open()") if is_spout else ("bolt", "prepare()")
        msg = (f"{kind} {cid!r} ({type(comp).__name__}) cannot be copied to the executors: "
               f"{type(exc).__name__}: {exc}")
        raise TopologyError(msg, hint=f"a component is a picklable declaration: create locks, "
                            f"connections and clients in {start}, not in __init__") from exc


def _component_conf(cid: str, comp: Component, is_spout: bool,
                    declared: Mapping[str, Any]) -> dict[str, Any]:
    """The component's ``get_component_configuration()``, then its declarer's keys over it.

    Storm merges the two the same way; each key is checked as ``add_configuration`` checks it.
    """
    try:
        own = comp.get_component_configuration() or {}
    except Exception as exc:
        msg = f"{cid!r}: get_component_configuration() raised {type(exc).__name__}: {exc}"
        raise TopologyError(msg) from exc
    if not isinstance(own, Mapping):
        msg = (f"{cid!r}: get_component_configuration() must return a dict or None, got "
               f"{type(own).__name__}")
        raise TopologyError(msg)
    for key, value in own.items():
        _check_component_key("spout" if is_spout else "bolt", cid, str(key), value)
    return {**own, **declared}


def _is_spout_like(comp: Component) -> bool:
    return bool(getattr(comp, "is_spout", False))


def _declared_streams(cid: str, comp: Component) -> dict[str, Fields]:
    declarer = OutputFieldsDeclarer(cid)
    try:
        comp.declare_output_fields(declarer)
    except TopologyError:
        raise
    except Exception as exc:
        msg = f"component {cid!r}: declare_output_fields failed: {exc}"
        raise TopologyError(msg) from exc
    extra = getattr(comp, "implicit_streams", None)
    if extra is not None:
        for stream, fields in extra().items():
            declarer.declare_stream(stream, fields, _internal=True)
    return declarer.streams


def _check_inputs(cid: str, inputs: list[Grouping], streams: dict[str, dict[str, Fields]],
                  components: dict[str, tuple[Component, int, bool]]) -> None:
    if not inputs:
        msg = (
            f"bolt {cid!r} subscribes to nothing: add a grouping, e.g. "
                            f"set_bolt({cid!r}, ...).shuffle_grouping('<component>')"
        )
        raise TopologyError(msg)
    seen: set[tuple[str, str]] = set()
    for g in inputs:
        if g.component not in components:
            known = sorted(components)
            msg = (
                f"bolt {cid!r} subscribes to unknown component "
                                f"{g.component!r}; known components: {known}"
            )
            raise TopologyError(msg)
        declared = streams[g.component]
        if g.stream not in declared:
            msg = (
                f"bolt {cid!r} subscribes to stream {g.stream!r} of "
                                f"{g.component!r}, which declares only {sorted(declared)}"
            )
            raise TopologyError(msg)
        if g.fields is not None:
            missing = [f for f in g.fields if f not in declared[g.stream]]
            if missing:
                msg = (
                    f"bolt {cid!r}: fields grouping on {missing} but stream {g.stream!r} of "
                    f"{g.component!r} declares fields {declared[g.stream].to_list()}"
                )
                raise TopologyError(
                    msg)
        if (g.component, g.stream) in seen:
            msg = f"bolt {cid!r} subscribes twice to {g.component}:{g.stream}"
            raise TopologyError(msg)
        seen.add((g.component, g.stream))
        needed = getattr(components[cid][0], "needed_fields", None)
        missing = [f for f in (needed() if needed is not None else ())
                   if f not in declared[g.stream]]
        if missing:
            msg = (f"sink {cid!r} reads the fields {missing} ({components[cid][0]!r}), but "
                   f"stream {g.stream!r} of {g.component!r} declares fields "
                   f"{declared[g.stream].to_list()}")
            raise TopologyError(msg, hint=f"name fields of {g.component}:{g.stream} in the "
                                          "sink's key and value, or declare them there")


def _topological_order(components: dict[str, tuple[Component, int, bool]],
                       inputs: dict[str, list[Grouping]]) -> tuple[str, ...]:
    order: list[str] = []
    state: dict[str, int] = {}  # 1 = visiting, 2 = done

    def visit(cid: str, path: list[str]) -> None:
        if state.get(cid) == 2:
            return
        if state.get(cid) == 1:
            cycle = path[path.index(cid):] + [cid]
            msg = (
                f"topology has a cycle: {' -> '.join(reversed(cycle))}; "
                                f"component {cid!r} (directly or not) consumes its own output"
            )
            raise TopologyError(msg)
        state[cid] = 1
        for g in inputs[cid]:
            visit(g.component, path + [cid])
        state[cid] = 2
        order.append(cid)

    for cid in sorted(components, key=lambda c: (not components[c][2], c)):
        visit(cid, [])
    return tuple(order)
