"""``python -m bench.transaction_phases``: where a transaction's time goes (seed 002 pipelining).

Runs seed 002's global count (``integration_tests/tx_topology.py``: partial counts in a
batch bolt with 3 tasks, the sum in a committer, the total added to an embedded Redis)
over a ``MemoryTransactionalSpout`` of 4 partitions, ``--take`` tuples per partition and
transaction, and reports the median per transaction of Spark's phases (the trigger in all,
the processing job with the commit phase inside it, the offset-log and commit-log writes)
and of kstorm's commit phase alone. The stored total is checked against the data.

Why it matters: Spark runs one micro-batch at a time, so the commit phase of transaction N
cannot overlap the processing of N + 1 inside one query; the commit phase's share bounds
what such pipelining could save.

Example:
    python -m bench.transaction_phases --rows 2000 --take 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    """Run and print the phases; 0 when the total is exact."""
    parser = argparse.ArgumentParser(prog="bench.transaction_phases")
    parser.add_argument("--rows", type=int, default=2000, help="tuples per partition (about)")
    parser.add_argument("--take", type=int, default=100, help="per partition and transaction")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "integration_tests"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "integration_tests"), *filter(None, [os.environ.get("PYTHONPATH")])])
    import redis
    from tx_topology import GLOBAL_KEY, global_count, memory_data

    from kstorm import Fields, MemoryTransactionalSpout, submit_topology
    from kstorm.embedded import EmbeddedRedis

    data = memory_data(args.rows)
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as checkpoint:
        spout = MemoryTransactionalSpout(data, Fields("word"), args.take)
        handle = submit_topology("phases", {"kstorm.checkpoint.dir": checkpoint,
                                            "kstorm.trigger": "available-now"},
                                 global_count(spout, server.url, "phases",
                                              topology_id="phases"))
        handle.await_termination()
        total = int(redis.Redis.from_url(server.url).get(f"phases:{GLOBAL_KEY}") or 0)
        batches = handle.recent_batches
        commit_s = handle.progress["commit_seconds"]
    steady = [b["durationMs"] for b in batches][3:]  # the first ones pay Spark's start-up
    expected = sum(len(rows) for rows in data.values())
    print(f"{len(batches)} transactions of {4 * args.take} tuples; load average "
          f"{os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    for phase, what in (("triggerExecution", "a transaction in all"),
                        ("addBatch", "processing job + commit phase"),
                        ("walCommit", "Spark's offset-log write"),
                        ("commitOffsets", "Spark's commit-log write")):
        print(f"  {what:32} {statistics.median(b.get(phase, 0) for b in steady):6.0f} ms")
    print(f"  {'kstorm commit phase':32} {1000 * commit_s / max(len(batches), 1):6.0f} ms")
    print(f"total {total}, expected {expected}: {'exact' if total == expected else 'WRONG'}")
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
