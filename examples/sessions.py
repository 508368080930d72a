"""Page views cut into sessions per user, each stored once in Redis when it closes.

Input: JSON page views on the Kafka topic ``page-views`` (or ``$SESSIONS_TOPIC``), e.g.
``{"user": "u-17", "page": "/cart", "ts": 1700000000123}`` (``ts`` in epoch ms).
A session is a user's burst of views with less than 30 s between neighbours (event time,
5 s of lag); when the watermark passes its last view plus the gap, the exactly-once Redis
sink stores ``sessions:<user>:<session start ms>`` = ``{"end": ..., "views": n,
"pages": distinct pages}``. A session is emitted once, when it closes, so a sink never
sees the sessions a bridging view merged: only the merged one. Run it with::

    export REDIS_URL=redis://localhost:6379/0
    kstorm run examples.sessions:topology -c kafka.bootstrap.servers=localhost:9092
"""

from __future__ import annotations

import os
from typing import Any

from kstorm import BaseWindowedBolt, Fields, KafkaSpout, TopologyBuilder
from kstorm.windowing import Duration
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

TOPIC = "page-views"
GAP = Duration.seconds(30)
DEFAULT_REDIS_URL = "redis://localhost:6379/0"


class UserSessions(BaseWindowedBolt):
    """One tuple per closed session: the user, its bounds, its views and distinct pages."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, window: Any) -> None:
        """Called once per session, when it closes."""
        views = window.get()
        self.collector.emit([views[0].get_string_by_field("user"),
                             window.get_start_timestamp(), window.get_end_timestamp(),
                             len(views), len({v.get_string_by_field("page") for v in views})])

    def declare_output_fields(self, declarer: Any) -> None:
        """The session's user, start (its first view), end (last view + gap), counts."""
        declarer.declare(Fields("user", "session_start", "session_end", "views", "pages"))


def stored_value(row: dict[str, Any]) -> dict[str, int]:
    """The value stored for one session."""
    return {"end": row["session_end"], "views": row["views"], "pages": row["pages"]}


def topology() -> TopologyBuilder:
    """The sessions topology (``kstorm run examples.sessions:topology``)."""
    spout = KafkaSpout(os.environ.get("SESSIONS_TOPIC", TOPIC),
                       value_serde=JsonSerde({"user": str, "page": str, "ts": int}))
    sessions = (UserSessions().with_session_window(GAP).with_timestamp_field("ts")
                .with_lag(Duration.seconds(5)))
    redis = RedisConfig.from_url(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
    builder = TopologyBuilder()
    builder.set_spout("views", spout)
    builder.set_bolt("sessions", sessions, 2).fields_grouping("views", Fields("user"))
    builder.set_bolt("store", RedisSink(redis, key="sessions:{user}:{session_start}",
                                        value=stored_value, merge="set")
                     ).shuffle_grouping("sessions")
    return builder
