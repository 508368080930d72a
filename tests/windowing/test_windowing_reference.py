"""WindowManager against a brute-force model of seed 004's definitions, for all eight shapes.

The model keeps every accepted tuple and recomputes each window from scratch:

* a window ending at key ``K`` holds the accepted tuples with ``(ts, arrival) <= K`` that its
  length keeps: ``end - L < ts`` for a Duration, the last N for a Count;
* a Duration sliding interval S fires, for every multiple E of S from the ceiling of the
  earliest timestamp up to the watermark (processing time: below now), the window ending at
  ``(E, +inf)`` if it is not empty;
* a Count sliding interval C fires the window ending at every C-th tuple in (ts, arrival) order;
* new = tuples not in the previous fired window; expired = tuples that can be in no later
  window, reported once; late (event time) = ts below the watermark or at or before the end
  of a fired Duration-sliding window.
"""

import math
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm.windowing import Count, Duration, WindowConfig, WindowManager

SHAPES = ["count/count", "count tumbling", "count (every tuple)", "count/duration",
          "duration/duration", "duration tumbling", "duration (every tuple)", "duration/count"]

EXAMPLES = 120


def make_config(shape: str, n: int, c: int, length_ms: int, slide_ms: int,
                event_time: bool) -> WindowConfig:
    length = Count(n) if shape.startswith("count") else Duration.millis(length_ms)
    if "tumbling" in shape:
        kw = {"tumbling": True}
    elif "every tuple" in shape:
        kw = {}
    else:
        sliding = shape.split("/")[1]
        kw = {"sliding_interval": Count(c) if sliding == "count" else Duration.millis(slide_ms)}
    ts = {"timestamp_field": "ts"} if event_time else {}
    return WindowConfig(length, **kw, **ts)


class Reference:
    """The definitions, recomputed from scratch on every call."""

    def __init__(self, config: WindowConfig):
        length, sliding = config.window_length, config.sliding_interval
        self.length_ms = length.ms if isinstance(length, Duration) else None
        self.length_n = length.n if isinstance(length, Count) else None
        self.slide_ms = sliding.ms if isinstance(sliding, Duration) else None
        self.slide_n = sliding.n if isinstance(sliding, Count) else None
        self.event_time = config.is_event_time
        self.accepted = []  # (ts, arrival, item)
        self.clock = None
        self.last_tick = None  # end of the last fired Duration-sliding window
        self.marks_done = 0
        self.previous = []
        self.reported = set()
        self.arrivals = 0

    def add(self, item, ts):
        arrival, self.arrivals = self.arrivals, self.arrivals + 1
        if self.event_time and self.clock is not None and (
                ts < self.clock or (self.last_tick is not None and ts <= self.last_tick)):
            return False
        self.accepted.append((ts, arrival, item))
        return True

    def on_watermark(self, wm):
        if self.clock is not None and wm <= self.clock:
            return []
        self.clock = wm
        return self._fire(wm)

    def on_processing_time(self, now):
        self.clock = now
        return self._fire(now - 1)

    def _fire(self, limit):
        released = sorted(e for e in self.accepted if not self.event_time or e[0] <= limit)
        if self.slide_n:
            marks = released[self.slide_n - 1::self.slide_n]
            ends = [((m[0], m[1]), m[0]) for m in marks[self.marks_done:]]
            self.marks_done = len(marks)
        else:
            ends = []
            if released:
                first = math.ceil(released[0][0] / self.slide_ms) * self.slide_ms
                end = first if self.last_tick is None else max(first,
                                                                self.last_tick + self.slide_ms)
                while end <= limit:
                    ends.append(((end, math.inf), end))
                    end += self.slide_ms
        windows = []
        for key, end_ts in ends:
            upto = [e for e in released if (e[0], e[1]) <= key]
            if self.length_ms is not None:
                content = [e for e in upto if e[0] > end_ts - self.length_ms]
                dead = [e for e in released if e[0] <= end_ts - self.length_ms]
                start = end_ts - self.length_ms
            else:
                content = upto[-self.length_n:]
                dead = upto[:-self.length_n] if len(upto) > self.length_n else []
                start = None
            if not content:
                continue
            expired = [e for e in dead if e[1] not in self.reported]
            self.reported.update(e[1] for e in expired)
            before = {e[1] for e in self.previous}
            new = [e for e in content if e[1] not in before]
            windows.append((start, end_ts, items(content), items(new), items(expired)))
            self.previous = content
            if self.slide_ms:
                self.last_tick = end_ts
        return windows


def items(entries):
    return [e[2] for e in entries]


def described(windows):
    """(start, end, tuples, new, expired) per window; the model already returns these."""
    return [w if isinstance(w, tuple) else (w.get_start_timestamp(), w.get_end_timestamp(),
                                            w.get(), w.get_new(), w.get_expired())
            for w in windows]


# -- drivers ---------------------------------------------------------------------------------

event_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(-25, 25)),
    st.tuples(st.just("wm"), st.integers(-10, 25)),
    st.tuples(st.just("tick"), st.integers(0, 20)),
), max_size=70)

processing_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 6)),
    st.tuples(st.just("now"), st.integers(0, 25)),
), max_size=70)


def apply(target, ops, event_time, log, start=0, stop=None, state=None):
    """Apply ops[start:stop] to target, logging (op index, outcome); returns the driver state."""
    cursor, arrivals = state or (10, 0)
    for i in range(start, len(ops) if stop is None else stop):
        kind, value = ops[i]
        if event_time:
            if kind == "add":
                log.append((i, target.add(arrivals, max(0, cursor + value))))
                arrivals += 1
            elif kind == "wm":
                log.append((i, described(target.on_watermark(cursor + value))))
            else:
                cursor += value
        else:
            cursor += value
            if kind == "add":
                log.append((i, target.add(arrivals, cursor)))
                arrivals += 1
            else:
                log.append((i, described(target.on_processing_time(cursor))))
    return cursor, arrivals


def run(target, ops, event_time, log, start=0, state=None):
    """Apply ops[start:], then advance time far enough to fire every pending window."""
    cursor, _ = apply(target, ops, event_time, log, start, state=state)
    flush = target.on_watermark if event_time else target.on_processing_time
    log.append(("flush", described(flush(cursor + 10_000))))
    return cursor + 10_000


shape_params = dict(n=st.integers(1, 5), c=st.integers(1, 4), length_ms=st.integers(1, 30),
                    slide_ms=st.integers(1, 30))


# -- the manager equals the model ------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=event_ops, **shape_params)
def test_event_time_matches_model(shape, ops, n, c, length_ms, slide_ms):
    config = make_config(shape, n, c, length_ms, slide_ms, event_time=True)
    got, want = [], []
    run(WindowManager(config), ops, True, got)
    run(Reference(config), ops, True, want)
    assert got == want


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=processing_ops, **shape_params)
def test_processing_time_matches_model(shape, ops, n, c, length_ms, slide_ms):
    config = make_config(shape, n, c, length_ms, slide_ms, event_time=False)
    got, want = [], []
    run(WindowManager(config), ops, False, got)
    run(Reference(config), ops, False, want)
    assert got == want


# -- late tuples -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(ops=event_ops, **shape_params)
def test_late_tuples_are_reported_once_and_join_no_window(shape, ops, n, c, length_ms,
                                                          slide_ms):
    config = make_config(shape, n, c, length_ms, slide_ms, event_time=True)
    manager = WindowManager(config)
    log = []
    flushed_to = run(manager, ops, True, log)
    adds = [outcome for _, outcome in log if isinstance(outcome, bool)]
    late = {arrival for arrival, accepted in enumerate(adds) if not accepted}
    # Let the stream move on so a window fires past everything: tuples evicted while no
    # window fired (e.g. in the gap of a window shorter than its slide) get reported.
    later = flushed_to + 1
    for i in range(slide_ms + n + c + 1):
        log.append(("later", manager.add(len(adds) + i, later + i)))
    log.append(("flush", described(manager.on_watermark(later + 100))))
    windows = [w for _, outcome in log if isinstance(outcome, list) for w in outcome]
    in_windows = {t for w in windows for t in w[2]}
    expired = [t for w in windows for t in w[4]]
    assert manager.late_count == len(late)
    assert not late & in_windows
    assert not late & set(expired)
    assert len(expired) == len(set(expired))  # each expires once
    assert set(range(len(adds))) - late <= in_windows | set(expired)


# -- snapshot / restore ----------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("event_time", [True, False], ids=["event", "processing"])
@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(data=st.data(), **shape_params)
def test_restored_snapshot_continues_like_an_uninterrupted_run(shape, event_time, data, n, c,
                                                               length_ms, slide_ms):
    ops = data.draw(event_ops if event_time else processing_ops)
    k = data.draw(st.integers(0, len(ops)))
    config = make_config(shape, n, c, length_ms, slide_ms, event_time)
    full = []
    run(WindowManager(config), ops, event_time, full)

    first = WindowManager(config)
    head = []
    state = apply(first, ops, event_time, head, stop=k)
    blob = pickle.dumps(first.snapshot())
    resumed = WindowManager(config)
    resumed.restore(pickle.loads(blob))
    tail = []
    run(resumed, ops, event_time, tail, start=k, state=state)
    assert head + tail == full
    assert resumed.late_count == sum(1 for _, o in full if o is False)


def test_snapshot_refuses_a_different_window_shape():
    snap = WindowManager(WindowConfig(Count(3))).snapshot()
    other = WindowManager(WindowConfig(Count(4)))
    with pytest.raises(ValueError, match="window snapshot was taken with windows"):
        other.restore(snap)
