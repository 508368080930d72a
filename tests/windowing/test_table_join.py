"""``TableJoinBolt`` (#45 item 2): a stream enriched from a table, e.g. a compacted topic.

The documented consistency rule: an event sees the newest row of its key delivered in its
own micro-batch or an earlier one, never one from a later batch. The property test cuts
random rows and events into random batches and checks every joined row against that rule
applied by brute force.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm import Fields, TableJoinBolt, TopologyBuilder
from kstorm.errors import TopologyError
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import ListSpout


def _driver(clicks: list[list[Any]], campaigns: list[list[Any]], *, left: bool = False,
            parallelism: int = 2) -> TopologyTestDriver:
    """clicks: batches of (user, campaign_id); campaigns: batches of (campaign_id, owner)."""
    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout(clicks, Fields("user", "campaign_id")))
    builder.set_spout("campaigns", ListSpout(campaigns, Fields("campaign_id", "owner")))
    bolt = TableJoinBolt("clicks", "campaigns", "campaign_id", left=left).select(
        "user, campaign_id, campaigns:owner")
    builder.set_bolt("enrich", bolt, parallelism).fields_grouping(
        "clicks", Fields("campaign_id")).fields_grouping("campaigns", Fields("campaign_id"))
    driver = TopologyTestDriver(builder.create_topology())
    driver.run()
    return driver


def _reference(clicks: list[list[Any]], campaigns: list[list[Any]], left: bool) -> list[Any]:
    table: dict[Any, Any] = {}
    out = []
    for b in range(max(len(clicks), len(campaigns))):
        for key, owner in campaigns[b] if b < len(campaigns) else []:
            if owner is None:
                table.pop(key, None)
            else:
                table[key] = owner
        for user, key in clicks[b] if b < len(clicks) else []:
            if key in table or left:
                out.append((user, key, table.get(key)))
    return sorted(out, key=repr)


def test_each_click_gets_the_row_of_its_batch_or_an_earlier_one() -> None:
    campaigns = [[[1, "acme"], [2, "globex"]], [[1, "acme-2"]], [[2, None]]]
    clicks = [[["ann", 1], ["bob", 2], ["cy", 3]], [["ann", 1]], [["bob", 2], ["cy", 1]]]
    driver = _driver(clicks, campaigns)
    got = sorted(map(tuple, driver.output("enrich")), key=repr)
    # cy's campaign 3 has no row; campaign 2 was deleted in the batch bob's second click is in
    assert got == sorted([("ann", 1, "acme"), ("bob", 2, "globex"), ("ann", 1, "acme-2"),
                          ("cy", 1, "acme-2")], key=repr)
    assert driver.topology.components["enrich"].streams["default"] == Fields(
        "user", "campaign_id", "owner")


def test_a_left_table_join_keeps_the_events_without_a_row() -> None:
    driver = _driver([[["ann", 1], ["bob", 9]]], [[[1, "acme"]]], left=True)
    assert sorted(map(tuple, driver.output("enrich")), key=repr) == [
        ("ann", 1, "acme"), ("bob", 9, None)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), left=st.booleans(), parallelism=st.integers(1, 3))
def test_joined_rows_follow_the_consistency_rule_whatever_the_batches(
        seed: int, left: bool, parallelism: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 6)
    clicks = [[[f"u{rng.randint(0, 9)}", rng.randint(0, 4)] for _ in range(rng.randint(0, 8))]
              for _ in range(n)]
    campaigns = [[[rng.randint(0, 4), rng.choice([None, "a", "b", "c"])]
                  for _ in range(rng.randint(0, 3))] for _ in range(n)]
    driver = _driver(clicks, campaigns, left=left, parallelism=parallelism)
    got = sorted(map(tuple, driver.output("enrich")), key=repr)
    assert got == _reference(clicks, campaigns, left)


def test_the_table_rows_are_the_bolt_s_state() -> None:
    driver = _driver([[["ann", 1]]], [[[1, "acme"], [2, "globex"]], [[2, None]]],
                     parallelism=1)
    assert driver.state("enrich") == {1: {"campaign_id": 1, "owner": "acme"}}


def test_mistakes_are_refused_at_create_topology() -> None:
    with pytest.raises(TopologyError, match="names inputs"):
        TableJoinBolt("clicks", "campaigns", "id").select("users:name")
    with pytest.raises(TopologyError, match="both 'a'"):
        TableJoinBolt("a", "a", "id")
    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout([[[1]]], Fields("id")))
    builder.set_bolt("j", TableJoinBolt("clicks", "campaigns", "id").select("id")
                     ).shuffle_grouping("clicks")
    with pytest.raises(TopologyError, match=r"subscribes to \['clicks'\]"):
        builder.create_topology()
    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout([[[1]]], Fields("id")))
    builder.set_spout("campaigns", ListSpout([[[1]]], Fields("id")))
    builder.set_bolt("j", TableJoinBolt("clicks", "campaigns", "id")).shuffle_grouping(
        "clicks").shuffle_grouping("campaigns")
    with pytest.raises(TopologyError, match="call select"):
        builder.create_topology()


def _enrich(parallelism: int, clicks: Any, campaigns: Any, *, key: str = "campaign_id",
            table_key: str | None = None, left: bool = False) -> TopologyBuilder:
    """clicks (user, campaign_id) and campaigns (campaign_id, owner) into ``enrich``; wire
    each input with ``clicks(declarer)`` / ``campaigns(declarer)``."""
    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout([[["ann", 1], ["bob", 2]]],
                                          Fields("user", "campaign_id")))
    builder.set_spout("campaigns", ListSpout([[[1, "acme"], [2, "globex"]]],
                                             Fields("campaign_id", "owner")))
    bolt = TableJoinBolt("clicks", "campaigns", key, table_key=table_key, left=left).select(
        "user, campaigns:owner")
    declarer = builder.set_bolt("enrich", bolt, parallelism)
    clicks(declarer)
    campaigns(declarer)
    return builder


@pytest.mark.parametrize(("key", "table_key", "input_", "field", "declared"), [
    ("campaign", None, "stream 'clicks'", "campaign", "['user', 'campaign_id']"),
    ("campaign_id", "id", "table 'campaigns'", "id", "['campaign_id', 'owner']"),
])
def test_a_key_field_its_input_does_not_declare_is_refused(
        key: str, table_key: str | None, input_: str, field: str, declared: str) -> None:
    """Without the check every event (or every row) is ignored: an inner join emits nothing
    and nothing says why (#42)."""
    builder = _enrich(1, lambda d: d.shuffle_grouping("clicks"),
                      lambda d: d.shuffle_grouping("campaigns"), key=key, table_key=table_key)
    with pytest.raises(TopologyError) as refused:
        builder.create_topology()
    stream = input_.split("'")[1]
    assert str(refused.value) == (
        f"TableJoinBolt 'enrich': {input_} joins on field {field!r}, but stream "
        f"{stream}:default declares fields {declared}; none of its tuples would join")


@pytest.mark.parametrize(("clicks", "campaigns", "culprit"), [
    ("shuffle", "fields", "stream 'clicks' has a shuffle grouping of clicks:default"),
    ("fields", "shuffle", "table 'campaigns' has a shuffle grouping of campaigns:default"),
    ("fields", "global", "table 'campaigns' has a global grouping of campaigns:default"),
    ("all", "all", "stream 'clicks' has an all grouping of clicks:default"),
    ("all", "fields", "stream 'clicks' has an all grouping of clicks:default"),
])
def test_more_than_one_task_needs_a_key_s_events_and_row_on_one_task(
        clicks: str, campaigns: str, culprit: str) -> None:
    """As Storm's JoinBolt ("Each of JoinBolt's incoming data streams must be Fields Grouped
    on a single field"): else an event reaches a task without its key's row."""
    def wire(spout: str, how: str) -> Any:
        if how == "fields":
            return lambda d: d.fields_grouping(spout, Fields("campaign_id"))
        return lambda d: getattr(d, f"{how}_grouping")(spout)
    builder = _enrich(2, wire("clicks", clicks), wire("campaigns", campaigns))
    with pytest.raises(TopologyError) as refused:
        builder.create_topology()
    message = str(refused.value)
    assert message.startswith(f"TableJoinBolt 'enrich' runs 2 tasks but its {culprit}")
    spout = culprit.split("'")[1]
    assert f"use fields_grouping({spout!r}, Fields('campaign_id'))" in message
    assert "or all_grouping('campaigns') for the table" in message
    _enrich(1, wire("clicks", clicks), wire("campaigns", campaigns)).create_topology()


@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize(("clicks_by", "campaigns_by"), [
    ("shuffle", "all"), ("fields", "all"), ("global", "global")])
def test_a_table_all_grouped_to_every_task_or_all_global_joins_every_event(
        left: bool, clicks_by: str, campaigns_by: str) -> None:
    """Every task holding the whole table joins an event wherever it goes."""
    rng = random.Random(11)
    clicks = [[[f"u{rng.randint(0, 9)}", rng.randint(0, 5)] for _ in range(20)]
              for _ in range(3)]
    campaigns = [[[k, f"owner{k}"] for k in range(4)], [[1, "new1"], [2, None]], []]
    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout(clicks, Fields("user", "campaign_id")))
    builder.set_spout("campaigns", ListSpout(campaigns, Fields("campaign_id", "owner")))
    declarer = builder.set_bolt("enrich", TableJoinBolt(
        "clicks", "campaigns", "campaign_id", left=left).select(
        "user, campaign_id, campaigns:owner"), 3)
    for spout, how in (("clicks", clicks_by), ("campaigns", campaigns_by)):
        if how == "fields":
            declarer.fields_grouping(spout, Fields("campaign_id"))
        else:
            getattr(declarer, f"{how}_grouping")(spout)
    with TopologyTestDriver(builder.create_topology()) as driver:
        driver.run()
        got = sorted(map(tuple, driver.output("enrich")), key=repr)
    assert got == _reference(clicks, campaigns, left)


def test_a_selected_field_neither_input_declares_is_refused() -> None:
    """A typo in ``select`` would give None in every enriched event, silently."""
    builder = TopologyBuilder()
    builder.set_spout("clicks", ListSpout([[["ann", 1]]], Fields("user", "campaign_id")))
    builder.set_spout("campaigns", ListSpout([[[1, "acme"]]], Fields("campaign_id", "owner")))
    bolt = TableJoinBolt("clicks", "campaigns", "campaign_id").select("user, campaigns:ownr")
    builder.set_bolt("enrich", bolt).shuffle_grouping("clicks").shuffle_grouping("campaigns")
    with pytest.raises(TopologyError, match=r"select names field 'ownr', which its input "
                                            r"declares \(\{'campaigns:default': "
                                            r"\['campaign_id', 'owner'\]\}\)"):
        builder.create_topology()
