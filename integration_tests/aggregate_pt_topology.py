"""The processing-time aggregate session kill test's topology, in a killable subprocess.

KafkaSpout (JSON clicks ``{user, ts, id}``, 36 records a batch) --fields(user)-->
``WindowedAggregate(key="user", count, checksum=sum(id))`` with processing-time session
windows (no timestamp field: a click's time is its micro-batch's; gap 1 s; 2 tasks) --> two
exactly-once RedisSinks:

- ``store``: ``<name>:session:<user>:<session_start>`` = ``{"end", "count", "checksum"}``;
- ``fires``: ``<name>:fires:<user>:<session_start>`` counts the session's emissions.

The continuous trigger (every 100 ms); the last sessions close in batches without input,
once due. The run exits 0 once the stored sessions hold ``--clicks`` clicks in all, each
emitted once; 2 if more are stored or one is emitted twice; 1 if the topology stopped; 3 on
timeout::

    python -m aggregate_pt_topology --bootstrap B --redis-url U --topic T --checkpoint D \\
        --name N --clicks K [--timeout S]

:func:`generate_clicks` makes the clicks in blocks of two users, each user in two blocks out
of six in turn, so a user is silent for a few batches between its sessions.

Example:
    >>> [c.user for c in generate_clicks(blocks=3, per_block=2)]
    ['u0', 'u1', 'u1', 'u2', 'u2', 'u3']
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from _runner import EXIT_DONE, EXIT_PASSED, arguments, kafka_conf, parse, watch
from session_topology import PARTITIONS, Click

from kstorm import Fields, KafkaSpout, TopologyBuilder
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

GAP_MS = 1_000
USERS = tuple(f"u{i}" for i in range(6))
MAX_PER_BATCH = 36

log = logging.getLogger("aggregate_pt_topology")


def generate_clicks(blocks: int = 24, per_block: int = 100) -> list[Click]:
    """``blocks`` blocks of ``per_block`` clicks: block ``k`` of users ``k`` and ``k + 1``.

    Clicks alternate between the partitions (so both move through the blocks together); a
    click's ``ts`` is its id (unused: the sessions are in processing time).
    """
    out = []
    for k in range(blocks):
        pair = (USERS[k % len(USERS)], USERS[(k + 1) % len(USERS)])
        for j in range(per_block):
            i = len(out)
            out.append(Click(i % PARTITIONS, pair[j % 2], i, i))
    return out


def topology(topic: str, redis_url: str, name: str) -> Any:
    """The topology of the module docstring."""
    spout = KafkaSpout(topic, value_serde=JsonSerde({"user": str, "ts": int, "id": int}),
                       max_offsets_per_batch=MAX_PER_BATCH, first_batch_max_offsets=None)
    agg = (WindowedAggregate(key="user", count=Agg.count(), checksum=Agg.sum("id"))
           .with_session_window(Duration.millis(GAP_MS)))
    config = RedisConfig.from_url(redis_url)
    b = TopologyBuilder()
    b.set_spout("clicks", spout)
    b.set_bolt("sessions", agg, 2).fields_grouping("clicks", Fields("user"))
    b.set_bolt("store", RedisSink(
        config, key=f"{name}:session:{{user}}:{{session_start}}",
        value={"end": "session_end", "count": "count", "checksum": "checksum"}, merge="set")
               ).shuffle_grouping("sessions")
    b.set_bolt("fires", RedisSink(config, key=f"{name}:fires:{{user}}:{{session_start}}",
                                  merge="count")).shuffle_grouping("sessions")
    return b.create_topology()


def stored_clicks(client: Any, name: str) -> tuple[int, int]:
    """(clicks in the stored sessions, the most emissions of one session)."""
    keys = list(client.scan_iter(f"{name}:session:*", count=1000))
    clicks = sum(json.loads(v)["count"] for v in client.mget(keys) if v) if keys else 0
    fires = list(client.scan_iter(f"{name}:fires:*", count=1000))
    most = max((int(v or 0) for v in client.mget(fires)), default=0) if fires else 0
    return clicks, most


def run(args: argparse.Namespace) -> int:
    """Run until the stored sessions hold ``--clicks`` clicks, each session emitted once."""
    import redis
    from aggregate_pt_topology import topology  # (by module: what workers import)

    from kstorm import submit_topology

    handle = submit_topology(args.name, kafka_conf(args), topology(args.topic, args.redis_url,
                                                                    args.name))
    client = redis.Redis.from_url(args.redis_url, socket_timeout=5)

    def stored() -> int | None:
        clicks, most = stored_clicks(client, args.name)
        if clicks > args.clicks or most > 1:
            log.error("sessions hold %s clicks of %s; a session emitted %s times", clicks,
                      args.clicks, most)
            return EXIT_PASSED
        return EXIT_DONE if clicks == args.clicks else None

    return watch(handle, "sessions", stored, args.timeout, retry_on=(redis.RedisError,))


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    parser = arguments("aggregate_pt_topology")
    parser.add_argument("--clicks", type=int, required=True, help="clicks produced")
    return run(parse(parser, argv))


if __name__ == "__main__":
    sys.exit(main())
