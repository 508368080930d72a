"""TopologyBuilder validation: each error names the component and says what is wrong."""

import pytest

from kstorm import (
    BaseBasicBolt,
    BaseRichSpout,
    Fields,
    TopologyBuilder,
    TopologyError,
)
from kstorm.testing import CaptureSink, ListSpout


class Spout(BaseRichSpout):
    def declare_output_fields(self, d):
        d.declare(Fields("sentence"))
        d.declare_stream("errors", Fields("line", "reason"))


class Bolt(BaseBasicBolt):
    def __init__(self, *fields):
        self.fields = fields or ("word",)

    def declare_output_fields(self, d):
        d.declare(Fields(*self.fields))

    def execute(self, t, c):
        c.emit([t.get_value(0)])


def test_valid_topology_in_topological_order():
    b = TopologyBuilder()
    b.set_bolt("count", Bolt("word", "n"), 4).fields_grouping("split", Fields("word"))
    b.set_bolt("split", Bolt(), 2).shuffle_grouping("lines")
    b.set_spout("lines", Spout())
    topo = b.create_topology()
    assert topo.order == ("lines", "split", "count")
    assert topo.components["count"].parallelism == 4
    assert topo.components["lines"].streams["errors"] == Fields("line", "reason")
    assert [c for c, _ in topo.consumers("split")] == ["count"]


def test_duplicate_id_is_rejected():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    with pytest.raises(TopologyError, match="duplicate component id 'lines'"):
        b.set_bolt("lines", Bolt())


@pytest.mark.parametrize("cid", ["__acker", "__system", "__checkpoint"])
def test_reserved_id_is_rejected(cid):
    with pytest.raises(TopologyError, match=f"{cid!r} is reserved"):
        TopologyBuilder().set_bolt(cid, Bolt())


def test_reserved_stream_is_rejected():
    class Bad(Bolt):
        def declare_output_fields(self, d):
            d.declare_stream("__ack", Fields("x"))

    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("bad", Bad()).shuffle_grouping("lines")
    with pytest.raises(TopologyError, match="'bad'.*'__ack' is reserved"):
        b.create_topology()


def test_unknown_component():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("split", Bolt()).shuffle_grouping("line")
    with pytest.raises(TopologyError, match="bolt 'split' subscribes to unknown component 'line'"):
        b.create_topology()


def test_unknown_stream():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("split", Bolt()).shuffle_grouping("lines", stream="warnings")
    with pytest.raises(TopologyError, match="stream 'warnings' of 'lines'.*declares only"):
        b.create_topology()


def test_named_stream_subscription_is_valid():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("errs", Bolt()).fields_grouping("lines", Fields("reason"), stream="errors")
    assert b.create_topology().components["errs"].inputs[0].stream == "errors"


def test_undeclared_grouping_field():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("split", Bolt()).shuffle_grouping("lines")
    b.set_bolt("count", Bolt()).fields_grouping("split", Fields("wrd"))
    with pytest.raises(TopologyError, match=r"bolt 'count': fields grouping on \['wrd'\]"):
        b.create_topology()


def test_cycle_names_the_components():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("a", Bolt()).shuffle_grouping("lines").shuffle_grouping("c")
    b.set_bolt("c", Bolt()).shuffle_grouping("a")
    with pytest.raises(TopologyError, match="cycle: a -> c -> a"):
        b.create_topology()


def test_bolt_without_inputs():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("lonely", Bolt())
    with pytest.raises(TopologyError, match="bolt 'lonely' subscribes to nothing"):
        b.create_topology()


def test_topology_needs_a_spout():
    b = TopologyBuilder()
    b.set_bolt("x", Bolt())
    with pytest.raises(TopologyError, match="at least one spout"):
        b.create_topology()


@pytest.mark.parametrize("par", [0, -1, 1.5, True])
def test_bad_parallelism(par):
    with pytest.raises(TopologyError, match="parallelism must be an int >= 1"):
        TopologyBuilder().set_bolt("x", Bolt(), par)


def test_spout_as_bolt_and_bolt_as_spout():
    with pytest.raises(TopologyError, match="bolt 'x' is a spout"):
        TopologyBuilder().set_bolt("x", Spout())
    with pytest.raises(TopologyError, match="spout 'x' is a Bolt, not a spout"):
        TopologyBuilder().set_spout("x", Bolt())


def test_not_a_component():
    with pytest.raises(TopologyError, match="must be a kstorm spout/bolt, got function"):
        TopologyBuilder().set_bolt("x", lambda t: t)


def test_empty_fields_grouping():
    b = TopologyBuilder()
    with pytest.raises(TopologyError, match="non-empty Fields"):
        b.set_bolt("x", Bolt()).fields_grouping("lines", Fields())


def test_duplicate_subscription():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("x", Bolt()).shuffle_grouping("lines").global_grouping("lines")
    with pytest.raises(TopologyError, match="subscribes twice to lines:default"):
        b.create_topology()


def test_duplicate_stream_declaration():
    class Twice(Bolt):
        def declare_output_fields(self, d):
            d.declare(Fields("a"))
            d.declare(Fields("b"))

    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("t", Twice()).shuffle_grouping("lines")
    with pytest.raises(TopologyError, match="'t' declares stream 'default' twice"):
        b.create_topology()


def test_topology_is_a_copy_of_the_declarations():
    bolt = Bolt()
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("x",)]], Fields("sentence")))
    b.set_bolt("split", bolt).shuffle_grouping("lines")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("split")
    topo = b.create_topology()
    bolt.fields = ("changed",)
    assert topo.components["split"].component.fields == ("word",)


def test_a_component_holding_a_live_resource_is_refused_by_id():
    import threading

    class Locked(Bolt):
        def __init__(self):
            super().__init__()
            self.lock = threading.Lock()  # belongs in prepare(): it cannot be pickled

    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("split", Locked()).shuffle_grouping("lines")
    with pytest.raises(TopologyError, match=r"bolt 'split' \(Locked\) cannot be copied") as err:
        b.create_topology()
    assert "lock" in str(err.value) and "prepare()" in err.value.hint


def test_storm_partial_key_grouping_routes_each_key_to_one_task():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("count", Bolt(), 3).partial_key_grouping("lines", Fields("sentence"))
    (grouping,) = b.create_topology().components["count"].inputs
    assert grouping.kind.value == "fields" and grouping.fields == Fields("sentence")


@pytest.mark.parametrize("call", [
    lambda d: d.direct_grouping("lines"),
    lambda d: d.custom_grouping("lines", object()),
])
def test_direct_and_custom_groupings_are_refused_with_what_to_use(call):
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    with pytest.raises(TopologyError, match="bolt 'split'.*not supported") as err:
        call(b.set_bolt("split", Bolt()))
    assert "fields_grouping" in err.value.hint


def test_storm_declare_forms_with_the_direct_flag():
    from kstorm import OutputFieldsDeclarer

    d = OutputFieldsDeclarer("split")
    d.declare(False, Fields("word"))  # Storm's declare(boolean direct, Fields fields)
    d.declare_stream("errors", False, Fields("line"))
    assert d.streams == {"default": Fields("word"), "errors": Fields("line")}
    with pytest.raises(TopologyError, match="'split'.*'counts' is declared direct") as err:
        d.declare_stream("counts", True, Fields("n"))
    assert "fields grouping" in err.value.hint


def test_storm_set_num_tasks_sets_the_task_count():
    b = TopologyBuilder()
    b.set_spout("lines", Spout())
    b.set_bolt("count", Bolt(), 2).set_num_tasks(4).fields_grouping("lines", Fields("sentence"))
    assert b.create_topology().components["count"].parallelism == 4
    with pytest.raises(TopologyError, match="'count2': set_num_tasks needs an int >= 1"):
        b.set_bolt("count2", Bolt()).set_num_tasks(0)
