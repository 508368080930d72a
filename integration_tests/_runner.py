"""The loop every killable runner (``python -m <x>_topology``) ends with.

A runner submits its topology, then :func:`watch` waits until the outputs say it is done,
and returns the runner's exit code: :data:`EXIT_DONE`, :data:`EXIT_STOPPED` (the topology
stopped first), :data:`EXIT_PASSED` (a count went past its goal: something counted twice)
or :data:`EXIT_TIMEOUT`. The kill tests (``_runs.py``) read these codes.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from kstorm.errors import KstormError

log = logging.getLogger("runner")

EXIT_DONE, EXIT_STOPPED, EXIT_PASSED, EXIT_TIMEOUT = 0, 1, 2, 3


def watch(handle: Any, label: str, check: Callable[[], int | None], timeout: float, *,
          poll_s: float = 0.1, retry_on: tuple[type[Exception], ...] = (KstormError,)) -> int:
    """Wait until ``check()`` returns an exit code, then stop the topology and return it.

    ``check`` returns ``None`` while not done; an exception of ``retry_on`` (a store
    briefly away: the commit phase retries too) is logged and ``check`` tried again in
    0.5 s.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not handle.is_active:
            try:
                handle.await_termination(0)
            except KstormError as exc:
                log.error("%s: topology failed: %s", label, exc)
            else:
                log.error("%s: topology stopped before it was done", label)
            return EXIT_STOPPED
        try:
            code = check()
        except retry_on as exc:
            log.warning("%s: cannot read the outputs yet: %s", label, exc)
            time.sleep(0.5)
            continue
        if code is not None:
            log.info("%s: done (exit %s); progress %s", label, code,
                     handle.progress.get("components"))
            handle.stop()
            return code
        time.sleep(poll_s)
    log.error("%s: not done within %ss", label, timeout)
    handle.stop()
    return EXIT_TIMEOUT


def count_reached(total: int, expected: int) -> int | None:
    """A count's exit code: ``None`` below ``expected``, done at it, passed beyond it."""
    if total < expected:
        return None
    log.info("counted %s of %s", total, expected)
    return EXIT_DONE if total == expected else EXIT_PASSED


def arguments(prog: str) -> argparse.ArgumentParser:
    """A Kafka runner's command line: the five flags every one takes, and ``--timeout``."""
    parser = argparse.ArgumentParser(prog=prog)
    for flag in ("--bootstrap", "--redis-url", "--topic", "--checkpoint", "--name"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--timeout", type=float, default=240.0)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments, with INFO logging to stderr (the kill tests keep each run's log)."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return args


def kafka_conf(args: argparse.Namespace, **more: Any) -> dict[str, Any]:
    """The runners' topology conf: small continuous batches on ``local[2]``."""
    return {"kafka.bootstrap.servers": args.bootstrap, "kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "continuous", "kstorm.trigger.interval.ms": 100,
            "kstorm.spark.master": "local[2]", "kstorm.shuffle.partitions": 2, **more}
