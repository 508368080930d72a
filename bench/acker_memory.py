"""Acker memory per pending spout tuple tree, and acker cost per message.

Run: ``python bench/acker_memory.py``  (about 5 s)

For trees of 10, 1,000 and 100,000 tuples, a tree is streamed through a bolt's
``AnchorTracker`` into an ``AckerLedger`` with its last tuple left un-acked (the
root stays pending); the bolt's state is then dropped and what the ledger
retains for that root is measured two ways: ``tracemalloc`` (bytes still
allocated) and the ``sys.getsizeof`` sum of the ledger's objects. Storm's claim
is a fixed amount per spout tuple (~20 bytes in Java), whatever the tree size.
The figures exclude the ledger dict's own slot for the root (~40 bytes amortized):
the measured insert is arranged not to resize the dict.
"""

from __future__ import annotations

import gc
import sys
import time
import tracemalloc
from collections import deque

from kstorm.acking import AckerLedger, AckerMessage, AnchorTracker, TupleIdGenerator, emit_root

TREE_SIZES = (10, 1_000, 100_000)
FILLER_ROOTS = 6  # the 7th insert does not resize the ledger's dict (16 slots, 10 usable)


def stream_tree(ledger: AckerLedger, seed: int, n_tuples: int, leave_pending: bool) -> list:
    """Grow a tree of ``n_tuples`` (fan-out 3) and apply its acker messages to ``ledger``."""
    ids = TupleIdGenerator(seed)
    spout = emit_root(ids, spout_task=0)
    ledger.apply(spout.init, now_ms=0)
    bolt = AnchorTracker(ids)
    frontier = deque([bolt.receive(spout.message_ids[0])])
    created, messages = 1, [spout.init]
    while frontier:
        tup = frontier.popleft()
        for _ in range(min(3, n_tuples - created)):
            frontier.append(bolt.receive(bolt.emit([tup])))
            created += 1
        if leave_pending and not frontier:
            break
        acks = bolt.ack(tup)
        messages += acks
        for message in acks:
            ledger.apply(message, now_ms=1)
    return messages


def deep_sizeof(obj: object) -> int:
    seen, stack, total = set(), [obj], 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        stack.extend(gc.get_referents(item))
    return total


def bytes_per_pending_root(n_tuples: int) -> tuple[int, int]:
    ledger = AckerLedger()
    for seed in range(FILLER_ROOTS):
        stream_tree(ledger, -1 - seed, 10, leave_pending=True)
    deep_before = deep_sizeof(ledger)
    gc.collect()
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0]
    stream_tree(ledger, n_tuples, n_tuples, leave_pending=True)  # returns nothing retained
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - traced_before
    tracemalloc.stop()
    assert len(ledger) == FILLER_ROOTS + 1
    return traced, deep_sizeof(ledger) - deep_before


def micros_per_message(n_tuples: int) -> float:
    messages: list[AckerMessage] = stream_tree(AckerLedger(), 7, n_tuples, leave_pending=False)
    best = float("inf")
    for _ in range(3):
        ledger = AckerLedger()
        start = time.perf_counter()
        events = ledger.apply_all(messages, now_ms=0)
        best = min(best, time.perf_counter() - start)
        assert len(events) == 1 and len(ledger) == 0  # the tree completed, nothing left behind
    return best / len(messages) * 1e6


def main() -> None:
    print(
        f"{'tree tuples':>12}  {'tracemalloc B/root':>18}  {'getsizeof B/root':>16}  "
        f"{'acker us/msg':>12}"
    )
    for n_tuples in TREE_SIZES:
        traced, deep = bytes_per_pending_root(n_tuples)
        print(f"{n_tuples:>12,}  {traced:>18}  {deep:>16}  {micros_per_message(n_tuples):>12.2f}")

    ledger = AckerLedger()
    for root in range(1, 100_001):
        ledger.init(root, spout_task=0, init_val=root, now_ms=root)
    start = time.perf_counter()
    expired = ledger.expire(now_ms=100_000 + 30_000, timeout_ms=30_000)
    print(
        f"expire() of {len(expired):,} timed-out roots: "
        f"{(time.perf_counter() - start) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
