"""The acker ledger: order independence, failures, time-outs, snapshots, keyed reduce, memory."""

import gc
import pickle
import random
import sys
import tracemalloc
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from kstorm.acking import (
    DEFAULT_MESSAGE_TIMEOUT_SECS,
    AckerEntry,
    AckerEvent,
    AckerLedger,
    AckerMessage,
    AnchorTracker,
    Outcome,
    TupleIdGenerator,
    combine_messages,
    emit_root,
    settle,
)

TIMEOUT_MS = DEFAULT_MESSAGE_TIMEOUT_SECS * 1000


def tree_messages(seed: int, n_tuples: int, fanout: int = 3) -> tuple[int, list[AckerMessage]]:
    """Init + ack messages of a fully processed tree of ``n_tuples`` tuples."""
    ids = TupleIdGenerator(seed)
    spout = emit_root(ids, spout_task=0)
    bolt = AnchorTracker(ids)
    frontier = deque([bolt.receive(spout.message_ids[0])])
    messages, created = [spout.init], 1
    while frontier:
        tup = frontier.popleft()
        for _ in range(min(fanout, n_tuples - created)):
            frontier.append(bolt.receive(bolt.emit([tup])))
            created += 1
        messages += bolt.ack(tup)
    return spout.root_id, messages


def grow_pending_tree(ledger: AckerLedger, seed: int, n_tuples: int) -> int:
    """Stream a tree of ``n_tuples`` through ``ledger``, leaving its last tuple un-acked."""
    ids = TupleIdGenerator(seed)
    spout = emit_root(ids, spout_task=0)
    ledger.apply(spout.init, now_ms=0)
    bolt = AnchorTracker(ids)
    frontier = deque([bolt.receive(spout.message_ids[0])])
    created = 1
    while True:
        tup = frontier.popleft()
        for _ in range(min(3, n_tuples - created)):
            frontier.append(bolt.receive(bolt.emit([tup])))
            created += 1
        if not frontier:
            return spout.root_id  # tup stays un-acked: the tree is pending
        for message in bolt.ack(tup):
            assert ledger.apply(message, now_ms=1) is None


def deep_sizeof(obj: object) -> int:
    """Bytes of ``obj`` and everything it references (types and modules excluded)."""
    seen, stack, total = set(), [obj], 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        stack.extend(gc.get_referents(item))
    return total


def test_ack_before_init_completes_when_the_init_arrives():
    ledger = AckerLedger()
    assert ledger.ack(77, 0b0101, now_ms=0) is None
    assert ledger.get(77) == AckerEntry(None, 0b0101, 0, False)
    assert ledger.init(77, spout_task=3, init_val=0b0101, now_ms=4) == AckerEvent(
        3, 77, Outcome.ACKED, 4
    )
    assert len(ledger) == 0


def test_fail_before_init_fails_when_the_init_arrives():
    ledger = AckerLedger()
    assert ledger.fail(5, now_ms=0) is None
    event = ledger.init(5, spout_task=2, init_val=9, now_ms=1)
    assert event.outcome is Outcome.FAILED and event.spout_task == 2
    assert 5 not in ledger


@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), data=st.data())
@settings(max_examples=100, deadline=None)
def test_any_delivery_order_completes_exactly_at_the_last_message(seed, n, data):
    root_id, messages = tree_messages(seed, n)
    order = data.draw(st.permutations(messages))
    ledger = AckerLedger()
    assert ledger.apply_all(order[:-1], now_ms=0) == []
    assert ledger.apply_all(order[-1:], now_ms=1) == [AckerEvent(0, root_id, Outcome.ACKED, 1)]


@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), data=st.data())
@settings(max_examples=100, deadline=None)
def test_keyed_reduce_of_any_split_equals_the_sequential_acker(seed, n, data):
    """Messages split into batches, combined per root, merged in any order."""
    root_id, messages = tree_messages(seed, n)
    order = data.draw(st.permutations(messages))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(order)), max_size=5)) | {len(order)})
    batches, start = [], 0
    for cut in cuts:
        batches.append(order[start:cut])
        start = cut
    ledger = AckerLedger()
    events = []
    for i, batch in enumerate(batches):
        events += ledger.merge(combine_messages(batch, now_ms=i), now_ms=i)
    assert [(e.root_id, e.outcome) for e in events] == [(root_id, Outcome.ACKED)]
    assert events[0].elapsed_ms == len(batches) - 1
    assert len(ledger) == 0


def test_partial_entries_merge_in_any_grouping_to_the_same_entry():
    messages = [
        AckerMessage.ack(1, 0b0110),
        AckerMessage.init(1, spout_task=4, init_val=0b1010),
        AckerMessage.fail(1),
    ]
    entries = [AckerEntry.of(m, now_ms=t) for t, m in zip((5, 2, 9), messages, strict=True)]
    a, b, c = entries
    assert a.merge(b).merge(c) == c.merge(a.merge(b)) == AckerEntry(4, 0b1100, 2, True)
    assert settle(1, a.merge(b).merge(c), now_ms=10) == AckerEvent(4, 1, Outcome.FAILED, 8)
    assert settle(1, a, now_ms=10) is None  # spout task unknown yet


def test_timeout_with_an_injected_clock_uses_30_seconds_by_default():
    ledger = AckerLedger()
    ledger.init(1, spout_task=0, init_val=11, now_ms=1_000)
    ledger.init(2, spout_task=0, init_val=12, now_ms=2_000)
    ledger.ack(3, 13, now_ms=2_500)  # never initialised (e.g. a late ack)
    assert ledger.expire(now_ms=1_000 + TIMEOUT_MS - 1, timeout_ms=TIMEOUT_MS) == []
    assert ledger.expire(now_ms=1_000 + TIMEOUT_MS, timeout_ms=TIMEOUT_MS) == [
        AckerEvent(0, 1, Outcome.TIMED_OUT, TIMEOUT_MS)
    ]
    assert ledger.expire(now_ms=2_500 + TIMEOUT_MS, timeout_ms=TIMEOUT_MS) == [
        AckerEvent(0, 2, Outcome.TIMED_OUT, TIMEOUT_MS + 500)
    ]  # the uninitialised entry is dropped without an event
    assert len(ledger) == 0


def test_snapshot_restore_keeps_pending_trees_and_their_order():
    root_id, messages = tree_messages(seed=3, n_tuples=50)
    ledger = AckerLedger()
    ledger.apply_all(messages[:20], now_ms=0)
    ledger.init(999, spout_task=1, init_val=5, now_ms=10)
    rows = pickle.loads(pickle.dumps(ledger.snapshot()))
    assert all(type(v) in (int, bool, type(None)) for row in rows for v in row)

    restored = AckerLedger.restore(rows)
    assert restored.snapshot() == ledger.snapshot()
    assert restored.apply_all(messages[20:], now_ms=20) == [
        AckerEvent(0, root_id, Outcome.ACKED, 20)
    ]
    assert [e.root_id for e in restored.expire(now_ms=10 + TIMEOUT_MS, timeout_ms=TIMEOUT_MS)] == [
        999
    ]


def test_a_tree_of_10000_tuples_completes():
    root_id, messages = tree_messages(seed=4, n_tuples=10_000, fanout=4)
    assert len(messages) == 10_001  # the init + one ack per tuple
    ledger = AckerLedger()
    assert ledger.apply_all(messages[:-1], now_ms=0) == []
    assert ledger.apply_all(messages[-1:], now_ms=1) == [AckerEvent(0, root_id, Outcome.ACKED, 1)]


def _ledger_bytes_per_root(n_tuples: int, roots: int, traced: bool) -> float:
    """Bytes the ledger holds per pending root whose tree has ``n_tuples`` tuples."""
    if traced:
        tracemalloc.start()
    ledger = AckerLedger()
    before = tracemalloc.get_traced_memory()[0] if traced else deep_sizeof(ledger)
    for seed in range(roots):
        grow_pending_tree(ledger, seed, n_tuples)
    assert len(ledger) == roots
    gc.collect()
    if traced:
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        after = deep_sizeof(ledger)
    return (after - before) / roots


def test_ledger_memory_per_pending_root_does_not_grow_with_tree_size():
    small = _ledger_bytes_per_root(10, roots=16, traced=False)
    big = _ledger_bytes_per_root(10_000, roots=16, traced=False)
    assert big <= small + 8  # ints of 64 random bits differ by a few bytes
    assert big < 250  # a dict slot, the root id, an entry and its ack val


def test_traced_allocations_per_pending_root_do_not_grow_with_tree_size():
    small = _ledger_bytes_per_root(10, roots=16, traced=True)
    big = _ledger_bytes_per_root(1_000, roots=16, traced=True)
    assert big <= small + 8
    assert big < 250


def test_random_ids_collide_into_zero_only_by_xor_of_equal_ids():
    rng = random.Random(5)
    ledger = AckerLedger()
    ids = [rng.getrandbits(63) + 1 for _ in range(100)]
    ledger.init(1, spout_task=0, init_val=ids[0], now_ms=0)
    for a, b in zip(ids, ids[1:], strict=False):
        assert ledger.ack(1, a ^ b, now_ms=0) is None
    assert ledger.ack(1, ids[-1], now_ms=0).outcome is Outcome.ACKED
