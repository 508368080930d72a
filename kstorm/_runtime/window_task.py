"""One task of a user windowed bolt across micro-batches (pure: no Spark, no I/O).

The Spark layer (``kstorm/_spark/windowed_bolt.py``) restores a :class:`WindowedTask` from
the task's state before each micro-batch, hands it the batch's tuples and the batch's
processing time, and saves :meth:`WindowedTask.snapshot` afterwards. Per batch:

1. Each tuple gets its timestamp: the batch's processing time, or (event time) the timestamp
   field / extractor. A tuple whose timestamp cannot be read is a bolt error (dead letter).
2. The tuples are put in arrival order, the same on every replay and wherever the batch
   was cut (:func:`arrival_order`): each *origin* -- a Kafka partition, or the stage task
   that emitted tuples of a ``component:stream`` -- keeps its own order (offsets, or the emit
   position the envelope carries, ``__seq``), and the origins are merged by timestamp (ties:
   the origin's key). With a message id field, by ``(source, message id)`` instead: the order
   the id ledger expects.
3. Event time: lateness is the built-in ``WindowedAggregate``'s rule (one rule for both
   paths, README "Lateness"): a tuple is *late* iff its timestamp is below the latest
   timestamp its own input stream delivered before it, minus the lag, or below the watermark
   windows already fired at (which only a stream that had not delivered yet, or was idle,
   can reach). "Before it" is arrival order (step 2) across batches, so where batch
   boundaries fall changes nothing: a tuple 9 s behind the one its bolt emitted before it is
   late with a 5 s lag, as in Storm, even when both share a micro-batch. Late tuples join no
   window; they are counted and go to the late-tuple stream, if any.
4. At the end of the batch the watermark is computed once -- min over the task's input
   streams of (latest timestamp - lag), leaving out streams idle for longer than the idle
   timeout -- or, in processing time, the clock moves to the batch time; the windows that
   closed are returned, in order. (Count-triggered processing-time windows fire as soon as
   the tuple completing them is added.)
5. :meth:`next_timer` tells the runtime when to wake the task without new tuples.

Example:
    >>> from kstorm.tuple import Fields
    >>> from kstorm.windowing import Count, WindowConfig
    >>> task = WindowedTask("w", WindowConfig(Count(2), tumbling=True))
    >>> out = Collect()
    >>> task.process([Tuple([x], Fields("x"), "s") for x in "abc"], 1_000, out)
    >>> [[t.values[0] for t in w] for w in out.windows]
    [['a', 'b']]
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import pickle
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol

from kstorm._runtime.envelope import seq_origin
from kstorm._runtime.window_store import PersistentTuples, PersistentWindow
from kstorm.tuple import Tuple
from kstorm.windowing.config import WindowConfig
from kstorm.windowing.durations import Count
from kstorm.windowing.manager import WindowManager, default_source
from kstorm.windowing.sessions import SessionWindowManager
from kstorm.windowing.watermark import WatermarkTracker
from kstorm.windowing.window import TupleWindow

log = logging.getLogger("kstorm.windowing")

_VERSION = 1


def is_kafka_id(message_id: Any) -> bool:
    """Whether ``message_id`` is a Kafka ``(topic, partition, offset)``."""
    return isinstance(message_id, tuple) and len(message_id) == 3


def source_of(tuple_: Any) -> Hashable:
    """The source a message id is monotonic within: the Kafka partition, else the sender."""
    mid: Any = getattr(tuple_, "message_id", None)
    if is_kafka_id(mid):
        return (mid[0], mid[1])
    return default_source(tuple_)


def stream_of(tuple_: Tuple) -> str:
    """The watermark input stream of a tuple: ``topic/partition`` or ``component:stream``."""
    mid = tuple_.message_id
    if is_kafka_id(mid):
        return f"{mid[0]}/{mid[1]}"
    return f"{tuple_.source_component}:{tuple_.source_stream}"


def _id_key(message_id: Any) -> tuple[Any, ...]:
    if message_id is None:
        return (0,)
    if is_kafka_id(message_id):
        return (1, str(message_id[0]), message_id[1], message_id[2])
    # natural order of ids like "3:10" (ListSpout): numbers compare as numbers
    return (2, tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                     for p in str(message_id).split(":")))


def arrival_key(tuple_: Tuple, index: int) -> tuple[tuple[Any, ...], Any]:
    """``(origin, position)``: where a tuple arrived from, and its place in that origin.

    ``index`` breaks ties between equal positions (the tuple's place in the input).

    Example:
        >>> from kstorm.tuple import Fields
        >>> arrival_key(Tuple([1], Fields("x"), "s", message_id=("t", 2, 7)), 0)
        ((0, 't', '', 2), 7)
    """
    mid = tuple_.message_id
    if is_kafka_id(mid):  # a partition's offsets are its arrival order
        return (0, str(mid[0]), "", mid[1]), mid[2]
    src, stream, seq = tuple_.source_component, tuple_.source_stream, tuple_._seq
    if seq is not None:  # the emit position the envelope carried (envelope.emit_seq)
        return (1, src, stream, seq_origin(seq)), seq
    if mid is None:  # no order carried (a tuple made by hand): the timestamp, then values
        return (2, src, stream, 0), (0, pickle.dumps(tuple_.values, protocol=5))
    return (3, src, stream, 0), _id_key(mid)  # a list spout's ids grow within the spout


def arrival_order(stamped: Sequence[tuple[Tuple, int]]) -> list[tuple[Tuple, int]]:
    """``(tuple, timestamp)`` pairs in arrival order (step 2 of the module docstring).

    Each origin's tuples keep their order; the origins are merged by timestamp, the lowest
    first, ties to the origin with the lower key. All timestamps equal (processing time):
    one origin after the other.

    Example:
        >>> from kstorm.tuple import Fields
        >>> def t(p, off): return Tuple([off], Fields("x"), "s", message_id=("t", p, off))
        >>> pairs = [(t(0, 1), 50), (t(1, 9), 20), (t(0, 0), 10), (t(1, 8), 30)]
        >>> [(p.message_id[1], ts) for p, ts in arrival_order(pairs)]
        [(0, 10), (1, 30), (1, 20), (0, 50)]
    """
    origins: dict[tuple[Any, ...], list[tuple[Any, int, tuple[Tuple, int]]]] = {}
    for i, pair in enumerate(stamped):
        mid = pair[0].message_id
        if type(mid) is tuple and len(mid) == 3:  # (arrival_key's first case, inline)
            origin: tuple[Any, ...] = (0, str(mid[0]), "", mid[1])
            position: Any = mid[2]
        else:
            origin, position = arrival_key(pair[0], i)
        entries = origins.get(origin)
        if entries is None:
            entries = origins[origin] = []
        entries.append((position, i, pair))

    def run(origin: tuple[Any, ...]) -> list[tuple[Tuple, int]]:
        entries = origins[origin]
        if origin[0] == 2:  # no order carried: by timestamp, then values
            entries.sort(key=lambda e: (e[2][1], e[0], e[1]))
        elif any(entries[j][0] > entries[j + 1][0] for j in range(len(entries) - 1)):
            entries.sort(key=lambda e: (e[0], e[1]))
        return [e[2] for e in entries]

    if len(origins) == 1:
        return run(next(iter(origins)))
    runs = [run(o) for o in sorted(origins)]
    if all(r[j][1] <= r[j + 1][1] for r in runs for j in range(len(r) - 1)):
        return sorted((p for r in runs for p in r), key=lambda p: p[1])  # (stable: a merge)
    return list(heapq.merge(*runs, key=lambda pair: pair[1]))


def interleaved(pairs: Iterable[tuple[int, Tuple]]) -> list[tuple[int, Tuple]]:
    """An ordered stage's ``(task, tuple)`` input (``plan.Stage.ordered``): origins interleaved.

    Each origin (:func:`arrival_key`) keeps its order, and the origins take turns, one tuple
    each (the i-th tuple of every origin before any origin's (i+1)-th): a bolt fed by several
    partitions through a shuffle sees them side by side, as a Storm bolt sees tuples arrive,
    not one partition after another -- and in the same order on every replay, so its emits,
    and the windows downstream, replay alike.

    Example:
        >>> from kstorm.tuple import Fields
        >>> def t(p, off): return (0, Tuple([off], Fields("x"), "s", message_id=("t", p, off)))
        >>> [p[1].message_id[1:] for p in interleaved([t(1, 5), t(0, 8), t(1, 4), t(0, 9)])]
        [(0, 8), (1, 4), (0, 9), (1, 5)]
    """
    origins: dict[tuple[Any, ...], list[tuple[Any, int, tuple[int, Tuple]]]] = {}
    for i, pair in enumerate(pairs):
        origin, position = arrival_key(pair[1], i)
        origins.setdefault(origin, []).append((position, i, pair))
    ranked = []
    for origin, entries in origins.items():
        if origin[0] != 2:  # (no order carried: the input's, e.g. a spout's logged rows)
            entries.sort(key=lambda e: (e[0], e[1]))
        ranked += [((rank, origin), pair) for rank, (_, _, pair) in enumerate(entries)]
    ranked.sort(key=lambda e: e[0])
    return [pair for _, pair in ranked]


class WindowOutput(Protocol):
    """Where a :class:`WindowedTask` sends what a batch produces."""

    def window(self, window: TupleWindow | PersistentWindow) -> None:
        """A window fired: call the bolt's ``execute(window)``."""

    def late(self, tuple_: Tuple) -> None:
        """A late tuple: count it, emit it on the late-tuple stream if there is one."""

    def error(self, tuple_: Tuple, exc: Exception) -> None:
        """The tuple's timestamp or message id could not be read (a bolt error)."""


class Collect:
    """A :class:`WindowOutput` that keeps everything (tests and examples)."""

    def __init__(self) -> None:
        self.windows: list[list[Tuple]] = []
        self.bounds: list[tuple[int | None, int | None]] = []
        self.late_tuples: list[Tuple] = []
        self.errors: list[tuple[Tuple, Exception]] = []

    def window(self, window: TupleWindow | PersistentWindow) -> None:
        """Keep the window's tuples and bounds."""
        self.windows.append(window.get())
        self.bounds.append((window.get_start_timestamp(), window.get_end_timestamp()))

    def late(self, tuple_: Tuple) -> None:
        """Keep the late tuple."""
        self.late_tuples.append(tuple_)

    def error(self, tuple_: Tuple, exc: Exception) -> None:
        """Keep the error."""
        self.errors.append((tuple_, exc))


class WindowedTask:
    """The windows, watermark and message-id ledger of one windowed bolt task.

    Args:
        component: the bolt's id (for messages).
        config: its window configuration.
        inputs: watermark streams that must deliver before any watermark (``component:stream``
            of the bolt's non-Kafka inputs; Kafka partitions join as they deliver).
        store: where a persistent window's tuples live (``with_persistence()``); without
            one, tuples are held in memory.
        tracked: at least once: keep note of the tuples no later window holds, for
            :meth:`settle` (off, the windows cost nothing extra).
    """

    def __init__(self, component: str, config: WindowConfig,
                 inputs: Sequence[Hashable] = (), store: PersistentTuples | None = None,
                 *, tracked: bool = False) -> None:
        self.component = component
        self.config = config
        self.store = store if config.persistent else None
        if self.store is not None:  # the manager holds refs; ids are not used (as in Storm)
            config = dataclasses.replace(config, message_id_field=None)
        self.manager: WindowManager | SessionWindowManager = (
            SessionWindowManager(config) if config.is_session  # with_session_window
            else WindowManager(config, source_of=source_of))
        self.manager.record_released = tracked and self.store is None
        self.tracker = (WatermarkTracker(config.lag, interval=config.watermark_interval,
                                         streams=inputs, idle_timeout=config.idle_timeout)
                        if config.is_event_time else None)
        self._count_trigger = isinstance(config.sliding_interval, Count)
        #: the bolt instance's own fields after the last batch (``bolt_fields.py``)
        self.bolt_fields: bytes | None = None

    # -- state ---------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to go on after this batch (picklable)."""
        return {"version": _VERSION, "manager": self.manager.snapshot(),
                "tracker": None if self.tracker is None else self.tracker.snapshot(),
                "store": None if self.store is None else self.store.snapshot(),
                "bolt": self.bolt_fields}

    def restore(self, snapshot: dict[str, Any] | None) -> None:
        """Go on from a :meth:`snapshot` (``None``: a fresh task)."""
        if snapshot is None:
            return
        self.manager.restore(snapshot["manager"])
        self.bolt_fields = snapshot.get("bolt")
        if self.tracker is not None and snapshot["tracker"] is not None:
            self.tracker.restore(snapshot["tracker"])
        if self.store is not None and snapshot.get("store") is not None:
            self.store.restore(snapshot["store"])

    @property
    def late_count(self) -> int:
        """Late tuples so far."""
        return self.manager.late_count

    # -- one micro-batch -----------------------------------------------------------------

    def process(self, tuples: Iterable[Tuple], now_ms: int, out: WindowOutput) -> None:
        """Run one micro-batch at processing time ``now_ms`` (steps 1-4)."""
        stamped = self._stamp(tuples, now_ms, out)
        manager, tracker, store = self.manager, self.tracker, self.store
        late, streams = (self._late_by_stream(stamped) if tracker is not None
                         else (None, None))
        joined: dict[str, int] = {}  # a stream's first tuples below fired windows: count
        for i, (tuple_, ts) in enumerate(stamped):
            if tracker is not None:
                stream = streams[i]  # type: ignore[index]
                if tracker.latest(stream) is None and tracker.watermark is not None:
                    joined.setdefault(stream, 0)
                tracker.track(stream, ts, now_ms)
            if late is not None and late[i]:
                manager.count_late()
                out.late(tuple_)
                continue
            ref: Any = tuple_ if store is None else store.new_ref()
            if not manager.add(ref, ts):
                if tracker is not None and stream in joined:
                    joined[stream] += 1
                out.late(tuple_)
                continue
            if store is not None:
                store.put(ref, tuple_)
            if tracker is None and self._count_trigger:
                for window in manager.on_processing_time(now_ms):
                    self._fire(window, out)
        for stream, count in joined.items():
            if count:
                log.warning(
                    "windowed bolt %r: input stream %s delivered its first tuples after "
                    "windows had fired; %d of them were below the watermark and are late. "
                    "A stream joins the watermark when it first delivers (Storm tracks each "
                    "input stream the same way): a larger with_lag, or producing to every "
                    "partition from the start, keeps them in their windows",
                    self.component, stream, count)
        self.tick(now_ms, out)

    def settle(self, batch: Iterable[Tuple]) -> list[Tuple]:
        """The tuples whose part in this task is over after a :meth:`process`.

        Tuples in no window to come (their last window fired, or they were evicted) since
        the last call, and tuples of ``batch`` that never entered a window (late, duplicate,
        or refused by the timestamp extractor): at least once, a windowed bolt acks them
        now, after the windows that emitted anchored to them (Storm's
        ``WindowedBoltExecutor`` acks a tuple when it expires), so a failure downstream
        still fails their trees. A persistent window holds refs, not tuples: its tuples are
        acked on arrival instead.
        """
        released = self.manager.take_released()
        if self.store is not None:
            return []
        done = {id(t): t for t in released if _open(t)}
        tracked = [t for t in batch if _open(t)]  # none when nothing is tracked
        if tracked:
            held = {id(t) for t in self.manager.held()}
            done.update((id(t), t) for t in tracked if id(t) not in held)
        return list(done.values())

    def _late_by_stream(self, stamped: list[tuple[Tuple, int]]
                        ) -> tuple[list[bool], list[str]]:
        """Step 3's stream rule: late iff ts < (latest of its stream before it) - lag.

        ``stamped`` is in arrival order (step 2). Also returns each tuple's stream.
        """
        assert self.tracker is not None
        lag, latest = self.tracker.lag, self.tracker.latest
        running: dict[str, int | None] = {}
        late, streams = [False] * len(stamped), [""] * len(stamped)
        for i, (tuple_, ts) in enumerate(stamped):
            stream = streams[i] = stream_of(tuple_)
            top = running[stream] if stream in running else latest(stream)
            if top is None or ts > top:
                running[stream] = ts
            else:
                running[stream] = top
                late[i] = ts < top - lag
        return late, streams

    def tick(self, now_ms: int, out: WindowOutput) -> None:
        """Time moved to ``now_ms``: fire the windows that closed (no new tuples)."""
        if self.tracker is None:
            windows = self.manager.on_processing_time(now_ms)
        else:
            watermark = (self.tracker.emit(now_ms) if self.config.watermark_interval is None
                         else self.tracker.poll(now_ms))
            windows = [] if watermark is None else self.manager.on_watermark(watermark)
        for window in windows:
            self._fire(window, out)
        if self.store is not None:
            self.store.flush()
            snap = self.manager.snapshot()
            self.store.collect(e[2] for part in ("entries", "pending", "heap", "replayed")
                               for e in snap[part])

    def _fire(self, window: TupleWindow, out: WindowOutput) -> None:
        out.window(window if self.store is None else PersistentWindow(window, self.store))

    def next_timer(self, now_ms: int) -> int | None:
        """When to wake this task without new tuples (``None``: only when tuples come)."""
        if self.tracker is None:
            end = self.manager.next_window_end()
            return None if end is None else max(end + 1, now_ms + 1)
        if self.manager.size == 0:
            return None
        moments = [self.tracker.next_idle_at(now_ms)]
        if self.config.watermark_interval is not None:  # Storm's watermark timer
            moments.append(self.tracker.next_poll_at(now_ms))
        due = [m for m in moments if m is not None]
        return min(due) if due else None

    def _stamp(self, tuples: Iterable[Tuple], now_ms: int, out: WindowOutput
               ) -> list[tuple[Tuple, int]]:
        extract, id_of = self.config.extractor, self.config.message_id_extractor
        stamped: list[tuple[Tuple, int]] = []
        keys: list[tuple[Any, ...]] = []
        for tuple_ in tuples:
            try:
                ts = now_ms if extract is None else extract(tuple_)
                if isinstance(ts, bool) or not isinstance(ts, int):
                    msg = (f"windowed bolt {self.component!r}: the timestamp extractor returned "
                           f"{type(ts).__name__} {ts!r} for {tuple_!r}; expected int ms")
                    raise TypeError(msg)
                if id_of is not None:
                    keys.append((repr(source_of(tuple_)), id_of(tuple_), ts))
            except Exception as exc:  # noqa: BLE001 - reported as the tuple's bolt error
                out.error(tuple_, exc)
                continue
            stamped.append((tuple_, ts))
        if id_of is None:
            return arrival_order(stamped)
        order = sorted(range(len(stamped)), key=keys.__getitem__)
        return [stamped[i] for i in order]


__all__ = ["Collect", "WindowOutput", "WindowedTask", "arrival_key", "arrival_order",
           "interleaved", "source_of", "stream_of"]


def _open(tuple_: Tuple) -> bool:
    """Whether ``tuple_`` is tracked and not acked or failed yet."""
    ids = tuple_._ids
    return ids is not None and not getattr(ids, "settled", False)
