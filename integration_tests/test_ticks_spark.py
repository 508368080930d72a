"""Tick tuples on a real Spark session, a real broker and real Redis.

storm-starter's rolling counts: two bolts (in memory, and in a ``KeyValueState``) count
words and emit them on each 1 s tick; every tick reaches every task, also in batches
without input, and the counts the sinks add up equal the words produced.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
import tick_topology

from kstorm import submit_topology
from kstorm._kafka.client import create_topic

pytestmark = pytest.mark.integration


def _stored(client: redis.Redis, pattern: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for key in client.scan_iter(pattern):
        out[key.decode().rsplit(":", 1)[1]] = int(client.get(key))
    return out


def test_rolling_counts_on_ticks_add_up_to_every_word_and_every_task_ticks(
        spark: Any, kafka: Any, redis_server: Any, topic_name: str, checkpoint_dir: Path,
        produce: Any) -> None:
    create_topic(kafka.bootstrap_servers, topic_name, partitions=2)
    words = [f"w{(i * 7) % 13}" for i in range(400)]
    for partition in range(2):
        produce(kafka.bootstrap_servers, topic_name, words[partition::2], partition=partition)
    prefix = f"tk-{uuid.uuid4().hex[:6]}"
    started = time.time()
    handle = submit_topology(prefix, {
        "kafka.bootstrap.servers": kafka.bootstrap_servers, "kstorm.trigger": "continuous",
        "kstorm.trigger.interval.ms": 200, "kstorm.checkpoint.dir": str(checkpoint_dir)},
        tick_topology.topology(topic_name, redis_server.url, prefix))
    client = redis.Redis.from_url(redis_server.url)
    expected = Counter(words)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            done = [_stored(client, f"{prefix}:{bolt}:*") == expected
                    for bolt in ("plain", "state")]
            ticks = _stored(client, f"{prefix}:ticks:*")
            if all(done) and len(ticks) == 2:
                break
            assert handle.is_active, "the topology stopped"
            time.sleep(0.5)
        before = {bolt: _stored(client, f"{prefix}:ticks:{bolt}:*") for bolt in ("plain", "state")}
        time.sleep(3.5)  # no input now: the ticks go on, about one a second
        after = {bolt: _stored(client, f"{prefix}:ticks:{bolt}:*") for bolt in ("plain", "state")}
    finally:
        handle.stop()
    boundaries = int(time.time()) - int(started)  # whole seconds begun since the start
    for bolt in ("plain", "state"):
        assert _stored(client, f"{prefix}:{bolt}:*") == expected, bolt
        assert sorted(after[bolt]) == ["0", "1"], after  # every task ticked
        for task in ("0", "1"):
            # ticks go on without input (3.5 s: at least 2), and come at most once a
            # period: never more than the 1 s boundaries since the start (a batch that
            # runs long folds the boundaries it spans into one tick)
            assert after[bolt][task] - before[bolt].get(task, 0) >= 2, (before, after)
            assert after[bolt][task] <= boundaries, (boundaries, after)


def _listed(ticks: bool) -> Any:
    from kstorm import Config, Fields, TopologyBuilder
    from kstorm.testing import CaptureSink, ListSpout

    b = TopologyBuilder()
    b.set_spout("words", ListSpout([[("a",), ("b",)]], Fields("word")))
    count = b.set_bolt("count", tick_topology.RollingCount(), 2).fields_grouping(
        "words", Fields("word"))
    if ticks:
        count.add_configuration(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 1)
    b.set_bolt("out", CaptureSink()).shuffle_grouping("count")
    b.set_bolt("ticks", CaptureSink()).shuffle_grouping("count", "ticks")
    return b.create_topology()


def test_turning_ticks_on_over_a_checkpoint_is_refused_with_what_to_do(
        spark: Any, checkpoint_dir: Path, tmp_path: Path) -> None:
    from kstorm.errors import TopologyError

    conf = {"kstorm.checkpoint.dir": str(checkpoint_dir), "kstorm.trigger": "available-now"}
    handle = submit_topology("tk-off", conf, _listed(ticks=False))
    assert handle.await_termination(180)
    with pytest.raises(TopologyError, match=r"started without tick tuples, and now bolts "
                       r"\['count'\] tick") as refused:
        submit_topology("tk-off", conf, _listed(ticks=True))
    assert "new kstorm.checkpoint.dir" in str(refused.value.hint)
    # a checkpoint started with ticks goes on with them
    fresh = {**conf, "kstorm.checkpoint.dir": str(tmp_path / "ticking")}
    for _ in range(2):
        handle = submit_topology("tk-on", fresh, _listed(ticks=True))
        assert handle.await_termination(180)
