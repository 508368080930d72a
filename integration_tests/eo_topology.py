"""The exactly-once kill tests' topology, run in a subprocess that can be SIGKILLed.

KafkaSpout (JSON ``{key, ts, value}``) -> WindowedAggregate(key, count, total), tumbling
10 s, lag 5 s -> RedisSink storing ``{"count": n, "sum": s}`` at ``<prefix>:<key>:<start>``.
The run uses the continuous trigger with small batches, and exits by itself (code 0) once
the sink's offset record reaches the topic's end offsets read at start. Each restart goes on
where the previous run stopped (Spark checkpoint + the sink's record).

Run it (``PYTHONPATH`` must hold the repo and ``integration_tests``)::

    python -m eo_topology --bootstrap 127.0.0.1:9092 --redis-url redis://127.0.0.1:6379/0 \\
        --topic events --checkpoint /tmp/ckpt --name eo1

The module also holds the test data: :func:`generate_events` (deterministic, ~1000 events
per second of event time, ~1% out of order by up to 3 s, ~0.1% later than 10 s) and
:func:`produce_events`.

Example:
    >>> events = generate_events(1000, seed=7)
    >>> events[0].partition, len(events)
    (3, 1000)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

WINDOW_MS = 10_000
LAG_MS = 5_000
PARTITIONS = 4
KEYS = 1000
T0_MS = 1_700_000_000_000  # a multiple of WINDOW_MS
SINK_ID = "store"
EXIT_TIMEOUT = 3
REPO = Path(__file__).resolve().parent.parent

log = logging.getLogger("eo_topology")


@dataclass(frozen=True)
class Event:
    """One produced record: its partition and its JSON fields."""

    partition: int
    key: str
    ts: int
    value: int

    def payload(self) -> bytes:
        """The record value: ``{"key": ..., "ts": ..., "value": ...}``."""
        return json.dumps({"key": self.key, "ts": self.ts, "value": self.value}).encode()


def generate_events(n: int, *, seed: int = 42, partitions: int = PARTITIONS) -> list[Event]:
    """``n`` events; event time advances 1 ms per event (1000 events per second).

    About 1% are out of order by 1..3000 ms, about 0.1% by 10..20 s (late for a 5 s lag).
    A key always goes to the same partition (key index modulo ``partitions``).

    Example:
        >>> [e.ts - T0_MS for e in generate_events(3, seed=1)]
        [0, 1, 2]
    """
    rng = random.Random(seed)
    events = []
    for i in range(n):
        k = rng.randrange(KEYS)
        ts = T0_MS + i
        roll = rng.random()
        if roll < 0.001:
            ts -= rng.randint(10_001, 20_000)
        elif roll < 0.011:
            ts -= rng.randint(1, 3_000)
        events.append(Event(k % partitions, f"k{k:04d}", ts, rng.randint(1, 100)))
    return events


def produce_events(bootstrap: str, topic: str, events: list[Event]) -> list[tuple[int, int]]:
    """Produce ``events`` in order to their partitions; returns each one's (partition, offset)."""
    from confluent_kafka import Producer

    from kstorm._kafka.client import client_config
    from kstorm.errors import SourceError

    producer = Producer({**client_config(bootstrap), "linger.ms": 20, "acks": "all",
                         "enable.idempotence": True, "batch.num.messages": 10_000})
    acks: list[tuple[int, int] | None] = [None] * len(events)
    errors: list[str] = []

    def report(slot: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acks[slot] = (msg.partition(), msg.offset())
        return on_delivery

    for slot, event in enumerate(events):
        while True:
            try:
                producer.produce(topic, event.payload(), partition=event.partition,
                                 on_delivery=report(slot))
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(60)
    if left or errors or any(a is None for a in acks):
        msg = f"produce to {topic}: {left} undelivered, errors {errors[:3]}"
        raise SourceError(msg)
    return [a for a in acks if a is not None]


# The stored record of one window, {"count": n, "sum": s}: a record of named fields, so the
# sink writes closed windows from their Arrow columns (the path the kill tests prove).
WINDOW_VALUE = {"count": "count", "sum": "total"}


def build_topology(topic: str, redis_url: str, prefix: str, *, mode: str,
                   max_per_batch: int) -> Any:
    """The benchmark topology (see the module docstring)."""
    from kstorm import Fields, KafkaSpout, TopologyBuilder
    from kstorm.windowing import Duration
    from kstorm.windowing.aggregate import Agg, WindowedAggregate
    from serdes import JsonSerde
    from sinks.redis import RedisConfig, RedisSink

    spout = KafkaSpout(topic, value_serde=JsonSerde({"key": str, "ts": int, "value": int}),
                       max_offsets_per_batch=max_per_batch, group_id=f"{prefix}-group")
    agg = (WindowedAggregate(key="key", count=Agg.count(), total=Agg.sum("value"))
           .with_tumbling_window(Duration.seconds(WINDOW_MS // 1000))
           .with_timestamp_field("ts").with_lag(Duration.seconds(LAG_MS // 1000)))
    sink = RedisSink(RedisConfig.from_url(redis_url), key=prefix + ":{key}:{window_start}",
                     value=WINDOW_VALUE, merge="set", mode=mode)  # type: ignore[arg-type]
    builder = TopologyBuilder()
    builder.set_spout("events", spout)
    builder.set_bolt("per_key", agg).fields_grouping("events", Fields("key"))
    builder.set_bolt(SINK_ID, sink).shuffle_grouping("per_key")
    return builder.create_topology()


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Confirmed end offset of each partition of ``topic`` (tails read, not just the HW)."""
    from kstorm._kafka import client as _kafka

    consumer = _kafka.driver_consumer(bootstrap, {})
    parts = _kafka.partitions_of(consumer, lambda t: t == topic)
    marks = _kafka.watermarks(consumer, parts)
    ends = _kafka.latest_offsets(consumer, {tp: hi for tp, (_, hi) in marks.items()},
                                 bootstrap=bootstrap, every_tail=True)
    return {p: end for (_, p), end in ends.items()}


def run(args: argparse.Namespace) -> int:
    """Run until the sink has committed the topic's end offsets; 0 on success."""
    from kstorm import submit_topology
    from kstorm.errors import KstormError

    ends = topic_ends(args.bootstrap, args.topic)
    log.info("eo: topic %s ends %s", args.topic, ends)
    conf = {"kafka.bootstrap.servers": args.bootstrap,
            "kstorm.checkpoint.dir": args.checkpoint,
            "kstorm.trigger": "continuous",
            "kstorm.trigger.interval.ms": args.trigger_ms,
            "kstorm.spark.master": args.master,
            "kstorm.shuffle.partitions": 2,
            "kstorm.commit.overlap": args.commit_overlap}
    topology = build_topology(args.topic, args.redis_url, args.prefix or args.name,
                              mode=args.mode, max_per_batch=args.max_per_batch)
    handle = submit_topology(args.name, conf, topology)
    sink = handle.sinks[SINK_ID]
    deadline = time.monotonic() + args.timeout
    seen: Any = None
    while time.monotonic() < deadline:
        if not handle.is_active:
            try:
                handle.await_termination(0)
            except KstormError as exc:
                log.error("eo: topology failed: %s", exc)
                return 1
            log.error("eo: topology stopped before reaching the topic's ends")
            return 1
        try:
            record = sink.committed()
        except KstormError as exc:  # Redis briefly away: the commit phase retries too
            log.warning("eo: cannot read the sink record yet: %s", exc)
            time.sleep(0.5)
            continue
        if record != seen:
            seen = record
            log.info("eo: committed txid=%s offsets=%s", record.txid, record.offsets)
        if record.offsets.get(args.topic) == ends:
            log.info("eo: drained; progress %s", handle.progress.get("components"))
            handle.stop()
            return 0
        time.sleep(0.1)
    log.error("eo: not drained within %ss", args.timeout)
    handle.stop()
    return EXIT_TIMEOUT


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="eo_topology", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--name", required=True, help="topology name (sink record namespace)")
    parser.add_argument("--prefix", default=None, help="value key prefix (default: --name)")
    parser.add_argument("--mode", default="opaque", choices=("opaque", "transactional"))
    parser.add_argument("--max-per-batch", type=int, default=25_000)
    parser.add_argument("--trigger-ms", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--commit-overlap", default="auto", choices=("auto", "true", "false"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m eo_topology``."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run(parse_args(argv))


# -- the parent's side: start the runner, SIGKILL its whole session ----------------------


@dataclass
class TopologyProcess:
    """One run of ``python -m eo_topology`` in its own session, output in ``log_dir``.

    Example:
        >>> run = TopologyProcess.start(["--bootstrap", ...], tmp_path, "run1")  # doctest: +SKIP
        >>> run.kill()  # SIGKILL to every process of its session  # doctest: +SKIP
    """

    process: subprocess.Popen[bytes]
    log: Path
    _files: list[IO[bytes]] = field(default_factory=list)

    @classmethod
    def start(cls, argv: list[str], log_dir: Path, label: str,
              env: dict[str, str] | None = None, module: str = "eo_topology",
              cwd: Path | None = None) -> TopologyProcess:
        """Run ``python -m <module> <argv>``; output to ``<label>.log``, Spark's log beside.

        ``module`` is any runner importable from the repo or ``integration_tests``;
        ``cwd`` its working directory (default: this process's).
        """
        paths = [str(REPO), str(REPO / "integration_tests"),
                 *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        full_env = {**os.environ, **(env or {}),
                    "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
                    "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                    "KSTORM_SPARK_LOG": str(log_dir / f"{label}.spark.log")}
        log = log_dir / f"{label}.log"
        out = open(log, "wb")  # noqa: SIM115 (closed by kill/wait)
        process = subprocess.Popen([sys.executable, "-m", module, *argv], env=full_env,
                                   stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   cwd=cwd)
        return cls(process, log, [out])

    @property
    def pid(self) -> int:
        """The runner's pid, which is also its session id."""
        return self.process.pid

    def exited(self) -> int | None:
        """The exit code, or None while running."""
        return self.process.poll()

    def wait(self, timeout: float) -> int:
        """Wait for the runner to exit by itself; on timeout kill the session and raise."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._reap_session()
        return code

    def kill(self) -> None:
        """SIGKILL every process of the runner's session and wait until they are gone."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap_session()

    def _reap_session(self) -> None:
        deadline = time.monotonic() + 20
        while True:
            alive = session_members(self.pid)
            for pid in alive:  # pyspark.daemon runs in a process group of its own
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if self.process.poll() is None:
                self.process.wait(5)
            if not alive:
                break
            if time.monotonic() > deadline:
                msg = f"processes {alive} of session {self.pid} survived SIGKILL"
                raise RuntimeError(msg)
            time.sleep(0.05)
        for f in self._files:
            f.close()

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the run's output."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is ``sid`` (Linux /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, session = stat[stat.rfind(")") + 2:].split()[:4]
        if int(session) == sid and state != "Z":
            members.append(int(entry))
    return members


if __name__ == "__main__":
    sys.exit(main())


def wait_for_output(log: Path, text: str, process: subprocess.Popen[Any],
                    timeout: float = 240.0) -> None:
    """Wait until ``text`` is in the file ``log`` that ``process`` writes to."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)


def wait_session_gone(sid: int, timeout: float = 60.0) -> None:
    """Wait until no live process is left in session ``sid``; fail naming them if some stay."""
    deadline = time.monotonic() + timeout
    while session_members(sid):
        assert time.monotonic() < deadline, f"processes left in session {sid}: " \
            f"{session_members(sid)}"
        time.sleep(0.2)


def kill_session(sid: int) -> None:
    """SIGKILL every live process of session ``sid`` (a test's clean-up)."""
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

