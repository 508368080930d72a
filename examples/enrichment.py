"""Clicks enriched with their campaign, counted per advertiser and 10 s window, exactly once.

Inputs (JSON on Kafka):

- ``clicks`` (or ``$CLICKS_TOPIC``): ``{"user": "u-3", "campaign_id": 7, "ts": 1700000000123}``;
- ``campaigns`` (or ``$CAMPAIGNS_TOPIC``), a compacted topic read as a table:
  ``{"campaign_id": 7, "advertiser": "acme"}``, the newest record per campaign.

A ``TableJoinBolt`` gives each click its campaign's advertiser (the newest row delivered
in the click's micro-batch or an earlier one; a click of an unknown campaign is dropped);
a windowed bolt counts the clicks per advertiser in tumbling 10 s event-time windows (5 s
of lag); the exactly-once Redis sink stores ``clicks:<advertiser>:<window start ms>``.
Run it with ``kstorm run`` against any Kafka and Redis::

    export REDIS_URL=redis://localhost:6379/0
    kstorm run examples.enrichment:topology -c kafka.bootstrap.servers=localhost:9092
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from kstorm import BaseWindowedBolt, Fields, KafkaSpout, TableJoinBolt, TopologyBuilder
from kstorm.windowing import Duration
from serdes import JsonSerde
from sinks.redis import RedisConfig, RedisSink

CLICKS, CAMPAIGNS = "clicks", "campaigns"
DEFAULT_REDIS_URL = "redis://localhost:6379/0"


class AdvertiserCounts(BaseWindowedBolt):
    """Counts a window's clicks per advertiser: ``(advertiser, window_start, count)``."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, window: Any) -> None:
        """One tuple per advertiser with clicks in the window."""
        start = window.get_start_timestamp()
        counts = Counter(t.get_string_by_field("advertiser") for t in window.get())
        for advertiser, count in sorted(counts.items()):
            self.collector.emit([advertiser, start, count])

    def declare_output_fields(self, declarer: Any) -> None:
        """The advertiser, the window's start (ms) and its count."""
        declarer.declare(Fields("advertiser", "window_start", "count"))


def topology() -> TopologyBuilder:
    """The enrichment topology (``kstorm run examples.enrichment:topology``)."""
    clicks = KafkaSpout(os.environ.get("CLICKS_TOPIC", CLICKS), value_serde=JsonSerde(
        {"user": str, "campaign_id": int, "ts": int}))
    campaigns = KafkaSpout(os.environ.get("CAMPAIGNS_TOPIC", CAMPAIGNS), value_serde=JsonSerde(
        {"campaign_id": int, "advertiser": str}))
    enrich = TableJoinBolt("clicks", "campaigns", "campaign_id").select(
        "user, campaign_id, ts, campaigns:advertiser")
    per_advertiser = (AdvertiserCounts().with_tumbling_window(Duration.seconds(10))
                      .with_timestamp_field("ts").with_lag(Duration.seconds(5)))
    redis = RedisConfig.from_url(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
    builder = TopologyBuilder()
    builder.set_spout("clicks", clicks)
    builder.set_spout("campaigns", campaigns)
    builder.set_bolt("enrich", enrich, 2).fields_grouping(
        "clicks", Fields("campaign_id")).fields_grouping("campaigns", Fields("campaign_id"))
    builder.set_bolt("per_advertiser", per_advertiser).global_grouping("enrich")
    builder.set_bolt("store", RedisSink(redis, key="clicks:{advertiser}:{window_start}",
                                        value="count", merge="set")
                     ).shuffle_grouping("per_advertiser")
    return builder
