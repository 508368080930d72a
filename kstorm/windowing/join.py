"""Joins: ``JoinBolt`` (Storm 2's windowed join of streams) and ``TableJoinBolt``.

``TableJoinBolt`` joins a stream with a table: a second input (a compacted Kafka topic
read by a ``KafkaSpout``) whose tuples are the table's rows by key (see its docstring).

A windowed bolt (so lag, watermarks, late-tuple streams, replays and exactly-once sinks
apply as to any windowed bolt) that joins the tuples of each window by key, as Storm's
``org.apache.storm.bolt.JoinBolt`` does:

- ``JoinBolt("spout1", "id")`` (or ``JoinBolt(JoinBolt.Selector.STREAM, "stream1", "id")``)
  names the first input, told apart by source component (default) or by stream, and its key;
- ``.join(new, field, prior)`` adds an inner join of input ``new`` on ``new.field =
  prior's key``, ``.left_join(...)`` a left join (a row of the inputs so far with no match in
  ``new`` is kept, its ``new`` fields ``None``);
- ``.select("id, name, spout2:dept")`` chooses the output fields: ``field``, ``input:field``
  or a nested ``field.key`` (a dict lookup); the output field names are the descriptors
  without the ``input:`` part;
- ``.with_output_stream(name)``, and the window shapes of every windowed bolt
  (``with_tumbling_window``, ``with_window``, ``with_timestamp_field``, ``with_lag``, ...).

Each window is joined on its own (a hash join: the first input probes, the others are
hashed by their keys, joined in the order they were added). A result is anchored to the
tuples it joined. As in Storm, the bolt's tasks must get each key's tuples of every input:
group every input by its join field (``fields_grouping("spout1", Fields("id"))``, ...).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kstorm.bolt import BaseStatefulBolt
from kstorm.component import TopologyContext
from kstorm.errors import TopologyError
from kstorm.grouping import Grouping, GroupingKind
from kstorm.tuple import DEFAULT_STREAM, Fields, Tuple
from kstorm.windowing.bolt import BaseWindowedBolt
from kstorm.windowing.window import TupleWindow


class Selector(enum.Enum):
    """How :class:`JoinBolt` tells its inputs apart (Storm's ``JoinBolt.Selector``)."""

    SOURCE = "source"  # by the emitting component
    STREAM = "stream"  # by the stream id


@dataclass(frozen=True)
class FieldSelector:
    """``input:field.sub`` of :meth:`JoinBolt.select` (Storm's ``FieldSelector``)."""

    input: str | None
    path: tuple[str, ...]
    name: str  # the output field's name: the descriptor without ``input:``

    @classmethod
    def parse(cls, descriptor: str, input_: str | None = None) -> FieldSelector:
        """``"input:field.sub"`` or ``"field.sub"`` (``input_``: the input it belongs to)."""
        text = descriptor.strip()
        if input_ is None and ":" in text:
            input_, text = (part.strip() for part in text.split(":", 1))
        path = tuple(p.strip() for p in text.split("."))
        if not text or not all(path):
            msg = f"JoinBolt: {descriptor!r} is not a field: use 'field', 'input:field' or 'a.b'"
            raise TopologyError(msg)
        return cls(input_, path, text)

    def lookup(self, tuple_: Tuple, input_: str) -> Any:
        """The field's value in ``tuple_`` from ``input_``; ``None`` where it has none."""
        if self.input is not None and self.input.lower() != input_.lower():
            return None
        if not tuple_.contains(self.path[0]):
            return None
        value = tuple_.get_value_by_field(self.path[0])
        for key in self.path[1:]:
            value = value.get(key) if isinstance(value, Mapping) else None
            if value is None:
                return None
        return value


@dataclass(frozen=True)
class _Join:
    key: FieldSelector  # this input's join field
    prior: str | None = None  # the input it joins (None: the first)
    left: bool = False


Declared = Mapping[str, Mapping[str, Fields]]  # component -> stream -> its declared fields


def _check_key_field(bolt: str, what: str, key: FieldSelector, grouping: Grouping,
                     declared: Declared) -> None:
    """Refuse a join key naming a field the subscribed stream does not declare."""
    fields = declared[grouping.component][grouping.stream]
    if key.path[0] not in fields:
        msg = (f"{bolt}: {what} joins on field {key.path[0]!r}, but stream "
               f"{grouping.component}:{grouping.stream} declares fields {fields.to_list()}; "
               "none of its tuples would join")
        raise TopologyError(msg, hint="name a declared field as the join key")


def _check_selected(bolt: str, selectors: tuple[FieldSelector, ...],
                    inputs: Mapping[str, Grouping], declared: Declared) -> None:
    """Refuse a selected field that no input it may come from declares (always ``None``)."""
    for selector in selectors:
        names = [selector.input] if selector.input is not None else sorted(inputs)
        streams = [inputs[n] for n in names if n in inputs]
        if any(selector.path[0] in declared[g.component][g.stream] for g in streams):
            continue
        offered = {f"{g.component}:{g.stream}": declared[g.component][g.stream].to_list()
                   for g in streams}
        msg = (f"{bolt}: select names field {selector.path[0]!r}, which "
               f"{'its input' if selector.input is not None else 'none of its inputs'} "
               f"declares ({offered}); every joined row would hold None there")
        raise TopologyError(msg, hint="select a declared field (input:field)")


def _grouped_on(grouping: Grouping, key: FieldSelector) -> bool:
    """Whether ``grouping`` is a fields grouping on exactly the (top-level) join field."""
    return (grouping.kind is GroupingKind.FIELDS and len(key.path) == 1
            and grouping.fields == Fields(key.path[0]))


def _a(grouping: Grouping) -> str:
    """``"a shuffle grouping of c:s"``, ``"an all grouping of c:s"``."""
    text = str(grouping)
    return f"{'an' if text[0] in 'aeiou' else 'a'} {text}"


def _grouping_hint(key: FieldSelector, grouping: Grouping, rule: str) -> str:
    """What to use instead: the fields grouping on the join field (or parallelism 1)."""
    if len(key.path) > 1:
        return (f"its join field {'.'.join(key.path)!r} is nested and no grouping routes by "
                "it: copy it into a field of its own upstream and fields-group on that, or "
                "run the bolt with parallelism 1")
    stream = "" if grouping.stream == DEFAULT_STREAM else f", {grouping.stream!r}"
    return (f"use fields_grouping({grouping.component!r}, Fields({key.path[0]!r}){stream}) "
            f"({rule}), or run the bolt with parallelism 1")


class JoinBolt(BaseWindowedBolt):
    """Joins the tuples of each window by key (Storm's ``JoinBolt``; module docstring).

    Example:
        >>> from kstorm.windowing import Duration
        >>> bolt = (JoinBolt("users", "id").join("depts", "user_id", "users")
        ...         .select("id, name, depts:dept")
        ...         .with_tumbling_window(Duration.seconds(10)))
        >>> bolt.output_fields
        Fields('id', 'name', 'dept')
    """

    Selector = Selector

    def __init__(self, *args: Any) -> None:
        """``JoinBolt(input, field)`` or ``JoinBolt(Selector.STREAM, input, field)``."""
        if len(args) == 2:
            selector, (first, field) = Selector.SOURCE, args
        elif len(args) == 3:
            selector, first, field = args
        else:
            msg = ("JoinBolt takes (input, field) or (JoinBolt.Selector.SOURCE|STREAM, input, "
                   f"field), got {len(args)} arguments")
            raise TopologyError(msg)
        if not isinstance(selector, Selector):
            try:
                selector = Selector(str(selector).lower())
            except ValueError:
                msg = f"JoinBolt: selector {selector!r} is not JoinBolt.Selector.SOURCE or STREAM"
                raise TopologyError(msg) from None
        self.selector = selector
        self._joins: dict[str, _Join] = {first: _Join(FieldSelector.parse(field, first))}
        self._select: tuple[FieldSelector, ...] = ()
        self.output_stream: str | None = None

    # -- building -----------------------------------------------------------------------

    def join(self, new: str, field: str, prior: str) -> JoinBolt:
        """Inner join of input ``new`` on ``new.field`` = the key of input ``prior``."""
        return self._add(new, field, prior, left=False)

    def left_join(self, new: str, field: str, prior: str) -> JoinBolt:
        """Left join of input ``new`` on ``new.field`` = the key of input ``prior``."""
        return self._add(new, field, prior, left=True)

    def _add(self, new: str, field: str, prior: str, *, left: bool) -> JoinBolt:
        if new in self._joins:
            msg = f"JoinBolt: {new!r} is already part of the join; it can join only once"
            raise TopologyError(msg)
        if prior not in self._joins:
            msg = (f"JoinBolt: {prior!r} was not declared before {new!r} "
                   f"(inputs so far: {list(self._joins)})")
            raise TopologyError(msg)
        self._joins[new] = _Join(FieldSelector.parse(field, new), prior, left)
        return self

    def select(self, comma_separated_fields: str) -> JoinBolt:
        """The output fields: ``"id, name"``, ``"spout2:dept"``, ``"info.city"``."""
        selectors = tuple(FieldSelector.parse(d) for d in comma_separated_fields.split(","))
        names = [s.name for s in selectors]
        if len(set(names)) < len(names):
            msg = f"JoinBolt.select({comma_separated_fields!r}) names an output field twice"
            raise TopologyError(msg)
        self._select = selectors
        return self

    def with_output_stream(self, stream: str) -> JoinBolt:
        """Emit the results on ``stream`` instead of ``default``."""
        self.output_stream = stream
        return self

    @property
    def output_fields(self) -> Fields:
        """The fields of the results (from :meth:`select`)."""
        if not self._select:
            msg = "JoinBolt: call select('field, ...') to say what a joined row holds"
            raise TopologyError(msg)
        named = {s.input for s in self._select if s.input is not None}
        unknown = sorted(named - set(self._joins))
        if unknown:
            msg = (f"JoinBolt.select names inputs {unknown} that are not joined "
                   f"({list(self._joins)})")
            raise TopologyError(msg)
        return Fields(*(s.name for s in self._select))

    def declare_output_fields(self, declarer: Any) -> None:
        """The selected fields, on the output stream."""
        if self.output_stream is None:
            declarer.declare(self.output_fields)
        else:
            declarer.declare_stream(self.output_stream, self.output_fields)

    # -- running -------------------------------------------------------------------------

    def check_subscriptions(self, component_id: str, inputs: list[Grouping], *,
                            parallelism: int, declared: Declared) -> None:
        """At ``create_topology``: the inputs, their join fields and their groupings.

        1. Every input the bolt subscribes to is part of the join, and every joined input is
           subscribed to.
        2. Each input's declared stream has its join field (else every tuple of it would
           join nothing, silently), and every selected field is declared by an input it
           may come from (else it would always be ``None``).
        3. With more than one task, each input is fields-grouped on exactly its join field
           (or every input is global-grouped: all to one task). Storm's *Joining Streams*:
           "Each of ``JoinBolt``'s incoming data streams must be Fields Grouped on a single
           field. A stream should only be joined with the other streams using the field on
           which it has been FieldsGrouped." and "Fields Grouping ensures the right tuples
           are routed to the right instances of a Join Bolt. Consequently the
           FieldsGrouping field must be same as the join field, for correct results."
           An all grouping is refused too: every task would join every tuple, and emit each
           joined row once per task.
        """
        subscribed = {self._input_name(g) for g in inputs}
        kind = self.selector.value
        extra = sorted(subscribed - set(self._joins))
        if extra:
            msg = (f"JoinBolt {component_id!r} subscribes to {kind}s {extra} that are not "
                   f"part of its join ({list(self._joins)}): add a join for each, or "
                   f"subscribe only to the joined {kind}s")
            raise TopologyError(msg)
        missing = sorted(set(self._joins) - subscribed)
        if missing:
            msg = (f"JoinBolt {component_id!r} joins {kind}s {missing} it does not subscribe "
                   f"to: add a grouping for each (a fields grouping on its join field)")
            raise TopologyError(msg)
        for g in inputs:
            _check_key_field(f"JoinBolt {component_id!r}", f"input {self._input_name(g)!r}",
                             self._joins[self._input_name(g)].key, g, declared)
        _check_selected(f"JoinBolt {component_id!r}", self._select,
                        {self._input_name(g): g for g in inputs}, declared)
        if parallelism > 1 and not all(g.kind is GroupingKind.GLOBAL for g in inputs):
            for g in inputs:
                key = self._joins[self._input_name(g)].key
                if not _grouped_on(g, key):
                    msg = (f"JoinBolt {component_id!r} runs {parallelism} tasks but its input "
                           f"{self._input_name(g)!r} has {_a(g)}: a key's tuples of the other "
                           "inputs may reach another task and their matches are missed; "
                           + _grouping_hint(key, g, "every input on its join field"))
                    raise TopologyError(msg)

    def _input_name(self, grouping: Grouping) -> str:
        return grouping.component if self.selector is Selector.SOURCE else grouping.stream

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def input_of(self, tuple_: Tuple) -> str:
        """Which input ``tuple_`` belongs to (its component, or its stream)."""
        return (tuple_.source_component if self.selector is Selector.SOURCE
                else tuple_.source_stream)

    def execute(self, window: TupleWindow) -> None:
        """Join the window's tuples and emit each joined row, anchored to its tuples."""
        for joined in self.hash_join(window.get()):
            values = [self._project(s, joined) for s in self._select]
            anchors = [t for t, _ in joined]
            if self.output_stream is None:
                self.collector.emit(values, anchors)
            else:
                self.collector.emit(values, anchors, stream=self.output_stream)

    def hash_join(self, tuples: list[Tuple]) -> list[list[tuple[Tuple, str]]]:
        """The joined rows of ``tuples``: each the list of ``(tuple, input)`` it joined."""
        inputs = list(self._joins)
        first = inputs[0]
        probe: list[list[tuple[Tuple, str]]] = []
        hashed: dict[str, dict[Any, list[Tuple]]] = {i: defaultdict(list) for i in inputs[1:]}
        for tuple_ in tuples:
            input_ = self.input_of(tuple_)
            if input_ == first:
                probe.append([(tuple_, input_)])
            elif input_ in hashed:
                key = self._joins[input_].key.lookup(tuple_, input_)
                if key is not None:
                    hashed[input_][key].append(tuple_)
            else:
                msg = (f"JoinBolt: a tuple from {self.selector.value} {input_!r}, which is "
                       f"not part of the join ({inputs})")
                raise TopologyError(msg)
        for input_ in inputs[1:]:
            how = self._joins[input_]
            prior_key = self._joins[how.prior].key  # type: ignore[index]
            result: list[list[tuple[Tuple, str]]] = []
            for row in probe:
                key = next((v for t, i in row if i == how.prior
                            and (v := prior_key.lookup(t, i)) is not None), None)
                if key is None:
                    continue
                matches = hashed[input_].get(key)
                if matches:
                    result.extend([*row, (m, input_)] for m in matches)
                elif how.left:
                    result.append(row)
            probe = result
        return probe

    @staticmethod
    def _project(selector: FieldSelector, joined: list[tuple[Tuple, str]]) -> Any:
        for tuple_, input_ in joined:
            value = selector.lookup(tuple_, input_)
            if value is not None:
                return value
        return None  # a left join's missing side


class TableJoinBolt(BaseStatefulBolt):
    """Joins each tuple of a stream with the current row of its key in a table.

    The table is an input of its own, e.g. a ``KafkaSpout`` over a compacted topic: each of
    its tuples is the newest row of its key (a tuple whose fields other than the key are
    all ``None`` deletes it). The rows live in the bolt's ``KeyValueState`` (checkpointed,
    or in the state provider), so they survive restarts and a replayed batch sees the same
    table.

    **Which version of a row an event sees**: the newest row of its key delivered in the
    same micro-batch or an earlier one. Within a batch the table's rows are applied first,
    then the batch's events are joined, in arrival order (emitted in ``finish_batch``), so
    where batches are cut decides only whether a row and an event that arrive close
    together meet: an event never sees a row that arrived in a later batch.

    Example:
        >>> enrich = (TableJoinBolt("clicks", "campaigns", "campaign_id")
        ...           .select("user, campaign_id, campaigns:advertiser"))
        >>> enrich.output_fields
        Fields('user', 'campaign_id', 'advertiser')

    Group both inputs by the key (``fields_grouping("clicks", Fields("campaign_id"))``,
    ``fields_grouping("campaigns", Fields("campaign_id"))``) so that a key's rows and its
    events reach the same task. ``left=True`` keeps an event whose key has no row (the
    table's fields ``None``); by default it is dropped (an inner join).
    """

    def __init__(self, stream: str, table: str, key: str, *, table_key: str | None = None,
                 left: bool = False) -> None:
        """Join input ``stream`` with input ``table`` (component ids) on ``key``.

        ``key`` is the stream's join field, ``table_key`` the table's (default: the same).
        """
        if stream == table:
            msg = f"TableJoinBolt: the stream and the table are both {stream!r}"
            raise TopologyError(msg)
        self.stream, self.table, self.left = stream, table, left
        self.key = FieldSelector.parse(key, stream)
        self.table_key = FieldSelector.parse(table_key or key, table)
        self._select: tuple[FieldSelector, ...] = ()

    def select(self, comma_separated_fields: str) -> TableJoinBolt:
        """The output fields: ``"user"`` (the event's, else the row's), ``"campaigns:name"``."""
        selectors = tuple(FieldSelector.parse(d) for d in comma_separated_fields.split(","))
        unknown = sorted({s.input for s in selectors if s.input is not None}
                         - {self.stream, self.table})
        if unknown:
            msg = (f"TableJoinBolt.select names inputs {unknown}; it joins {self.stream!r} "
                   f"with {self.table!r}")
            raise TopologyError(msg)
        names = [s.name for s in selectors]
        if len(set(names)) < len(names):
            msg = f"TableJoinBolt.select({comma_separated_fields!r}) names a field twice"
            raise TopologyError(msg)
        self._select = selectors
        return self

    @property
    def output_fields(self) -> Fields:
        """The fields of the results (from :meth:`select`)."""
        if not self._select:
            msg = "TableJoinBolt: call select('field, ...') to say what a joined row holds"
            raise TopologyError(msg)
        return Fields(*(s.name for s in self._select))

    def declare_output_fields(self, declarer: Any) -> None:
        """The selected fields."""
        declarer.declare(self.output_fields)

    def check_subscriptions(self, component_id: str, inputs: list[Grouping], *,
                            parallelism: int, declared: Declared) -> None:
        """At ``create_topology``: its two inputs, their key fields and their groupings.

        1. It reads exactly its stream and its table.
        2. The stream's declared fields have ``key``, the table's have ``table_key`` (else
           every event or row would be ignored, silently: an inner join emits nothing), and
           every selected field is declared by an input it may come from.
        3. With more than one task, a key's events and its row must meet on one task: both
           inputs fields-grouped on their keys (as Storm's ``JoinBolt``: "Each of
           ``JoinBolt``'s incoming data streams must be Fields Grouped on a single field"),
           or the table all-grouped (every task holds the whole table) and the stream
           grouped any way but all (an event joined on every task would be emitted once per
           task), or both global-grouped (one task does it all).
        """
        bolt = f"TableJoinBolt {component_id!r}"
        subscribed = {g.component for g in inputs}
        if subscribed != {self.stream, self.table}:
            msg = (f"{bolt} joins {self.stream!r} with table "
                   f"{self.table!r} but subscribes to {sorted(subscribed)}: subscribe to "
                   f"both (a fields grouping on the key each), and to nothing else")
            raise TopologyError(msg)
        for g in inputs:
            role, key = self._role(g)
            _check_key_field(bolt, f"{role} {g.component!r}", key, g, declared)
        _check_selected(bolt, self._select, {g.component: g for g in inputs}, declared)
        if parallelism == 1 or all(g.kind is GroupingKind.GLOBAL for g in inputs):
            return
        table_to_all = all(g.kind is GroupingKind.ALL for g in inputs
                           if g.component == self.table)
        for g in inputs:
            role, key = self._role(g)
            if table_to_all and g.component == self.table:
                continue
            if table_to_all and g.kind is not GroupingKind.ALL:
                continue
            if not table_to_all and _grouped_on(g, key):
                continue
            why = ("each event reaches every task and is joined on each"
                   if g.kind is GroupingKind.ALL else
                   "an event may reach a task that does not hold its key's row, and is "
                   "not joined")
            msg = (f"{bolt} runs {parallelism} tasks but its {role} {g.component!r} has "
                   f"{_a(g)}: {why}; " + _grouping_hint(
                       key, g, f"both inputs on their keys, or all_grouping({self.table!r})"
                               " for the table and any other grouping for the stream"))
            raise TopologyError(msg)

    def _role(self, grouping: Grouping) -> tuple[str, FieldSelector]:
        """``("table", table_key)`` or ``("stream", key)`` for a subscription."""
        if grouping.component == self.table:
            return "table", self.table_key
        return "stream", self.key

    def init_state(self, state: Any) -> None:
        """The table's rows, by key."""
        self.rows = state

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
        """Keep the collector; no events waiting."""
        self.collector, self.events = collector, []

    def execute(self, tuple_: Tuple) -> None:
        """A table row is applied now; an event waits for the batch's end."""
        if tuple_.source_component != self.table:
            self.events.append(tuple_)
            return
        key = self.table_key.lookup(tuple_, self.table)
        if key is not None:
            row = {f: tuple_.get_value_by_field(f) for f in tuple_.fields}
            if all(v is None for f, v in row.items() if f != self.table_key.path[0]):
                self.rows.delete(key)
            else:
                self.rows.put(key, row)
        self.collector.ack(tuple_)

    def finish_batch(self) -> None:
        """Join the batch's events with the table as it is now, in arrival order."""
        events, self.events = self.events, []
        for event in events:
            key = self.key.lookup(event, self.stream)
            row = None if key is None else self.rows.get(key)
            if row is not None or self.left:
                self.collector.emit([self._project(s, event, row or {}) for s in self._select],
                                    event)
            self.collector.ack(event)

    def _project(self, selector: FieldSelector, event: Tuple, row: Mapping[str, Any]) -> Any:
        if selector.input != self.table:
            value = selector.lookup(event, self.stream)
            if value is not None or selector.input == self.stream:
                return value
        value: Any = row.get(selector.path[0])
        for part in selector.path[1:]:
            value = value.get(part) if isinstance(value, Mapping) else None
        return value


__all__ = ["FieldSelector", "JoinBolt", "Selector", "TableJoinBolt"]
