"""The user-spout kill test's topology, run in a subprocess that can be SIGKILLed.

NumberSpout(0..count-1, message id n, position persisted in ``ack``) -> Record (fields
grouping on ``key``, 2 tasks; records what each batch attempt saw, optionally pauses in one
batch) -> two exactly-once Redis sinks: ``<prefix>:sum:<key>`` (merge ``add`` of n) and
``<prefix>:count:<key>`` (merge ``count``). Continuous trigger; the run exits 0 once the
spout's acked position reaches ``count`` (every batch committed and acked).

Run it (``PYTHONPATH`` must hold the repo and ``integration_tests``)::

    python -m spout_topology --redis-url redis://127.0.0.1:6379/0 --count 3000 \\
        --state-dir /tmp/s --checkpoint /tmp/ckpt --name sp1 [--pause-batch 3]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from _runner import EXIT_DONE, watch

log = logging.getLogger("spout_topology")
KEYS = 7


def build_topology(args: argparse.Namespace) -> Any:
    """The topology of the module docstring."""
    from spouts import NumberSpout, Record

    from kstorm import Fields, TopologyBuilder
    from sinks.redis import RedisConfig, RedisSink

    config = RedisConfig.from_url(args.redis_url)
    b = TopologyBuilder()
    b.set_spout("numbers", NumberSpout(args.count, args.state_dir, per_call=10, keys=KEYS))
    b.set_bolt("record", Record(args.state_dir, args.pause_batch), 2).fields_grouping(
        "numbers", Fields("key"))
    b.set_bolt("sum", RedisSink(config, key=args.name + ":sum:{key}", value="n", merge="add",
                                mode="transactional")).shuffle_grouping("record")
    b.set_bolt("count", RedisSink(config, key=args.name + ":count:{key}", merge="count",
                                  mode="transactional")).shuffle_grouping("record")
    return b.create_topology()


def run(args: argparse.Namespace) -> int:
    """Run until the spout's acked position reaches ``count``; 0 on success."""
    from kstorm import submit_topology

    conf = {"kstorm.checkpoint.dir": args.checkpoint, "kstorm.trigger": "continuous",
            "kstorm.trigger.interval.ms": 100, "kstorm.spark.master": "local[2]",
            "kstorm.shuffle.partitions": 2, "kstorm.spout.max.batch.tuples": args.per_batch}
    handle = submit_topology(args.name, conf, build_topology(args))
    cursor = Path(args.state_dir) / "cursor"
    return watch(handle, "spout topology", lambda: EXIT_DONE if cursor.exists()
                 and cursor.read_text() == str(args.count) else None, args.timeout)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m spout_topology``."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="spout_topology")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--per-batch", type=int, default=300)
    parser.add_argument("--pause-batch", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=240.0)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
