"""``JoinBolt`` (#45 item 2): Storm 2's windowed stream joins, on the test driver.

Storm's *Joining Streams* guide: "JoinBolt jbolt = new JoinBolt("spout1", "id")
.join("spout2", "id", "spout1").select("id,name,dept").withTumblingWindow(...)" -- an
inner join of two inputs within each window; ``leftJoin`` keeps the rows with no match;
"stream1:key1" selects a field of one input, "x.y" a nested one. Every result is checked
against a nested-loop join of each window's tuples computed here.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstorm import BaseRichSpout, Fields, JoinBolt, TopologyBuilder
from kstorm.errors import TopologyError
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import ListSpout
from kstorm.windowing import Duration, TimeUnit

WINDOW = 10_000
FAR = 10**9 + 1  # past every window with data: its own never closes


def _two_inputs(users: list[list[Any]], depts: list[list[Any]], bolt: JoinBolt,
                parallelism: int = 2, later: tuple[list[Any], list[Any]] = ([], [])
                ) -> TopologyTestDriver:
    """spout1's ``users`` and spout2's ``depts`` (then ``later``'s), and a far tuple each."""
    far = [[key, "far", FAR] for key in sorted({r[0] for r in users + depts}) or [0]]
    builder = TopologyBuilder()
    builder.set_spout("spout1", ListSpout([users, later[0], far], Fields("id", "name", "ts")))
    builder.set_spout("spout2", ListSpout([depts, later[1], far], Fields("id", "dept", "ts")))
    builder.set_bolt("joiner", bolt, parallelism).fields_grouping(
        "spout1", Fields("id")).fields_grouping("spout2", Fields("id"))
    driver = TopologyTestDriver(builder.create_topology())
    driver.run()
    return driver


def _reference(users: list[list[Any]], depts: list[list[Any]], left: bool) -> list[tuple]:
    """A nested-loop join within each 10 s window (Storm's: e - 10 s < ts <= e)."""
    def window_of(ts: int) -> int:
        return -((-ts) // WINDOW)  # end-inclusive: e - 10 s < ts <= e
    out = []
    for u in users:
        matches = [d for d in depts if d[0] == u[0] and window_of(d[2]) == window_of(u[2])]
        out += [(u[0], u[1], d[1]) for d in matches]
        if left and not matches:
            out.append((u[0], u[1], None))
    return sorted(out, key=repr)


def _data(rng: random.Random, n: int) -> tuple[list[list[Any]], list[list[Any]]]:
    """Rows of each input in time order (no lag: a row behind its input's newest is late)."""
    users = [[rng.randint(0, 6), f"u{i}", rng.randint(1, 40_000)] for i in range(n)]
    depts = [[rng.randint(0, 6), f"d{i}", rng.randint(1, 40_000)] for i in range(n)]
    return sorted(users, key=lambda r: r[2]), sorted(depts, key=lambda r: r[2])


def _bolt(left: bool = False) -> JoinBolt:
    bolt = JoinBolt("spout1", "id")
    bolt = (bolt.left_join if left else bolt.join)("spout2", "id", "spout1")
    return (bolt.select("id,name,dept").with_tumbling_window(Duration(10, TimeUnit.SECONDS))
            .with_timestamp_field("ts"))


def test_storm_s_example_joins_two_spouts_by_id_within_each_window() -> None:
    users = [[1, "ann", 1_000], [2, "bob", 2_000], [3, "cy", 12_000]]
    depts = [[1, "sales", 3_000], [2, "ops", 15_000], [3, "hr", 11_000], [3, "it", 19_000]]
    driver = _two_inputs(users, depts, _bolt())
    got = sorted(map(tuple, driver.output("joiner")), key=repr)
    # bob (window 0) and ops (window 1) never share a window
    assert got == [(1, "ann", "sales"), (3, "cy", "hr"), (3, "cy", "it")]
    assert driver.topology.components["joiner"].streams["default"] == Fields("id", "name", "dept")


def test_a_left_join_keeps_the_rows_without_a_match_with_none() -> None:
    users = [[1, "ann", 1_000], [2, "bob", 2_000]]
    depts = [[1, "sales", 3_000]]
    driver = _two_inputs(users, depts, _bolt(left=True))
    assert sorted(map(tuple, driver.output("joiner")), key=repr) == [
        (1, "ann", "sales"), (2, "bob", None)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), left=st.booleans(), parallelism=st.integers(1, 3))
def test_every_window_s_join_equals_a_nested_loop_join(seed: int, left: bool,
                                                        parallelism: int) -> None:
    users, depts = _data(random.Random(seed), 25)
    driver = _two_inputs(users, depts, _bolt(left), parallelism)
    got = sorted(map(tuple, driver.output("joiner")), key=repr)
    assert got == _reference(users, depts, left)


class _Streams(BaseRichSpout):
    """Emits on ``stream1``..``stream3`` what the test pipes."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare_stream("stream1", Fields("key1", "field1", "ts"))
        declarer.declare_stream("stream2", Fields("key2", "info", "ts"))
        declarer.declare_stream("stream3", Fields("key3", "ts"))

    def next_tuple(self) -> None:
        pass


def test_streams_joined_by_stream_id_with_a_left_join_and_nested_fields() -> None:
    """Storm's three-stream example: join stream2 to stream1, left join stream3 to stream2."""
    bolt = (JoinBolt(JoinBolt.Selector.STREAM, "stream1", "key1")
            .join("stream2", "key2", "stream1")
            .left_join("stream3", "key3", "stream2")
            .select("stream1:key1, stream2:key2, stream3:key3, stream1:field1, info.city")
            .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts"))
    builder = TopologyBuilder()
    builder.set_spout("src", _Streams())
    joiner = builder.set_bolt("joiner", bolt)
    for stream in ("stream1", "stream2", "stream3"):
        joiner.global_grouping("src", stream)
    with TopologyTestDriver(builder.create_topology()) as driver:
        driver.pipe("src", [["a", "x", 1], ["b", "y", 2]], stream="stream1")
        driver.pipe("src", [["a", {"city": "Oslo"}, 3], ["b", {}, 4]], stream="stream2")
        driver.pipe("src", [["a", 5], ["a", 6]], stream="stream3")
        for stream, row in (("stream1", ["z", "", FAR]), ("stream2", ["z", {}, FAR]),
                            ("stream3", ["z", FAR])):  # every window with data closes
            driver.pipe("src", [row], stream=stream)
        got = sorted(map(tuple, driver.output("joiner")), key=repr)
    assert driver.topology.components["joiner"].streams["default"] == Fields(
        "key1", "key2", "key3", "field1", "info.city")
    assert got == sorted([("a", "a", "a", "x", "Oslo"), ("a", "a", "a", "x", "Oslo"),
                          ("b", "b", None, "y", None)], key=repr)


def test_late_tuples_of_either_input_go_to_the_late_stream() -> None:
    bolt = _bolt().with_lag(Duration.millis(0)).with_late_tuple_stream("late")
    users, depts = [[1, "ann", 25_000]], [[1, "sales", 26_000]]
    later = ([[1, "old", 1_000]], [[1, "stale", 500]])  # 24 s and 25 s behind their inputs
    driver = _two_inputs(users, depts, bolt, parallelism=1, later=later)
    late = sorted(t[0].get_value_by_field("ts") for t in driver.output("joiner", "late"))
    assert late == [500, 1_000]
    assert [tuple(r) for r in driver.output("joiner")] == [(1, "ann", "sales")]


def test_mistakes_are_refused_with_what_to_do() -> None:
    with pytest.raises(TopologyError, match="was not declared before"):
        JoinBolt("a", "id").join("b", "id", "c")
    with pytest.raises(TopologyError, match="already part of the join"):
        JoinBolt("a", "id").join("b", "id", "a").join("b", "id", "a")
    with pytest.raises(TopologyError, match="takes"):
        JoinBolt("a")
    builder = TopologyBuilder()
    builder.set_spout("a", ListSpout([[[1]]], Fields("id")))
    builder.set_bolt("j", JoinBolt("a", "id").with_tumbling_window(Duration.seconds(1))
                     ).shuffle_grouping("a")
    with pytest.raises(TopologyError, match="call select"):
        builder.create_topology()
    builder = TopologyBuilder()
    for spout in ("a", "b", "c"):
        builder.set_spout(spout, ListSpout([[[1]]], Fields("id")))
    joiner = builder.set_bolt("j", JoinBolt("a", "id").join("b", "id", "a").select("id")
                              .with_tumbling_window(Duration.seconds(1)))
    for spout in ("a", "b", "c"):
        joiner.shuffle_grouping(spout)
    with pytest.raises(TopologyError, match=r"subscribes to sources \['c'\]"):
        builder.create_topology()


def test_the_reference_windows_are_storm_s_end_inclusive_ones() -> None:
    assert [(-((-ts) // WINDOW)) for ts in (1, 10_000, 10_001)] == [1, 1, 2]


def _joiner(parallelism: int, group: Any, bolt: JoinBolt | None = None,
            users: list[list[Any]] | None = None, depts: list[list[Any]] | None = None
            ) -> TopologyBuilder:
    """spout1's ``users`` and spout2's ``depts`` (then a far tuple per key) into ``bolt``
    (default: the inner join), each input wired by ``group(declarer, spout)``."""
    users, depts = users or [[1, "ann", 1]], depts or [[1, "sales", 2]]
    far = [[key, "far", FAR] for key in sorted({r[0] for r in users + depts})]
    builder = TopologyBuilder()
    builder.set_spout("spout1", ListSpout([users, far], Fields("id", "name", "ts")))
    builder.set_spout("spout2", ListSpout([depts, far], Fields("id", "dept", "ts")))
    joiner = builder.set_bolt("joiner", bolt or _bolt(), parallelism)
    for spout in ("spout1", "spout2"):
        group(joiner, spout)
    return builder


@pytest.mark.parametrize("grouping", ["shuffle", "all", "fields on another field"])
def test_more_than_one_task_needs_every_input_fields_grouped_on_its_join_field(
        grouping: str) -> None:
    """Storm's *Joining Streams*: "Each of JoinBolt's incoming data streams must be Fields
    Grouped on a single field" -- else a key's tuples of two inputs reach different tasks
    and their match is missed, silently; an all grouping joins every tuple on every task."""
    def group(joiner: Any, spout: str) -> None:
        if spout == "spout1":
            joiner.fields_grouping(spout, Fields("id"))
        elif grouping == "shuffle":
            joiner.shuffle_grouping(spout)
        elif grouping == "all":
            joiner.all_grouping(spout)
        else:
            joiner.fields_grouping(spout, Fields("dept"))
    with pytest.raises(TopologyError) as refused:
        _joiner(2, group).create_topology()
    message = str(refused.value)
    assert "JoinBolt 'joiner' runs 2 tasks but its input 'spout2'" in message
    kind = {"fields on another field": "fields grouping of spout2:default on ['dept']"}.get(
        grouping, f"{grouping} grouping of spout2:default")
    assert kind in message
    assert "use fields_grouping('spout2', Fields('id'))" in message
    _joiner(1, group).create_topology()  # one task sees every tuple: fine


def test_one_task_or_every_input_global_grouped_joins_every_match() -> None:
    users, depts = _data(random.Random(3), 40)
    expected = _reference(users, depts, left=False)
    assert len(expected) > 10
    for parallelism, how in ((3, "global_grouping"), (1, "shuffle_grouping")):
        builder = _joiner(parallelism, lambda j, s, how=how: getattr(j, how)(s),
                          users=users, depts=depts)
        with TopologyTestDriver(builder.create_topology()) as driver:
            driver.run()
            assert sorted(map(tuple, driver.output("joiner")), key=repr) == expected


def test_a_nested_join_field_needs_one_task_or_a_global_grouping() -> None:
    bolt = (JoinBolt("spout1", "id").join("spout2", "id.sub", "spout1").select("name")
            .with_tumbling_window(Duration.seconds(10)))
    with pytest.raises(TopologyError, match=r"input 'spout2' has a fields grouping.*"
                                            r"join field 'id.sub' is nested"):
        _joiner(2, lambda j, s: j.fields_grouping(s, Fields("id")), bolt).create_topology()


def test_a_join_field_its_input_does_not_declare_is_refused() -> None:
    """Without the check every tuple of the input joins nothing, and an inner join emits
    nothing at all (#42)."""
    bolt = (JoinBolt("spout1", "id").join("spout2", "user_id", "spout1").select("name")
            .with_tumbling_window(Duration.seconds(10)))
    with pytest.raises(TopologyError) as refused:
        _joiner(1, lambda j, s: j.shuffle_grouping(s), bolt).create_topology()
    assert str(refused.value) == (
        "JoinBolt 'joiner': input 'spout2' joins on field 'user_id', but stream "
        "spout2:default declares fields ['id', 'dept', 'ts']; none of its tuples would join")


@pytest.mark.parametrize(("select", "culprit"), [
    ("spout1:name, spout2:title", "field 'title', which its input declares "
     "({'spout2:default': ['id', 'dept', 'ts']})"),
    ("id, salary", "field 'salary', which none of its inputs declares"),
])
def test_a_selected_field_no_input_declares_is_refused(select: str, culprit: str) -> None:
    """Without the check the field is None in every joined row, and nothing says why."""
    bolt = (JoinBolt("spout1", "id").join("spout2", "id", "spout1").select(select)
            .with_tumbling_window(Duration.seconds(10)))
    with pytest.raises(TopologyError) as refused:
        _joiner(1, lambda j, s: j.shuffle_grouping(s), bolt).create_topology()
    assert str(refused.value).startswith(f"JoinBolt 'joiner': select names {culprit}")
    assert str(refused.value).endswith("every joined row would hold None there")
