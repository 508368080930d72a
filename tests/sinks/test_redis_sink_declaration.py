"""RedisSink as a declaration: validation, binding, pickling (no Redis)."""

from __future__ import annotations

import pickle

import pytest

from kstorm.errors import ConfigError, SinkError
from sinks.redis import LuaMerge, RedisConfig, RedisSink
from sinks.redis._lua import commit_script

CONFIG = RedisConfig(port=1)  # nothing listens there: these tests must not connect


def test_defaults_are_opaque_set_json() -> None:
    sink = RedisSink(CONFIG, key="last:{user}", value="page")
    assert (sink.mode, sink.merge.name, sink.value_codec, sink.topology) == (
        "opaque", "set", "json", None)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"key": "c:{w}", "value": "n", "mode": "exactly"}, "mode"),
    ({"key": "c:{w}", "value": "n", "merge": "median"}, "merge"),
    ({"key": "c:{w}", "value": "n", "merge": 42}, "merge"),
    ({"key": "c:{w}"}, "value"),
    ({"key": "c:{w}", "value": "n", "merge": "count"}, "value"),
    ({"key": "c:{w}", "value": "n", "merge": "add", "value_codec": "string"}, "value_codec"),
    ({"key": "c:{w}", "value": "n", "value_codec": "xml"}, "value_codec"),
    ({"key": "c:{w}", "value": "n", "topology": "word count"}, "topology"),
    ({"key": "c:{w}", "value": "n", "sink_id": ""}, "sink_id"),
    ({"key": "c:{w}", "value": "n", "max_entries_per_call": 0}, "max_entries_per_call"),
    ({"key": "c:{", "value": "n"}, "template"),
    ({"key": 5, "value": "n"}, "key"),
    ({"key": "c:{w}", "value": 5}, "value"),
])
def test_bad_declarations_are_config_errors(kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        RedisSink(CONFIG, **kwargs)


def test_config_must_be_a_redis_config() -> None:
    with pytest.raises(ConfigError, match="RedisConfig"):
        RedisSink({"host": "localhost"}, key="k", value="v")  # type: ignore[arg-type]


def test_lua_merge_validation() -> None:
    with pytest.raises(ConfigError, match="name"):
        LuaMerge("no spaces", "return new")
    with pytest.raises(ConfigError, match="return"):
        LuaMerge("noop", "new")


def test_bind_sets_the_topology_on_a_copy() -> None:
    sink = RedisSink(CONFIG, key="c:{w}", value="n", merge="add")
    bound = sink.bind("wordcount", "counts")
    assert (bound.topology, bound.sink_id) == ("wordcount", "counts")
    assert bound.namespace.record == "kstorm:wordcount:counts:offsets"
    assert sink.topology is None
    with pytest.raises(ConfigError, match="topology is not set"):
        sink.commit_batch(1, [], {})


def test_pickling_drops_the_client_and_keeps_the_declaration() -> None:
    sink = RedisSink(CONFIG, key="c:{w}", field="{day}", value="n", merge="max",
                     mode="transactional").bind("wc")
    sink._client = object()  # stands for a live connection
    copy = pickle.loads(pickle.dumps(sink))
    assert copy._client is None
    assert (copy.key, copy.field, copy.merge.name, copy.mode, copy.topology) == (
        "c:{w}", "{day}", "max", "transactional", "wc")
    assert copy._key_of({"w": "a"}) == "c:a"


def test_bad_txid_or_offsets_fail_before_any_connection() -> None:
    sink = RedisSink(CONFIG, key="c:{w}", value="n", merge="add").bind("wc")
    for txid in (-1, 1.5, True, 2**53):
        with pytest.raises(SinkError, match="txid"):
            sink.commit_batch(txid, [{"w": "a", "n": 1}], {})  # type: ignore[arg-type]
    with pytest.raises(SinkError, match="offsets"):
        sink.commit_batch(1, [{"w": "a", "n": 1}], {"t": {0: -1}})
    assert sink._client is None


def test_commit_script_inlines_the_merge_body() -> None:
    script = commit_script(LuaMerge("longest", "if #new > #old then return new end return old",
                                    numeric=False))
    assert "if #new > #old then return new end return old" in script
    assert "local NUMERIC, SLICE = false" in script


def test_repr_names_server_key_and_mode_but_no_password() -> None:
    sink = RedisSink(RedisConfig(password="hunter2"), key="c:{w}", value="n").bind("wc")
    text = repr(sink)
    assert "redis://localhost:6379/0" in text and "c:{w}" in text and "opaque" in text
    assert "hunter2" not in text
