"""A collector's ``emit`` in Storm's positional forms, as Storm code writes them.

Storm's *Guaranteeing message processing*: "``_collector.emit(tuple, new Values(word));``
... Each word tuple is anchored by specifying the input tuple as the first argument to
emit", and "``_collector.emit(anchors, new Values(1, 2, 3));``" for multi-anchoring. Ported
as written those calls must emit, anchored; a call in no form at all stops the topology at
once (an :class:`EmitError`), never a dead letter per tuple.
"""

from __future__ import annotations

from typing import Any

import pytest

from kstorm import BaseBasicBolt, BaseRichBolt, Fields, TopologyBuilder
from kstorm.bolt import OutputCollector
from kstorm.errors import EmitError, KstormError
from kstorm.spout import SpoutOutputCollector
from kstorm.testing import TopologyTestDriver
from kstorm.tuple import Tuple


def _collector() -> tuple[OutputCollector, list[tuple[str, list[Any], tuple[Any, ...]]]]:
    seen: list[tuple[str, list[Any], tuple[Any, ...]]] = []
    return OutputCollector(lambda s, v, a: seen.append((s, v, tuple(a))), print, print), seen


def test_storm_and_kstorm_forms_give_the_same_emits() -> None:
    t = Tuple(["a b"], Fields("sentence"), "spout", "default")
    u = Tuple(["c"], Fields("sentence"), "spout", "default")
    out, seen = _collector()
    out.emit(t, ["a"])                 # Storm: emit(anchor, values)
    out.emit([t, u], ["b"])            # Storm: emit(anchors, values)
    out.emit("words", ["c"])           # Storm: emit(streamId, values)
    out.emit("words", t, ["d"])        # Storm: emit(streamId, anchor, values)
    out.emit(["e"], t)                 # kstorm: emit(values, anchors)
    out.emit(["f"], anchors=[t], stream="words")
    out.emit(["g"])
    assert seen == [("default", ["a"], (t,)), ("default", ["b"], (t, u)),
                    ("words", ["c"], ()), ("words", ["d"], (t,)), ("default", ["e"], (t,)),
                    ("words", ["f"], (t,)), ("default", ["g"], ())]


@pytest.mark.parametrize("args", [(Tuple([1], Fields("n"), "s", "default"),),  # a tuple alone
                                  ("word",), (3, ["x"]), (["x"], ["y"]),
                                  ("words", ["x"], ["y"])])
def test_a_call_in_no_form_is_an_emit_error_showing_both(args: tuple[Any, ...]) -> None:
    out, seen = _collector()
    with pytest.raises(EmitError, match=r"emit\(anchor_or_anchors, values\).*kstorm's"):
        out.emit(*args)
    assert seen == []


def test_spout_storm_forms() -> None:
    seen: list[tuple[str, list[Any], Any]] = []
    out = SpoutOutputCollector(lambda s, v, m: seen.append((s, v, m)))
    out.emit(["a"], 1)
    out.emit("words", ["b"])
    out.emit("words", ["c"], 3)
    assert seen == [("default", ["a"], 1), ("words", ["b"], None), ("words", ["c"], 3)]
    with pytest.raises(EmitError, match="stream name needs the values"):
        out.emit("words")


class StormSplit(BaseRichBolt):
    """Storm's SplitSentence as Storm's document writes it."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any) -> None:
        for word in tuple_.get_string(0).split():
            self.collector.emit(tuple_, [word])
        self.collector.ack(tuple_)


class BasicStream(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare_stream("upper", Fields("word"))

    def execute(self, tuple_: Any, collector: Any) -> None:
        collector.emit("upper", [tuple_.get_string(0).upper()])  # Storm: emit(streamId, values)


class Broken(BaseRichBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any) -> None:
        self.collector.emit(tuple_.get_string(0))  # a string where the values list goes


def _topology(bolt: Any) -> Any:
    from kstorm.testing import ListSpout

    builder = TopologyBuilder()
    builder.set_spout("sentences", ListSpout([], Fields("sentence")))
    builder.set_bolt("split", bolt).shuffle_grouping("sentences")
    builder.set_bolt("upper", BasicStream()).shuffle_grouping("split")
    return builder.create_topology()


def test_storm_s_split_sentence_ported_as_written_emits_every_word() -> None:
    with TopologyTestDriver(_topology(StormSplit())) as driver:
        driver.pipe("sentences", [["the cow jumped"], ["over the moon"]])
        assert driver.output("split") == [["the"], ["cow"], ["jumped"], ["over"], ["the"],
                                          ["moon"]]
        assert driver.output("upper", stream="upper")[:2] == [["THE"], ["COW"]]
        assert driver.dead_letters == []


def test_an_emit_in_no_form_stops_the_topology_not_a_dead_letter_per_tuple() -> None:
    with TopologyTestDriver(_topology(Broken())) as driver:
        with pytest.raises(KstormError, match="matches neither emit form"):
            driver.pipe("sentences", [["a b"], ["c"]])
        assert driver.dead_letters == []


class Careful(BaseRichBolt):
    """Storm code that reports an error it handled: ``_collector.reportError(e)``."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))

    def execute(self, tuple_: Any) -> None:
        try:
            raise ConnectionError("database away")
        except ConnectionError as exc:
            self.collector.report_error(exc)
        self.collector.emit(tuple_, [tuple_.get_string(0)])
        self.collector.ack(tuple_)


def test_report_error_logs_and_leaves_the_tuple_to_the_bolt(caplog: Any) -> None:
    import logging

    from kstorm.testing import ListSpout

    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([], Fields("word")))
    builder.set_bolt("careful", Careful()).shuffle_grouping("words")
    with caplog.at_level(logging.ERROR, logger="kstorm.errors"), \
            TopologyTestDriver(builder.create_topology(), {}) as driver:
        driver.pipe("words", [["cat"]])
        assert driver.output("careful") == [["cat"]] and driver.dead_letters == []
    assert "ConnectionError: database away" in caplog.text
    SpoutOutputCollector(print).report_error(ValueError("spouts report too"))
    assert "ValueError: spouts report too" in caplog.text
