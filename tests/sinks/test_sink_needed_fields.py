"""A sink's fields are checked against its inputs when the topology is built."""

from __future__ import annotations

import pytest

from kstorm import BaseSink, Fields, TopologyBuilder
from kstorm.errors import TopologyError
from kstorm.testing import ListSpout
from sinks.kafka import KafkaSink
from sinks.redis import RedisConfig, RedisSink

REDIS = RedisConfig.from_url("redis://127.0.0.1:6379/0")


def _wired(sink: BaseSink) -> None:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("a", 1)]], Fields("word", "n")))
    b.set_bolt("out", sink).shuffle_grouping("words")
    b.create_topology()


@pytest.mark.parametrize(("sink", "needed"), [
    (RedisSink(REDIS, key="c:{word}:{n}", value="n"), ("word", "n")),
    (RedisSink(REDIS, key="h", field="{word}", value={"a": "n", "b": "word"}), ("word", "n")),
    (RedisSink(REDIS, key="c:{word}", merge="count"), ("word",)),
    (RedisSink(REDIS, key=lambda row: "k", value=lambda row: 1), ()),
    (KafkaSink("out", key="word", fields=["word", "n"]), ("word", "n")),
    (KafkaSink("out"), ()),
])
def test_sinks_name_the_fields_they_read(sink: BaseSink, needed: tuple[str, ...]) -> None:
    assert sink.needed_fields() == needed
    _wired(sink)  # all declared by the spout


@pytest.mark.parametrize("sink", [RedisSink(REDIS, key="c:{wrd}", value="n"),
                                  RedisSink(REDIS, key="c:{word}", value="count"),
                                  KafkaSink("out", key="id")])
def test_a_field_no_input_declares_is_a_topology_error(sink: BaseSink) -> None:
    with pytest.raises(TopologyError, match=r"sink 'out' reads the fields \['\w+'\] .* but "
                                            r"stream 'default' of 'words' declares fields "
                                            r"\['word', 'n'\]"):
        _wired(sink)


def test_a_sink_of_your_own_checks_nothing_unless_it_says() -> None:
    class Quiet(BaseSink):
        def commit(self, batch):
            pass

    class Keyed(Quiet):
        def needed_fields(self):
            return ("user",)

    _wired(Quiet())
    with pytest.raises(TopologyError, match=r"reads the fields \['user'\]"):
        _wired(Keyed())
