"""The stateful word count (seed 000) as a killable process, for the state kill tests.

KafkaSpout (one sentence per record) -> SplitSentence (2 tasks, shuffle) -> WordCount
(a ``BaseStatefulBolt``, ``--parallelism`` tasks (2), fields grouping or ``--grouping
global``; its ``KeyValueState`` in the provider ``--provider`` names) -> RedisSink
keeping the highest running count per word at ``<name>:<word>`` (sink id ``store``). Small
batches, the continuous trigger; the run exits 0 by itself once the sink's offset record
reaches the topic's end offsets read at start.

    python -m wc_topology --bootstrap B --redis-url U --topic T --checkpoint D --name N \\
        --provider redis
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any
from urllib.parse import urlparse

from _runner import EXIT_DONE, arguments, kafka_conf, parse, watch
from eo_topology import topic_ends
from topologies import SplitSentence, WordCount

log = logging.getLogger("wc_topology")
SINK_ID = "store"


def provider_conf(provider: str, redis_url: str) -> dict[str, Any]:
    """The topology configuration keys of ``provider``: spark, or redis at ``redis_url``
    (``redis``: the sink's database, so the state commits in the sink's atomic step;
    ``redis-db1``: database 1 of that server, so it commits in a second step)."""
    if provider == "spark":
        return {}
    url = urlparse(redis_url)
    database = int((url.path or "/0").lstrip("/") or 0)
    return {"topology.state.provider": "redis",
            "topology.state.provider.config": {"jedisPoolConfig": {
                "host": url.hostname, "port": url.port,
                "database": database + 1 if provider == "redis-db1" else database}}}


def build_topology(topic: str, redis_url: str, prefix: str, max_per_batch: int = 40,
                   parallelism: int = 2, grouping: str = "fields") -> Any:
    """The word count (module docstring); ``parallelism``: WordCount's tasks, fed by a
    ``grouping`` (fields on word, or global)."""
    from kstorm import Fields, KafkaSpout, TopologyBuilder
    from serdes import StringSerde
    from sinks.redis import RedisConfig, RedisSink

    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSpout(topic, value_serde=StringSerde(field="sentence"),
                                              max_offsets_per_batch=max_per_batch))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    count = builder.set_bolt("count", WordCount(), parallelism)
    if grouping == "global":
        count.global_grouping("split")
    else:
        count.fields_grouping("split", Fields("word"))
    builder.set_bolt(SINK_ID, RedisSink(RedisConfig.from_url(redis_url), key=prefix + ":{word}",
                                        value="count", merge="max")
                     ).fields_grouping("count", Fields("word"))
    return builder.create_topology()


def run(args: argparse.Namespace) -> int:
    """Run until the sink has committed the topic's end offsets; 0 on success."""
    from kstorm import submit_topology
    from kstorm.errors import KstormError

    ends = topic_ends(args.bootstrap, args.topic)
    conf = kafka_conf(args, **provider_conf(args.provider, args.redis_url))
    try:
        handle = submit_topology(args.name, conf, build_topology(args.topic, args.redis_url,
                                                                 args.name,
                                                                 parallelism=args.parallelism,
                                                                 grouping=args.grouping))
    except KstormError as exc:
        log.error("wc: refused: %s", exc)
        return 4
    sink = handle.sinks[SINK_ID]
    return watch(handle, "wc", lambda: EXIT_DONE if sink.committed().offsets.get(args.topic)
                 == ends else None, args.timeout)


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    parser = arguments("wc_topology")
    parser.add_argument("--provider", choices=("spark", "redis", "redis-db1"),
                        default="redis")
    parser.add_argument("--parallelism", type=int, default=2, help="WordCount's tasks")
    parser.add_argument("--grouping", choices=("fields", "global"), default="fields")
    return run(parse(parser, argv))


if __name__ == "__main__":
    sys.exit(main())
