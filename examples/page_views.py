"""Page views and distinct users per page and 10-second event-time window, exactly once.

Input: JSON events on the Kafka topic ``page-views`` (or ``$PAGE_VIEWS_TOPIC``), e.g.
``{"user": "u-17", "page": "/cart", "ts": 1700000000123}`` (``ts`` in epoch milliseconds).
Output: one Redis key per page and window, ``page-views:<page>:<window start ms>``, holding
``{"views": 3, "users": 2}``, written through the exactly-once Redis sink once the window
closes (5 s of lag allowed for late events).

Run it with ``kstorm run`` (``kstorm run --help``), against any Kafka and Redis::

    export REDIS_URL=redis://localhost:6379/0
    kstorm run examples.page_views:topology -c kafka.bootstrap.servers=localhost:9092

or in a container: ``docker/examples/Dockerfile.topology`` builds an image of it on top of
the kstorm image. The Redis URL comes from ``REDIS_URL`` because the sink is declared here,
in your code; everything Storm and Spark read comes from kstorm's config.
"""

from __future__ import annotations

import os
from typing import Any

from kstorm import Fields, KafkaSpout, TopologyBuilder
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

TOPIC = "page-views"
DEFAULT_REDIS_URL = "redis://localhost:6379/0"


def views_and_users(row: dict[str, Any]) -> dict[str, int]:
    """The value stored for one page and window."""
    return {"views": row["views"], "users": row["users"]}


def topology() -> TopologyBuilder:
    """The page-views topology (``kstorm run examples.page_views:topology``)."""
    topic = os.environ.get("PAGE_VIEWS_TOPIC", TOPIC)
    spout = KafkaSpout(topic, value_serde=JsonSerde({"user": str, "page": str, "ts": int}))
    per_page = (WindowedAggregate(key="page", views=Agg.count(),
                                  users=Agg.count_distinct("user"))
                .with_tumbling_window(Duration.seconds(10))
                .with_timestamp_field("ts")
                .with_lag(Duration.seconds(5)))
    redis = RedisConfig.from_url(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
    store = RedisSink(redis, key="page-views:{page}:{window_start}", value=views_and_users,
                      merge="set", mode="transactional")
    builder = TopologyBuilder()
    builder.set_spout("views", spout)
    builder.set_bolt("per_page", per_page).fields_grouping("views", Fields("page"))
    builder.set_bolt("store", store).shuffle_grouping("per_page")
    return builder
