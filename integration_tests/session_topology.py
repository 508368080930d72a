"""The session-window kill test's topology, run in a subprocess that can be SIGKILLed.

KafkaSpout (JSON clicks ``{user, ts, id}``, small batches) --fields(user)--> ClickSessions
(a user windowed bolt, 2 tasks: event-time session windows on ``ts``, gap 5 s, lag 1 s;
one tuple per closed session) --> three exactly-once RedisSinks:

- ``store``: ``<name>:session:<user>:<start>`` = ``{"end", "count", "checksum"}`` (merge
  ``set``; ``checksum`` is the sum of the session's click ids);
- ``fires``: ``<name>:fires:<user>:<start>`` counts how many times that session was emitted;
- ``late``: ``<name>:late:<id>`` counts each late click (the data has none).

The bolt's windows live on the ``redis`` provider (default) in the sink's database, so they
commit in the sink's atomic step and outlive a deleted checkpoint. The continuous trigger;
the run exits 0 once ``--expected`` sessions are stored, each emitted once; 2 if more are
stored or emitted; 1 if the topology stopped; 3 on timeout::

    python -m session_topology --bootstrap B --redis-url U --topic T --checkpoint D \\
        --name N --expected K [--provider spark|redis] [--aggregate] [--timeout S]

With ``--aggregate`` the bolt is the built-in ``WindowedAggregate`` with the same session
window (count and sum of ids per user), storing ``{"end", "count", "checksum"}`` alike.

The module also holds the data: :func:`generate_clicks` -- in event-time order in each
partition (so no click is ever late), every user in both partitions from the first batch
on, and a far-future click per user in each partition at the end, so every real session
closes and none after it can.

Example:
    >>> clicks = generate_clicks(seed=1)
    >>> [(c.user, c.partition) for c in clicks[:3]], clicks[-1].ts - FAR_MS
    ([('u0', 0), ('u0', 1), ('u1', 0)], 10)
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from dataclasses import dataclass
from typing import Any

from _runner import EXIT_DONE, EXIT_PASSED, arguments, kafka_conf, parse, watch

from kstorm import BaseBasicBolt, BaseWindowedBolt, Fields, KafkaSpout, TopologyBuilder
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

GAP_MS = 5_000
LAG_MS = 1_000
PARTITIONS = 2
USERS = tuple(f"u{i}" for i in range(6))
T0_MS = 1_700_000_000_000
FAR_MS = T0_MS + 10**9  # the closing clicks: far past every real session's end
MAX_PER_BATCH = 36  # shared fairly by the 2 partitions: 18 clicks of each a batch

log = logging.getLogger("session_topology")


@dataclass(frozen=True)
class Click:
    """One produced record: its partition and its JSON fields."""

    partition: int
    user: str
    ts: int
    id: int

    def payload(self) -> bytes:
        """The record value: ``{"user": ..., "ts": ..., "id": ...}``."""
        return json.dumps({"user": self.user, "ts": self.ts, "id": self.id}).encode()


def generate_clicks(per_user: int = 200, *, seed: int = 45) -> list[Click]:
    """About ``per_user`` clicks per user in sessions of 1..40, and the closing clicks.

    Within a session clicks are 100..4,500 ms apart, between sessions 5,500..30,000 ms
    (both clear of the 5 s gap). The users' clicks merged in time order go to the
    partitions in turn, so both partitions move through event time together; each user's
    first click is in both partitions (at the start: every task reading a user sees both
    partitions in the first batch, so neither joins a task's watermark late), and so is
    each user's closing click (at the end: the watermark of every task passes every real
    session, and the closing sessions never close).
    """
    rng = random.Random(seed)
    points: list[tuple[int, str]] = []
    for u, user in enumerate(USERS):
        ts, n = T0_MS + 2 * u + 1, 0  # distinct from every other user's: ts % 16 == 2u + 1
        while n < per_user:
            for _ in range(rng.randint(1, 40)):
                points.append((ts, user))
                n += 1
                ts += 16 * rng.randint(100 // 16 + 1, 4_500 // 16)
            ts += 16 * rng.randint(5_500 // 16 + 1, 30_000 // 16)
    opening = [(T0_MS - 100 + 2 * u, user, p) for u, user in enumerate(USERS)
               for p in range(PARTITIONS)]
    middle = [(ts, user, i % PARTITIONS) for i, (ts, user) in enumerate(sorted(points))]
    closing = [(FAR_MS + 2 * u, user, p) for u, user in enumerate(USERS)
               for p in range(PARTITIONS)]
    return [Click(p, user, ts, i)
            for i, (ts, user, p) in enumerate([*opening, *middle, *closing])]


class ClickSessions(BaseWindowedBolt):
    """Emits ``(user, start, end, count, checksum)`` per session (checksum: sum of ids)."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        """``user``, ``start``, ``end``, ``count``, ``checksum``."""
        declarer.declare(Fields("user", "start", "end", "count", "checksum"))

    def execute(self, window: Any) -> None:
        """One tuple for the session ``window``."""
        clicks = window.get()
        self.collector.emit([clicks[0].get_value_by_field("user"), window.get_start_timestamp(),
                             window.get_end_timestamp(), len(clicks),
                             sum(t.get_value_by_field("id") for t in clicks)])


class LateIds(BaseBasicBolt):
    """The id of each late click."""

    def execute(self, tuple_: Any, collector: Any) -> None:
        """Emit ``(id,)`` of the late click."""
        collector.emit([tuple_.get_value_by_field("late_tuple").get_value_by_field("id")])

    def declare_output_fields(self, declarer: Any) -> None:
        """``id``."""
        declarer.declare(Fields("id"))


SESSION_VALUE = {"end": "end", "count": "count", "checksum": "checksum"}


def kill_topology(topic: str, redis_url: str, name: str,
                  max_per_batch: int = MAX_PER_BATCH) -> Any:
    """The topology of the module docstring."""
    spout = KafkaSpout(topic, value_serde=JsonSerde({"user": str, "ts": int, "id": int}),
                       max_offsets_per_batch=max_per_batch, first_batch_max_offsets=None)
    bolt = (ClickSessions().with_session_window(Duration.millis(GAP_MS))
            .with_timestamp_field("ts").with_lag(Duration.millis(LAG_MS))
            .with_late_tuple_stream("late"))
    config = RedisConfig.from_url(redis_url)
    b = TopologyBuilder()
    b.set_spout("clicks", spout)
    b.set_bolt("sessions", bolt, 2).fields_grouping("clicks", Fields("user"))
    b.set_bolt("store", RedisSink(config, key=f"{name}:session:{{user}}:{{start}}",
                                  value=SESSION_VALUE, merge="set")).shuffle_grouping("sessions")
    b.set_bolt("fires", RedisSink(config, key=f"{name}:fires:{{user}}:{{start}}",
                                  merge="count")).shuffle_grouping("sessions")
    b.set_bolt("late-ids", LateIds()).shuffle_grouping("sessions", "late")
    b.set_bolt("late", RedisSink(config, key=f"{name}:late:{{id}}", merge="count")
               ).shuffle_grouping("late-ids")
    return b.create_topology()


def aggregate_topology(topic: str, redis_url: str, name: str,
                       max_per_batch: int = MAX_PER_BATCH) -> Any:
    """The same with the built-in ``WindowedAggregate`` for the bolt (``--aggregate``).

    Its sessions (count and sum of ids per user) close in the commit phase; its open
    sessions live in the checkpoint and in the sinks' stored state.
    """
    spout = KafkaSpout(topic, value_serde=JsonSerde({"user": str, "ts": int, "id": int}),
                       max_offsets_per_batch=max_per_batch, first_batch_max_offsets=None)
    agg = (WindowedAggregate(key="user", count=Agg.count(), checksum=Agg.sum("id"))
           .with_session_window(Duration.millis(GAP_MS))
           .with_timestamp_field("ts").with_lag(Duration.millis(LAG_MS))
           .with_late_tuple_stream("late"))
    config = RedisConfig.from_url(redis_url)
    b = TopologyBuilder()
    b.set_spout("clicks", spout)
    b.set_bolt("sessions", agg, 2).fields_grouping("clicks", Fields("user"))
    b.set_bolt("store", RedisSink(config, key=f"{name}:session:{{user}}:{{session_start}}",
                                  value=AGGREGATE_VALUE, merge="set")
               ).shuffle_grouping("sessions")
    b.set_bolt("fires", RedisSink(config, key=f"{name}:fires:{{user}}:{{session_start}}",
                                  merge="count")).shuffle_grouping("sessions")
    b.set_bolt("late", RedisSink(config, key=_late_key(name), merge="count")
               ).shuffle_grouping("sessions", "late")  # (an aggregate feeds sinks only)
    return b.create_topology()


def _late_key(name: str) -> Any:
    """The late sink's key of a late click (the aggregate's ``late_tuple``: its fields)."""
    return lambda row: f"{name}:late:{row['late_tuple']['id']}"


AGGREGATE_VALUE = {"end": "session_end", "count": "count", "checksum": "checksum"}


def stored_counts(client: Any, name: str) -> tuple[int, int]:
    """(sessions stored, emissions counted) under ``<name>:session:*`` / ``<name>:fires:*``."""
    sessions = sum(1 for _ in client.scan_iter(f"{name}:session:*", count=1000))
    fires = sum(int(client.get(k) or 0) for k in client.scan_iter(f"{name}:fires:*",
                                                                   count=1000))
    return sessions, fires


def run(args: argparse.Namespace) -> int:
    """Run until ``--expected`` sessions are stored and emitted once (0), or more (2)."""
    import redis
    from session_topology import (  # the bolts: classes the workers import
        aggregate_topology,
        kill_topology,
    )
    from wc_topology import provider_conf

    from kstorm import submit_topology

    conf = kafka_conf(args, **provider_conf(args.provider, args.redis_url))
    build = aggregate_topology if args.aggregate else kill_topology
    handle = submit_topology(args.name, conf, build(args.topic, args.redis_url, args.name))
    client = redis.Redis.from_url(args.redis_url, socket_timeout=5)

    def stored() -> int | None:
        counts = stored_counts(client, args.name)
        if max(counts) > args.expected:
            log.error("sessions: %s stored, %s emitted, of %s", *counts, args.expected)
            return EXIT_PASSED
        return EXIT_DONE if counts == (args.expected, args.expected) else None

    return watch(handle, "sessions", stored, args.timeout, retry_on=(redis.RedisError,))


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    parser = arguments("session_topology")
    parser.add_argument("--expected", type=int, required=True, help="sessions to store")
    parser.add_argument("--provider", default="redis", choices=("spark", "redis"))
    parser.add_argument("--aggregate", action="store_true",
                        help="the built-in WindowedAggregate instead of the windowed bolt")
    return run(parse(parser, argv))


if __name__ == "__main__":
    sys.exit(main())
