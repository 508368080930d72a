"""The at-least-once free-form spout kill test's topology, run in a subprocess.

ReliableNumbers(0..count-1, message id n, re-emits what ``fail`` names, position persisted
in ``ack``) -> FailFirst (fields grouping on ``key``, 2 tasks; fails the first attempt of
every multiple of 7) -> AppendSink (``<state dir>/out.txt``, one line per number; not
idempotent: at least once, a replayed batch appends again). At least once, continuous
trigger, 4 s message timeout; the run exits 0 once the spout's acked position reaches
``count`` (every tuple acked).

Run it (``PYTHONPATH`` must hold the repo and ``integration_tests``)::

    python -m spout_fail_topology --count 2000 --state-dir /tmp/s --checkpoint /tmp/ckpt \\
        --name sf1
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from _runner import EXIT_DONE, watch

log = logging.getLogger("spout_fail_topology")


def build_topology(args: argparse.Namespace) -> Any:
    """The topology of the module docstring."""
    from acking_topology import AppendSink
    from spouts import FailFirst, ReliableNumbers

    from kstorm import Fields, TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("numbers", ReliableNumbers(args.count, args.state_dir, per_call=10))
    b.set_bolt("work", FailFirst(args.state_dir, 7), 2).fields_grouping("numbers",
                                                                        Fields("key"))
    b.set_bolt("out", AppendSink(str(Path(args.state_dir) / "out.txt"))).shuffle_grouping(
        "work")
    return b.create_topology()


def main(argv: list[str] | None = None) -> int:
    """Run until the spout's acked position reaches ``count``; 0 on success."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="spout_fail_topology")
    for name in ("--state-dir", "--checkpoint", "--name"):
        parser.add_argument(name, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--per-batch", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=240.0)
    args = parser.parse_args(argv)

    from kstorm import submit_topology

    conf = {"kstorm.checkpoint.dir": args.checkpoint, "kstorm.trigger": "continuous",
            "kstorm.trigger.interval.ms": 100, "kstorm.spark.master": "local[2]",
            "kstorm.shuffle.partitions": 2, "kstorm.spout.max.batch.tuples": args.per_batch,
            "topology.guarantee": "at-least-once", "topology.message.timeout.secs": 4}
    handle = submit_topology(args.name, conf, build_topology(args))
    cursor = Path(args.state_dir) / "cursor"
    return watch(handle, "spout topology", lambda: EXIT_DONE if cursor.exists()
                 and cursor.read_text() == str(args.count) else None, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
