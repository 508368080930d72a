"""``JoinBolt`` on a real Spark session gives the test driver's joins, row for row.

Storm's *Joining Streams* guide's example -- two spouts joined by ``id`` within tumbling
windows, the bolt's tasks fed by a fields grouping on the join field -- inner and left,
over random data in two batches on two partitions each. The test driver's joins are
checked against a nested-loop join in ``tests/windowing/test_join_bolt.py``; here Spark must give
the same rows.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kstorm import Fields, JoinBolt, TopologyBuilder
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import ListSpout, run_to_completion
from kstorm.windowing import Duration, TimeUnit

pytestmark = pytest.mark.integration

FAR = 10**9 + 1  # one per key and spout: every window with data closes, theirs never


def _topology(users: list[list[Any]], depts: list[list[Any]], left: bool) -> Any:
    far = [[key, "far", FAR] for key in sorted({r[0] for r in users + depts})]
    joiner = JoinBolt("spout1", "id")
    joiner = (joiner.left_join if left else joiner.join)("spout2", "id", "spout1")
    builder = TopologyBuilder()
    builder.set_spout("spout1", ListSpout([users[:15], users[15:], far],
                                          Fields("id", "name", "ts"), partitions=2))
    builder.set_spout("spout2", ListSpout([depts[:15], depts[15:], far],
                                          Fields("id", "dept", "ts"), partitions=2))
    builder.set_bolt("joiner", joiner.select("id, name, spout2:dept")
                     .with_tumbling_window(Duration(10, TimeUnit.SECONDS))
                     .with_timestamp_field("ts"), 2
                     ).fields_grouping("spout1", Fields("id")).fields_grouping(
                         "spout2", Fields("id"))
    return builder.create_topology()


@pytest.mark.parametrize("left", [False, True])
def test_join_bolt_on_spark_gives_the_test_driver_s_rows(spark: Any, left: bool) -> None:
    rng = random.Random(20261204)
    users = sorted(([rng.randint(0, 6), f"u{i}", rng.randint(1, 40_000)] for i in range(30)),
                   key=lambda r: r[2])  # in time order: none is late
    depts = sorted(([rng.randint(0, 6), f"d{i}", rng.randint(1, 40_000)] for i in range(30)),
                   key=lambda r: r[2])
    result = run_to_completion(_topology(users, depts, left), {"kstorm.shuffle.partitions": 2})
    got = sorted(map(tuple, result.emitted["joiner"]["default"]), key=repr)
    with TopologyTestDriver(_topology(users, depts, left)) as driver:
        driver.run()
        assert sorted(map(tuple, driver.output("joiner")), key=repr) == got
    assert len(got) > 10
    assert any(row[2] is None for row in got) == left


def _enrichment(clicks: list[list[Any]], campaigns: list[list[Any]], left: bool) -> Any:
    from kstorm import TableJoinBolt

    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout(clicks, Fields("user", "campaign_id"), partitions=2))
    builder.set_spout("campaigns", ListSpout(campaigns, Fields("campaign_id", "owner")))
    builder.set_bolt("enrich", TableJoinBolt("clicks", "campaigns", "campaign_id", left=left)
                     .select("user, campaign_id, campaigns:owner"), 2).fields_grouping(
        "clicks", Fields("campaign_id")).fields_grouping("campaigns", Fields("campaign_id"))
    return builder.create_topology()


@pytest.mark.parametrize("left", [False, True])
def test_table_join_on_spark_gives_the_test_driver_s_rows(spark: Any, left: bool) -> None:
    """Each click joins the newest row of its campaign from its batch or an earlier one."""
    rng = random.Random(7)
    clicks = [[[f"u{rng.randint(0, 9)}", rng.randint(0, 5)] for _ in range(20)]
              for _ in range(4)]
    campaigns = [[[k, f"owner{k}"] for k in range(4)], [[1, "new1"], [2, None]], [],
                 [[5, "owner5"]]]
    result = run_to_completion(_enrichment(clicks, campaigns, left),
                               {"kstorm.shuffle.partitions": 2})
    got = sorted(map(tuple, result.emitted["enrich"]["default"]), key=repr)
    with TopologyTestDriver(_enrichment(clicks, campaigns, left)) as driver:
        driver.run()
        assert sorted(map(tuple, driver.output("enrich")), key=repr) == got
    owners = {(r[1], r[2]) for r in got}
    assert (1, "new1") in owners and (1, "owner1") in owners  # the row changed at batch 1
    assert any(r[2] is None for r in got) == left
