"""Errors a person can act on, raised before Spark starts: they name the key or the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstorm import Fields, TopologyBuilder, submit_topology
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError
from kstorm.testing import CaptureSink, ListSpout


def _topology() -> object:
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([[["a"]]], Fields("word")))
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("words")
    return builder.create_topology()


def test_an_unwritable_checkpoint_names_the_key_and_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"a-file' is not a directory") as info:
        submit_topology("t", {"kstorm.checkpoint.dir": str(blocker / "ck")}, _topology())
    assert "kstorm.checkpoint.dir" in info.value.hint
    with pytest.raises(ConfigError) as info:
        submit_topology("t", {"kstorm.checkpoint.root": str(blocker)}, _topology())
    assert "kstorm.checkpoint.root" in info.value.hint


@pytest.mark.parametrize("uri", ["s3a://bucket/ck", "hdfs://nn:8020/ck", "gs://b/ck"])
def test_a_remote_checkpoint_uri_is_refused_not_mapped_to_a_local_folder(uri: str) -> None:
    with pytest.raises(ConfigError, match=r"kstorm.checkpoint.dir: .*checkpoints are not "
                                          r"supported"):
        TopologyConfig.from_conf({"kstorm.checkpoint.dir": uri})


@pytest.mark.parametrize(("given", "path"), [("file:///data/ck", "/data/ck"),
                                             ("file:/data/ck", "/data/ck"),
                                             ("relative/ck", "relative/ck")])
def test_file_uris_and_paths_are_local_paths(given: str, path: str) -> None:
    assert str(TopologyConfig.from_conf({"kstorm.checkpoint.dir": given}).checkpoint_dir) \
        == path


def test_an_unreachable_redis_is_named_at_submit(tmp_path: Path) -> None:
    import time

    from kstorm.embedded import free_port
    from kstorm.errors import SinkError
    from sinks.redis import RedisConfig, RedisSink

    url = f"redis://127.0.0.1:{free_port()}/0"
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([[["a"]]], Fields("word")))
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(url), key="k:{word}",
                                        value="word")).shuffle_grouping("words")
    started = time.monotonic()
    with pytest.raises(SinkError, match=rf"RedisSink\({url}.*Connection refused"):
        submit_topology("t", {"kstorm.checkpoint.dir": str(tmp_path / "ck")},
                        builder.create_topology())
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(("conf", "match"), [
    ({"topology.guarantee": "at-most-once", "topology.max.spout.pending": 10},
     "no effect at most once"),
    ({"topology.guarantee": "at-least-once", "topology.acker.executors": 0,
      "topology.max.spout.pending": 10}, "no effect at most once"),
    ({"topology.max.spout.pending": 10}, "one micro-batch at a time"),
])
def test_max_spout_pending_is_refused_where_it_bounds_nothing(conf: dict, match: str) -> None:
    from kstorm.config import TopologyConfig

    with pytest.raises(ConfigError, match=match):
        TopologyConfig.from_conf(conf)
    TopologyConfig.from_conf({**conf, "topology.guarantee": "at-least-once",
                              "topology.acker.executors": 1})  # where it does bound: fine
