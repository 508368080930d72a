"""Built-in windowed aggregations that never run per-tuple Python.

count, sum, min, max, mean, count_distinct and top_k (see :class:`Agg`).

A :class:`WindowedAggregate` is declared like any windowed bolt::

    agg = (WindowedAggregate(key=["key"], count=Agg.count(), total=Agg.sum("value"))
           .with_tumbling_window(Duration.seconds(10))
           .with_timestamp_field("ts").with_lag(Duration.seconds(5)))
    builder.set_bolt("per_key", agg).fields_grouping("events", Fields("key"))
    builder.set_bolt("store", RedisSink(...)).shuffle_grouping("per_key")

and runs in two halves, both vectorized with Arrow compute:

1. On executors, for each batch of spout rows: drop the late rows (see below), assign each
   row to its windows and reduce to *partials* per (key, window end) — :func:`partials`.
   ``count_distinct`` and ``top_k`` partials are value counters (list columns, see
   :mod:`kstorm.windowing.value_counts`); the others are one scalar column each.
2. In the commit phase of each batch: merge the partials into the open windows, advance the
   watermark, and emit every window whose end the watermark has passed —
   :class:`AggregateWindows`.

Semantics (seed 004, Storm's ``WindowedBoltExecutor``):

- A window with end ``e`` (a multiple of the sliding interval) holds the tuples with
  ``e - length < ts <= e``; the first window end is the ceiling of the earliest timestamp.
- Each input stream (a Kafka partition, read in offset order) tracks its latest timestamp.
  A tuple is *late* when its timestamp is below ``latest - lag`` of its own stream at arrival
  ("no tuples may arrive with a timestamp earlier than t1 - lag"). This depends only on the
  stream's order, never on how it was cut into batches, so replays and restarts agree.
- The watermark is the minimum over input streams of ``latest - lag``; a window is evaluated
  once the watermark passes its end, windows with no tuples are skipped.

With ``with_session_window(gap, max_duration=None)`` the windows are sessions per key, with
the session windowed bolt's rules, computed by :mod:`kstorm.windowing.session_aggregate`:
partials per (key, piece of a session) on executors, sessions merged and closed in the
commit phase, emitted as ``(*key, session_start, session_end, *aggregates)``.

Sessions may also run in processing time (no timestamp field), as a session windowed bolt's:
a tuple's time is its micro-batch's time, given to the commit phase (``advance(..., now)``:
Spark's batch timestamp in its offset log, so a replayed batch has the same time; the test
driver's clock). Executors then reduce a batch's rows to one partial per key stamped 0 (every
row of a batch has the same time), which the commit phase stamps with the batch's time;
nothing is late, a session closes once the time is past its end (:meth:`AggregateWindows.
next_close` tells when, so the runtime runs a batch without input then).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstorm.bolt import BaseRichBolt
from kstorm.component import OutputFieldsDeclarer
from kstorm.errors import ConfigError
from kstorm.tuple import Fields
from kstorm.windowing.builder import WindowedBoltConfigMixin
from kstorm.windowing.config import LATE_TUPLE_FIELD, WindowConfig
from kstorm.windowing.durations import Duration
from kstorm.windowing.session_aggregate import (
    END,
    FIRST,
    LAST,
    MERGE_HOW,
    fold_sessions,
    session_partials,
)
from kstorm.windowing.value_counts import (
    count_values,
    counter_fields,
    counts_column,
    distinct_counts,
    merge_counters,
    sort_groups,
    top_values,
    values_column,
)

_KINDS = ("count", "sum", "min", "max", "mean", "count_distinct", "top_k")
_COUNTED = ("count_distinct", "top_k")  # aggregates computed from a value counter


@dataclass(frozen=True)
class Agg:
    """One aggregate of a :class:`WindowedAggregate`: ``Agg.count()``, ``Agg.sum("value")``...

    Results are plain Python values (ints, floats, lists), so sinks can store them as JSON.
    """

    kind: str
    field: str | None = None
    k: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            msg = f"unknown aggregate {self.kind!r}; expected one of {_KINDS}"
            raise ConfigError(msg)
        if (self.kind == "count") != (self.field is None):
            msg = (
                f"Agg.{self.kind} takes {'no' if self.kind == 'count' else 'a'} "
                              "field"
            )
            raise ConfigError(msg)
        if self.field is not None and (not isinstance(self.field, str) or not self.field
                                       or self.field.startswith("__")):
            msg = (f"Agg.{self.kind}: the field must be a non-empty field name not starting "
                   f"with '__', got {self.field!r}")
            raise ConfigError(msg)
        if self.kind == "top_k":
            if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
                msg = (f"Agg.top_k({self.field!r}, k): k must be an int >= 1 (how many values "
                       f"to keep per window), got {self.k!r}")
                raise ConfigError(msg)
        elif self.k is not None:
            msg = f"Agg.{self.kind} takes no k (only Agg.top_k does), got k={self.k!r}"
            raise ConfigError(msg)

    @classmethod
    def count(cls) -> Agg:
        """Number of tuples in the window."""
        return cls("count")

    @classmethod
    def sum(cls, field: str) -> Agg:
        """Sum of ``field``."""
        return cls("sum", field)

    @classmethod
    def min(cls, field: str) -> Agg:
        """Minimum of ``field``."""
        return cls("min", field)

    @classmethod
    def max(cls, field: str) -> Agg:
        """Maximum of ``field``."""
        return cls("max", field)

    @classmethod
    def mean(cls, field: str) -> Agg:
        """Mean of ``field`` (a float)."""
        return cls("mean", field)

    @classmethod
    def count_distinct(cls, field: str) -> Agg:
        """Exact number of distinct non-null values of ``field`` (an int).

        Example:
            >>> agg = WindowedAggregate(key="page", visitors=Agg.count_distinct("user"))

        emits ``(page, window_start, window_end, visitors)``. Exact: the open windows keep
        every distinct value until they close (memory grows with the distinct values per
        key and open window).
        """
        return cls("count_distinct", field)

    @classmethod
    def top_k(cls, field: str, k: int) -> Agg:
        """The ``k`` most frequent non-null values of ``field``: ``[[value, count], ...]``.

        Sorted by count descending, then value ascending (ties resolve the same on every
        run); fewer than ``k`` pairs when the window has fewer distinct values. Exact, like
        :meth:`count_distinct`.

        Example:
            >>> agg = WindowedAggregate(key="shop", best=Agg.top_k("item", 3))

        emits e.g. ``("s1", 0, 10000, [["pen", 7], ["cup", 2], ["ink", 2]])``.
        """
        return cls("top_k", field, k)


class WindowedAggregate(WindowedBoltConfigMixin, BaseRichBolt):
    """A windowed bolt computing built-in aggregates per key and window, vectorized.

    Emits ``(*key, window_start, window_end, *aggregates)`` once per non-empty window, in
    window-end order, when the watermark passes the window's end; with
    ``with_session_window(gap, max_duration=None)``, ``(*key, session_start, session_end,
    *aggregates)`` once per session, when the watermark passes its end (the rules of
    :mod:`kstorm.windowing.sessions`); sessions without a timestamp field are in processing
    time, closed by the first batch whose time is past their end. Its output goes to sinks
    (it runs in the commit phase); late tuples are counted, or emitted on the stream given to
    :meth:`with_late_tuple_stream` with the original tuple's values in ``late_tuple``.

    Args:
        key: the grouping field(s); empty for one global aggregate per window.
        **aggregates: output name -> :class:`Agg`.
    """

    is_native_window = True

    def __init__(self, key: str | Sequence[str] = (), **aggregates: Agg) -> None:
        self.key = [key] if isinstance(key, str) else list(key)
        if not aggregates:
            msg = (
                "WindowedAggregate needs at least one aggregate, e.g. "
                              "count=Agg.count()"
            )
            raise ConfigError(msg)
        for name, agg in aggregates.items():
            if not isinstance(agg, Agg):
                msg = f"aggregate {name!r} must be an Agg, got {agg!r}"
                raise ConfigError(msg)
        clash = set(self.key) & (set(aggregates) | {"window_start", "window_end"})
        if clash:
            msg = f"WindowedAggregate output names {sorted(clash)} are used twice"
            raise ConfigError(msg)
        self.aggregates = dict(aggregates)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Key fields, window bounds, aggregates; and the late-tuple stream if configured."""
        declarer.declare(Fields(*self.key, *self._bounds(), *self.aggregates))
        late = self._window_settings().get("late_tuple_stream")
        if late:
            declarer.declare_stream(late, Fields(LATE_TUPLE_FIELD))

    def _bounds(self) -> tuple[str, str]:
        """The output fields of a window's bounds."""
        if self._window_settings().get("session_gap") is not None:
            return ("session_start", "session_end")
        return ("window_start", "window_end")

    def spec(self) -> AggregateSpec:
        """The validated plan of this aggregation."""
        cfg = self.window_config
        if cfg.timestamp_field is None and (cfg.is_event_time or not cfg.is_session):
            msg = (
                f"{type(self).__name__} needs event time for its windows: call "
                              "with_timestamp_field(name) (an int field of epoch ms)"
            )
            raise ConfigError(msg, hint="processing time is supported for session windows "
                              "(with_session_window); a BaseWindowedBolt has processing-time "
                              "windows of every shape")
        if cfg.watermark_interval is not None:
            msg = (f"{type(self).__name__}: with_watermark_interval is not supported: the "
                   "aggregate closes windows once per micro-batch, so the trigger interval "
                   "(kstorm.trigger.interval.ms) is its watermark interval")
            raise ConfigError(msg, hint="remove with_watermark_interval, or set "
                              "kstorm.trigger.interval.ms; a BaseWindowedBolt honours it")
        if cfg.is_session:
            return self._session_spec(cfg)
        if not isinstance(cfg.window_length, Duration) or not isinstance(
                cfg.sliding_interval, Duration):
            msg = (
                f"{type(self).__name__} supports duration windows only; use a "
                              "BaseWindowedBolt for count windows"
            )
            raise ConfigError(msg)
        return AggregateSpec(tuple(self.key), cfg.timestamp_field, cfg.window_length.ms,
                             cfg.sliding_interval.ms, cfg.lag.ms,
                             tuple(self.aggregates.items()), cfg.late_tuple_stream,
                             cfg.boundaries == "start-inclusive")

    def _session_spec(self, cfg: WindowConfig) -> AggregateSpec:
        """The spec of session windows (``with_session_window``): per key of ``key``."""
        name = type(self).__name__
        if cfg.session_key_fields is not None and tuple(cfg.session_key_fields) != tuple(
                self.key):
            msg = (f"{name}: sessions are per key of key={self.key!r}; "
                   f"with_session_window(key_fields={list(cfg.session_key_fields)!r}) differs")
            raise ConfigError(msg, hint="leave key_fields out (the aggregate's key is used)")
        clash = set(self.key) & {"session_start", "session_end"}
        if clash:
            msg = f"{name} output names {sorted(clash)} are used twice"
            raise ConfigError(msg)
        gap = cfg.session_gap.ms  # type: ignore[union-attr]  # (set: cfg.is_session)
        top = cfg.session_max_duration
        processing = cfg.timestamp_field is None
        return AggregateSpec(tuple(self.key), cfg.timestamp_field or "", gap, gap,
                             0 if processing else cfg.lag.ms,
                             tuple(self.aggregates.items()), cfg.late_tuple_stream,
                             gap_ms=gap, max_ms=None if top is None else top.ms,
                             processing_time=processing)

    def execute(self, tuple_: Any) -> None:  # pragma: no cover - compiled, never called
        """Not called: the runtime compiles this bolt to Arrow operations."""
        raise NotImplementedError


@dataclass(frozen=True)
class AggregateSpec:
    """What the runtime needs to run a :class:`WindowedAggregate`."""

    key: tuple[str, ...]
    ts_field: str
    length_ms: int
    slide_ms: int
    lag_ms: int
    aggregates: tuple[tuple[str, Agg], ...]
    late_stream: str | None = None
    start_inclusive: bool = False  # window bounds: start <= ts < end (else Storm's)
    gap_ms: int | None = None  # session windows: the gap (length_ms/slide_ms unused then)
    max_ms: int | None = None  # session windows: the max duration, if any
    processing_time: bool = False  # sessions: a tuple's time is its batch's (ts_field "")

    @property
    def is_session(self) -> bool:
        """Whether the windows are sessions (``with_session_window``)."""
        return self.gap_ms is not None

    def partial_columns(self) -> list[tuple[str, str, str]]:
        """(partial column, input field, Arrow hash aggregate) for each scalar partial."""
        out: dict[str, tuple[str, str, str]] = {"__n": ("__n", "", "count_all")}
        for _, agg in self.aggregates:
            how = "sum" if agg.kind == "mean" else agg.kind
            if how != "count" and how not in _COUNTED:
                column = partial_column(how, agg.field or "")
                out[column] = (column, agg.field or "", how)
        return list(out.values())

    def counted_fields(self) -> list[str]:
        """The fields whose values are counted (for ``count_distinct`` and ``top_k``)."""
        return list(dict.fromkeys(agg.field or "" for _, agg in self.aggregates
                                  if agg.kind in _COUNTED))


def partial_column(how: str, field: str) -> str:
    """Name of the partial column holding ``how`` (sum, min, max) of ``field``."""
    return f"__{how}__{field}"


def late_mask(ts: np.ndarray, streams: np.ndarray, pmax: dict[Any, int], lag_ms: int
              ) -> np.ndarray:
    """Which rows are late, updating ``pmax`` (stream -> latest timestamp) in place.

    Rows must be in arrival order within each stream. A row is late when its timestamp is
    below ``latest - lag`` of its stream, latest taken over the rows before it.
    """
    late = np.zeros(len(ts), dtype=bool)
    # dict.fromkeys: distinct streams by hashing (np.unique sorts Python objects: ~12 ms
    # per 20k rows)
    for stream in dict.fromkeys(streams.tolist()):
        idx = np.nonzero(streams == stream)[0]
        t = ts[idx]
        start = pmax.get(_py(stream), np.iinfo(np.int64).min + lag_ms + 1)
        running = np.maximum.accumulate(np.concatenate(([start], t)))
        late[idx] = t < running[:-1] - lag_ms
        pmax[_py(stream)] = int(running[-1])
    return late


def _py(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def window_ends(ts: np.ndarray, length_ms: int, slide_ms: int, start_inclusive: bool = False
                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each window a row falls in: (row indices, window ends).

    ``e - length < ts <= e`` (Storm), or ``e - length <= ts < e`` with ``start_inclusive``.

    Example:
        >>> [e.tolist() for _, e in window_ends(np.array([10, 11]), 10, 10)]
        [[10, 20]]
        >>> [e.tolist() for _, e in window_ends(np.array([10, 11]), 10, 10, True)]
        [[20, 20]]
    """
    if start_inclusive:
        first = ts // slide_ms * slide_ms + slide_ms  # the first end after ts
    else:
        first = -((-ts) // slide_ms) * slide_ms  # ceiling of ts on the sliding interval
    out = []
    for j in range(-(-length_ms // slide_ms)):
        ends = first + j * slide_ms
        keep = np.nonzero((ends - length_ms <= ts) if start_inclusive
                          else (ends - length_ms < ts))[0]
        if len(keep):
            out.append((keep, ends[keep]))
    return out


def partials(table: pa.Table, spec: AggregateSpec) -> pa.Table:
    """Reduce on-time rows to one partial row per (key, window end) (sessions: per piece)."""
    if spec.is_session:
        return session_partials(table, spec)
    ts = table.column(spec.ts_field).cast(pa.int64()).to_numpy(zero_copy_only=False)
    cols = spec.partial_columns()
    pieces = []
    needed = list(dict.fromkeys([*spec.key, *(f for _, f, _ in cols if f),
                                 *spec.counted_fields()]))
    base = table.select(needed)
    for idx, ends in window_ends(ts, spec.length_ms, spec.slide_ms, spec.start_inclusive):
        part = base.take(pa.array(idx)) if len(idx) != table.num_rows else base
        pieces.append(part.append_column(END, pa.array(ends, pa.int64())))
    if not pieces:
        return empty_partials(spec, table.schema)
    rows = pa.concat_tables(pieces)
    grouped = rows.group_by([*spec.key, END], use_threads=False).aggregate(
        [([], "count_all") if how == "count_all" else (f, how) for _, f, how in cols])
    names = {("count_all" if how == "count_all" else f"{f}_{how}"): c for c, f, how in cols}
    grouped = grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
    return _with_counters(grouped, spec, [count_values(rows, [*spec.key, END], f)
                                          for f in spec.counted_fields()])


def _with_counters(scalars: pa.Table, spec: AggregateSpec, counters: list[pa.Table]
                   ) -> pa.Table:
    """Append the counters' list columns to the scalar partials of the same groups."""
    if not counters:
        return scalars  # (count/sum/min/max/mean only: no sort, as before)
    out = sort_groups(scalars, [*spec.key, END])
    for field, counter in zip(spec.counted_fields(), counters, strict=True):
        for name in (values_column(field), counts_column(field)):
            out = out.append_column(name, counter.column(name))
    return out


def empty_partials(spec: AggregateSpec, schema: pa.Schema) -> pa.Table:
    """A partials table with no rows (the right columns)."""
    bounds = [FIRST, LAST] if spec.is_session else [END]
    fields = [schema.field(k) for k in spec.key] + [pa.field(b, pa.int64()) for b in bounds]
    for col, f, how in spec.partial_columns():
        kind = pa.int64() if how == "count_all" else schema.field(f).type
        if how == "sum" and pa.types.is_integer(kind):
            kind = pa.int64()
        fields.append(pa.field(col, kind))
    for f in spec.counted_fields():
        fields.extend(counter_fields(f, schema.field(f).type))
    return pa.schema(fields).empty_table()


_MERGE = MERGE_HOW


def merge(tables: Sequence[pa.Table], spec: AggregateSpec) -> pa.Table:
    """Combine partials of the same (key, window end) (sessions: the overlapping ones)."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return tables[0] if tables else pa.table({})
    if spec.is_session:
        return fold_sessions(tables, spec, None)[0]  # (non-empty: tables has rows)
    rows = pa.concat_tables(tables, promote_options="permissive")
    cols = spec.partial_columns()
    grouped = rows.group_by([*spec.key, END], use_threads=False).aggregate(
        [(c, _MERGE[how]) for c, _, how in cols])
    names = {f"{c}_{_MERGE[how]}": c for c, _, how in cols}
    grouped = grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
    return _with_counters(grouped, spec, [merge_counters(tables, [*spec.key, END], f)
                                          for f in spec.counted_fields()])


class AggregateWindows:
    """The commit-phase half: open windows, stream clocks, the watermark (plain data).

    With session windows, ``open`` holds the open sessions' partial rows (see
    :func:`~kstorm.windowing.session_aggregate.fold_sessions`) and a closed table has a
    ``__first`` column (the session start) beside ``__end`` (its end).
    """

    def __init__(self, spec: AggregateSpec) -> None:
        self.spec = spec
        self.open: pa.Table | None = None
        self.latest: dict[Any, int] = {}  # stream -> latest timestamp
        self.late = 0
        self.closed: int | None = None  # the highest watermark windows were closed at

    @property
    def watermark(self) -> int | None:
        """Minimum over input streams of latest timestamp minus lag (None before any tuple).

        It never goes back: a stream that starts delivering late (a partition with no data
        until now) cannot reopen windows that already fired.
        """
        if not self.latest:
            return None
        wm = min(self.latest.values()) - self.spec.lag_ms
        return wm if self.closed is None else max(wm, self.closed)

    def new_stream_clock(self) -> int | None:
        """The clock a stream with none yet starts from (None before any window closed).

        Its tuples below the watermark (for windows that already fired) are then late,
        never counted a second time. None in processing time (nothing is late).
        """
        if self.closed is None or self.spec.processing_time:
            return None
        return self.closed + self.spec.lag_ms

    def next_close(self) -> int | None:
        """Processing time: the first time at which an open session closes (its end + 1).

        None in event time (the watermark moves only with tuples) or with no session open.
        A batch without input at that time closes it (Spark's sources plan one then, the
        test driver's ``advance_time`` runs one).
        """
        if not self.spec.processing_time or self.open is None or not self.open.num_rows:
            return None
        if self.spec.max_ms is None:  # an open row is a session: its end is last + gap
            return int(pc.min(self.open.column(LAST)).as_py()) + self.spec.gap_ms + 1
        _, ends = fold_sessions([self.open], self.spec, np.iinfo(np.int64).max)
        return int(pc.min(ends.column(END)).as_py()) + 1

    def advance(self, batch_partials: Sequence[pa.Table], latest: Mapping[Any, int],
                late: int = 0, now: int | None = None) -> pa.Table:
        """Fold a batch in; return the windows the watermark passed, in window-end order.

        ``now``: the batch's processing time (ms), needed by processing-time sessions.
        """
        if self.spec.processing_time:
            return self._advance_processing_time(batch_partials, now)
        self.late += late
        for stream, ts in latest.items():
            self.latest[stream] = max(ts, self.latest.get(stream, ts))
        if self.spec.is_session:
            return self._advance_sessions(batch_partials)
        if self.closed is not None:  # partials of windows that already fired: late
            kept = []
            for t in batch_partials:
                if t.num_rows:
                    fired = pc.less(t.column(END), pa.scalar(self.closed, pa.int64()))
                    if pc.any(fired).as_py():
                        self.late += int(pc.sum(t.filter(fired).column("__n")).as_py())
                        t = t.filter(pc.invert(fired))
                kept.append(t)
            batch_partials = kept
        tables = ([self.open] if self.open is not None else []) + list(batch_partials)
        merged = merge(tables, self.spec) if any(t.num_rows for t in tables) else None
        wm = self.watermark
        if wm is not None:
            self.closed = wm
        if merged is None or merged.num_rows == 0 or wm is None:
            self.open = merged if merged is not None and merged.num_rows else self.open
            return _no_rows()
        closed_mask = pc.less(merged.column(END), pa.scalar(wm, pa.int64()))
        closed = merged.filter(closed_mask)
        self.open = merged.filter(pc.invert(closed_mask))
        return closed.sort_by([(END, "ascending"), *[(k, "ascending") for k in self.spec.key]])

    def _advance_sessions(self, batch_partials: Sequence[pa.Table]) -> pa.Table:
        """:meth:`advance` for sessions: merge, close those ending below the watermark."""
        if self.closed is not None:
            # Rows below the watermark sessions closed at might belong to a closed session:
            # late, never a second result. (A stream's clock starts there, so the stream
            # rule marks such rows late on the executors first; this only guards, a whole
            # piece at a time: an executor without the clocks is the only way here.)
            kept = []
            for t in batch_partials:
                if t.num_rows:
                    below = pc.less(t.column(FIRST), pa.scalar(self.closed, pa.int64()))
                    if pc.any(below).as_py():
                        self.late += int(pc.sum(t.filter(below).column("__n")).as_py())
                        t = t.filter(pc.invert(below))
                kept.append(t)
            batch_partials = kept
        wm = self.watermark
        if wm is not None:
            self.closed = wm
        self.open, closed = fold_sessions([self.open, *batch_partials], self.spec, wm)
        return closed if closed.num_rows else _no_rows()

    def _advance_processing_time(self, batch_partials: Sequence[pa.Table], now: int | None
                                 ) -> pa.Table:
        """:meth:`advance` in processing time: the batch's pieces at ``now``, then close.

        Time never goes back (a batch stamped before the last one, e.g. after a clock
        change, counts as the last one's time), as in a session windowed bolt.
        """
        if now is None:
            msg = ("processing-time sessions need the batch's time: advance(..., now=ms) "
                   "(the runtime passes it)")
            raise ConfigError(msg)
        now = now if self.closed is None else max(now, self.closed)
        stamped = []
        for t in batch_partials:
            if t.num_rows:
                at = pa.array(np.full(t.num_rows, now, dtype=np.int64))
                t = t.set_column(t.schema.get_field_index(FIRST), FIRST, at)
                t = t.set_column(t.schema.get_field_index(LAST), LAST, at)
                stamped.append(t)
        self.closed = now
        self.open, closed = fold_sessions([self.open, *stamped], self.spec, now)
        return closed if closed.num_rows else _no_rows()

    def _starts(self, closed: pa.Table) -> pa.ChunkedArray:
        """Each closed window's start (a session's first timestamp)."""
        if self.spec.is_session:
            return closed.column(FIRST)
        ends = closed.column(END)
        return pc.subtract(ends, pa.scalar(self.spec.length_ms, ends.type))

    def results(self, closed: pa.Table) -> list[list[Any]]:
        """Output tuples ``[*key, window_start, window_end, *aggregates]`` of closed windows.

        Sessions: ``[*key, session_start, session_end, *aggregates]``.
        """
        if closed.num_rows == 0:
            return []
        ends = closed.column(END).to_pylist()
        starts = self._starts(closed).to_pylist()
        n = closed.column("__n").to_pylist()
        keys = [closed.column(k).to_pylist() for k in self.spec.key]
        values: list[list[Any]] = []
        for _, agg in self.spec.aggregates:
            if agg.kind == "count":
                values.append(n)
            elif agg.kind == "mean":
                sums = closed.column(partial_column("sum", agg.field or "")).to_pylist()
                values.append([s / c if c else None for s, c in zip(sums, n, strict=True)])
            elif agg.kind == "count_distinct":
                values.append(distinct_counts(closed, agg.field or ""))
            elif agg.kind == "top_k":
                values.append(top_values(closed, agg.field or "", agg.k or 1))
            else:
                values.append(closed.column(partial_column(agg.kind, agg.field or "")).to_pylist())
        return [[*(k[i] for k in keys), starts[i], ends[i], *(v[i] for v in values)]
                for i in range(closed.num_rows)]

    def results_table(self, closed: pa.Table, names: Sequence[str]) -> pa.Table | None:
        """:meth:`results` as Arrow columns named ``names`` (the output fields), in its order.

        None when an aggregate has no column of its own (mean, count_distinct, top_k are
        computed per window in :meth:`results`), or ``closed`` is the table of nothing
        closed without the partials' columns (``_no_rows``).
        """
        kinds = [agg.kind for _, agg in self.spec.aggregates]
        if "__n" not in closed.column_names or any(
                k in ("mean", "count_distinct", "top_k") for k in kinds):
            return None
        ends = closed.column(END)
        columns = [closed.column(k) for k in self.spec.key]
        columns += [self._starts(closed), ends]
        for _, agg in self.spec.aggregates:
            columns.append(closed.column("__n") if agg.kind == "count" else
                           closed.column(partial_column(agg.kind, agg.field or "")))
        if len(columns) != len(names):
            return None
        return pa.table(columns, names=list(names))

    def snapshot(self) -> bytes:
        """Everything needed to resume (open windows, stream clocks, late count)."""
        latest = dict(sorted(self.latest.items(), key=lambda item: str(item[0])))
        # (streams sorted: the same state gives the same bytes, whatever the tasks' order)
        return pickle.dumps({"open": self.open, "latest": latest, "late": self.late,
                             "closed": self.closed, "version": _VERSION,
                             "shape": self._shape()}, protocol=5)

    def _shape(self) -> tuple[Any, ...]:
        """What the open rows mean: sessions (gap, max) or windows (length, slide)."""
        spec = self.spec
        if spec.is_session and spec.processing_time:
            return ("session", spec.gap_ms, spec.max_ms, "processing-time")
        if spec.is_session:
            return ("session", spec.gap_ms, spec.max_ms)
        return ("window", spec.length_ms, spec.slide_ms)

    def restore(self, data: bytes) -> None:
        """Resume from :meth:`snapshot` (of an aggregate with the same windows)."""
        state = pickle.loads(data)
        shape = state.get("shape", ("window",))  # (absent before version 2: windows)
        if shape[0] != self._shape()[0] or (len(shape) > 1 and shape != self._shape()):
            msg = (f"windowed aggregate state was saved with windows {shape}, this "
                   f"aggregate has {self._shape()}")
            raise ConfigError(msg, hint="a changed window needs a new checkpoint and a new "
                              "sink state key (or the old windows drained first)")
        self.open, self.latest, self.late = state["open"], state["latest"], state["late"]
        self.closed = state.get("closed")  # (absent in snapshots of earlier versions)


_VERSION = 2  # 2: "version" and "shape" (windows or sessions) in the snapshot


def _no_rows() -> pa.Table:
    return pa.table({END: pa.array([], pa.int64())})

