"""Stateful windowing by message id: a crash and replay neither re-fires nor misses a window.

The checkpoint is a *compact* snapshot: it leaves out the tuples of windows that already
fired. After the restart the source is re-read from ``last_expired + 1`` per source (a Kafka
partition), tuples up to ``last_evaluated`` are re-added without firing, and the stream goes on.
"""

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm.errors import ConfigError
from kstorm.windowing import Count, Duration, WindowConfig, WindowManager
from kstorm.windowing.message_ids import MessageIdLedger, Replay

SOURCES = ["p0", "p1", "p2"]


def source_of(item):
    return item["src"]


def config_for(shape, n, c, length_ms, slide_ms, event_time):
    length = Count(n) if shape.startswith("count") else Duration.millis(length_ms)
    sliding = {"count": Count(c), "duration": Duration.millis(slide_ms), "tumbling": length,
               "tuple": Count(1)}[shape.split("/")[1]]
    ts = {"timestamp_field": "ts"} if event_time else {}
    return WindowConfig(length, sliding, message_id_field="id", **ts)


def windows_of(windows):
    return [(w.get_start_timestamp(), w.get_end_timestamp(), w.get(), w.get_new(),
             w.get_expired()) for w in windows]


# ops: ("add", source index, ts step) or ("time", lag): a watermark = slowest source - lag
# (event time; a negative lag makes the slowest source late) or a processing-time tick
ops_strategy = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 8)),
    st.tuples(st.just("time"), st.integers(0, 2), st.integers(-6, 12)),
), min_size=1, max_size=60)


class Driver:
    """Turns ops into tuples (per-source ids and non-decreasing timestamps) and time."""

    def __init__(self, ops, event_time):
        self.ops, self.event_time = ops, event_time
        self.items, latest, self.now = [], {s: 0 for s in SOURCES}, 0
        next_id = {s: 100 for s in SOURCES}
        self.steps = []  # ("add", item) | ("time", value)
        for kind, src_i, value in ops:
            self.now += 1
            if kind == "add":
                src = SOURCES[src_i]
                latest[src] += value
                item = {"src": src, "id": next_id[src], "ts": latest[src] if event_time
                        else self.now}
                next_id[src] += 1
                self.items.append(item)
                self.steps.append(("add", item))
            else:
                moment = min(latest.values()) - value if event_time else self.now + value
                self.steps.append(("time", moment))

    def apply(self, manager, steps):
        fired = []
        for kind, value in steps:
            if kind == "add":
                manager.add(value, value["ts"])
            elif self.event_time:
                fired += windows_of(manager.on_watermark(value))
            else:
                fired += windows_of(manager.on_processing_time(value))
        return fired

    def flush(self, manager):
        far = max([i["ts"] for i in self.items] + [self.now]) + 50  # past every window end
        advance = manager.on_watermark if self.event_time else manager.on_processing_time
        return windows_of(advance(far))


EVENT_SHAPES = ["count/count", "count/tumbling", "count/tuple", "count/duration",
                "duration/duration", "duration/tumbling", "duration/tuple", "duration/count"]
# processing time re-stamps replayed tuples, so only count windows can be exact
PROCESSING_SHAPES = ["count/count", "count/tumbling", "count/tuple"]
CASES = [(s, True) for s in EVENT_SHAPES] + [(s, False) for s in PROCESSING_SHAPES]


@pytest.mark.parametrize("shape, event_time", CASES,
                         ids=[f"{s}-{'event' if e else 'processing'}" for s, e in CASES])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy, data=st.data(), n=st.integers(1, 4), c=st.integers(1, 3),
       length_ms=st.integers(1, 20), slide_ms=st.integers(1, 20))
def test_crash_and_replay_neither_refires_nor_misses_a_window(shape, event_time, ops, data, n,
                                                              c, length_ms, slide_ms):
    config = config_for(shape, n, c, length_ms, slide_ms, event_time)
    driver = Driver(ops, event_time)
    checkpoint = data.draw(st.integers(0, len(driver.steps)), label="checkpoint")
    crash = data.draw(st.integers(checkpoint, len(driver.steps)), label="crash")
    reread = data.draw(st.sampled_from(["from the start", "after last expired",
                                        "replay ranges"]), label="re-read")

    full = WindowManager(config, source_of)
    expected = driver.apply(full, driver.steps) + driver.flush(full)

    before = WindowManager(config, source_of)
    committed = driver.apply(before, driver.steps[:checkpoint])
    blob = pickle.dumps(before.snapshot(compact=True))  # only ids and unevaluated tuples
    driver.apply(before, driver.steps[checkpoint:crash])  # uncommitted work, lost in the crash

    after = WindowManager(config, source_of)
    after.restore(pickle.loads(blob))
    last_expired = {src: ids[0] for src, ids in after.ledger.state().items()}
    ranges = after.ledger.replay_ranges()
    history = [item for kind, item in driver.steps[:checkpoint] if kind == "add"]
    for item in history:  # the sources are re-read up to the checkpoint
        src, msg_id = item["src"], item["id"]
        if reread == "after last expired":
            wanted = last_expired.get(src) is None or msg_id > last_expired[src]
        elif reread == "replay ranges":
            low, high = ranges.get(src, (None, None))
            wanted = high is not None and (low is None or low <= msg_id) and msg_id <= high
        else:
            wanted = True
        if wanted:  # re-added quietly, or dropped: never late, never firing a window
            assert after.add(item, item["ts"] if event_time else driver.now)
    assert not after.ledger.recovering
    # Spark replays the batches after the checkpoint, then the stream goes on
    resumed = driver.apply(after, driver.steps[checkpoint:]) + driver.flush(after)
    assert committed + resumed == expected


@settings(max_examples=60, deadline=None)
@given(ops=ops_strategy, data=st.data())
def test_full_snapshot_ignores_redelivered_tuples(ops, data):
    config = WindowConfig(Duration.millis(6), Duration.millis(3), timestamp_field="ts",
                          message_id_field="id")
    driver = Driver(ops, event_time=True)
    cut = data.draw(st.integers(0, len(driver.steps)))
    full = WindowManager(config, source_of)
    expected = driver.apply(full, driver.steps) + driver.flush(full)
    first = WindowManager(config, source_of)
    head = driver.apply(first, driver.steps[:cut])
    second = WindowManager(config, source_of)
    second.restore(pickle.loads(pickle.dumps(first.snapshot())))
    for kind, item in driver.steps[:cut]:  # an at-least-once source delivers them again
        if kind == "add":
            assert second.add(item, item["ts"])
    assert head + driver.apply(second, driver.steps[cut:]) + driver.flush(second) == expected


def test_ledger_records_storm_window_state_per_source():
    config = WindowConfig(Count(2), Count(2), timestamp_field="ts", message_id_field="id")
    manager = WindowManager(config, source_of)
    for i, (src, ts) in enumerate([("p0", 1), ("p1", 2), ("p0", 3), ("p1", 4), ("p0", 5),
                                   ("p1", 6)]):
        manager.add({"src": src, "id": 10 + i, "ts": ts}, ts)
    manager.on_watermark(6)
    # windows: [10, 11], [12, 13], [14, 15]; expired 10..13
    assert manager.ledger.state() == {"p0": (12, 14), "p1": (13, 15)}


def test_ledger_classifies_replayed_ids():
    ledger = MessageIdLedger()
    for i in range(1, 11):
        ledger.seen("p", i)
    ledger.expired("p", 3)
    ledger.evaluated("p", 7)
    ledger.late("p", 11)
    ledger.begin_recovery(held=[("p", 8)])
    assert ledger.replay_ranges() == {"p": (4, 7)}
    verdicts = [ledger.classify("p", i) for i in range(1, 13)]
    assert verdicts == [Replay.DISCARD] * 3 + [Replay.REPLAY] * 4 + [Replay.DISCARD] * 4 + [
        Replay.PROCESS]
    assert not ledger.recovering
    assert ledger.classify("p", 5) is Replay.DISCARD  # replayed once only


def test_compact_snapshot_needs_message_ids():
    with pytest.raises(ConfigError, match="with_message_id_field"):
        WindowManager(WindowConfig(Count(2))).snapshot(compact=True)


def test_compact_snapshot_leaves_out_evaluated_tuples():
    config = WindowConfig(Count(100), Count(100), message_id_field="id")
    manager = WindowManager(config, source_of)
    for i in range(250):
        manager.add({"src": "p0", "id": i, "ts": i}, i)
    manager.on_processing_time(1_000)  # fires at ids 99 and 199
    compact, full = manager.snapshot(compact=True), manager.snapshot()
    assert len(full["entries"]) == 150 and len(compact["entries"]) == 50
    assert len(pickle.dumps(compact)) < len(pickle.dumps(full)) / 2
