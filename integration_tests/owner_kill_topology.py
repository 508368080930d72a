"""A Python worker that owns a stage's partition is SIGKILLed mid-run: run in a subprocess.

Runs ListSpout (10 batches of 10) -> ``DieOnce`` (2 tasks, fields grouping) to completion on
``local[2,4]`` (Spark retries a failed task up to 4 times; ``local[2]`` would fail the
query on the first lost worker) and prints one JSON line: every ``(n, pid)`` the bolt
emitted, the pid it killed, and the bolt's ``prepared`` count.

Run it (``PYTHONPATH`` must hold the repo and ``integration_tests``)::

    python -m owner_kill_topology --checkpoint /tmp/c --markers /tmp/m
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from kstorm import BaseBasicBolt, Fields, TopologyBuilder

KILL_AT = 43  # the tuple whose first execution kills its worker (batch 4)


class DieOnce(BaseBasicBolt):
    """Emits ``(n, pid)``; the first time it sees ``KILL_AT`` it SIGKILLs its own process."""

    def __init__(self, markers: str) -> None:
        self.markers = markers

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n", "pid"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        if tuple_.values[0] == KILL_AT:
            try:  # O_EXCL: exactly one execution ever kills
                fd = os.open(os.path.join(self.markers, "killed"),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        collector.emit([tuple_.values[0], os.getpid()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="owner_kill_topology")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--markers", required=True)
    args = parser.parse_args(argv)

    from kstorm.testing import ListSpout, run_to_completion

    batches = [[(b * 10 + i,) for i in range(10)] for b in range(10)]
    builder = TopologyBuilder()
    builder.set_spout("numbers", ListSpout(batches, Fields("n"), partitions=2))
    builder.set_bolt("bolt", DieOnce(args.markers), 2).fields_grouping("numbers", Fields("n"))
    conf = {"kstorm.spark.master": "local[2,4]", "kstorm.checkpoint.dir": args.checkpoint}
    result = run_to_completion(builder.create_topology(), conf, name="owner-kill")
    with open(os.path.join(args.markers, "killed")) as f:
        killed = int(f.read())
    print(json.dumps({"rows": result.emitted["bolt"]["default"], "killed": killed,
                      "prepared": result.progress["components"]["bolt"]["prepared"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
