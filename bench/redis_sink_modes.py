"""``python -m bench.redis_sink_modes``: the RedisSink's commit cost, opaque vs transactional.

Commits ``--batches`` batches of ``--keys`` keys each (every key written by every batch,
merge ``add``) through ``RedisSink.commit_batch`` against an embedded ``redis-server``, in
transactional mode and in opaque mode, interleaved, and prints the median time per batch and
per key, and the opaque/transactional ratio measured in the same run. Opaque mode keeps each
value's ``prev`` and (since seed 002's batch-wide replay rule) the set of keys the last txid
wrote, so it writes more per key. Every run checks the stored values.

Example:
    python -m bench.redis_sink_modes --keys 20000 --batches 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _run(url: str, mode: str, keys: int, batches: int, name: str) -> list[float]:
    import redis

    from sinks.redis import RedisConfig, RedisSink

    sink = RedisSink(RedisConfig.from_url(url), key=name + ":{w}", value="n", merge="add",
                     mode=mode).bind(name)  # type: ignore[arg-type]
    rows = [{"w": f"k{i}", "n": 1} for i in range(keys)]
    times = []
    for txid in range(batches):
        started = time.perf_counter()
        sink.commit_batch(txid, rows, {"t": {0: txid}})
        times.append(time.perf_counter() - started)
    client = redis.Redis.from_url(url)
    assert int(client.get(f"{name}:k0")) == batches and int(client.get(f"{name}:k{keys - 1}")) \
        == batches, "stored values are wrong"
    sink.close()
    return times


def main(argv: list[str] | None = None) -> int:
    """Run both modes interleaved; print the medians and the ratio."""
    parser = argparse.ArgumentParser(prog="bench.redis_sink_modes")
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from kstorm.embedded import EmbeddedRedis

    per: dict[str, list[float]] = {"transactional": [], "opaque": []}
    with EmbeddedRedis() as server:
        for r in range(args.rounds):
            for mode in per:
                per[mode] += _run(server.url, mode, args.keys, args.batches, f"b{r}{mode[0]}")
    print(f"{args.keys} keys per batch, {args.batches} batches x {args.rounds} rounds; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    med = {mode: statistics.median(t) for mode, t in per.items()}
    for mode, m in med.items():
        print(f"  {mode:14} {1000 * m:8.1f} ms per batch  {1e6 * m / args.keys:6.2f} us per key")
    print(f"  opaque / transactional: {med['opaque'] / med['transactional']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
