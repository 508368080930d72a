"""``kstorm submit`` ships a project to spark-submit, which runs it with its own master.

The project (a module defining a bolt and the topology, in a directory of its own) is zipped
as --py-files; its bolt runs in Spark's Python workers, which import it from that archive.
``--master local[2]`` stands in for a cluster's master here; kstorm sets none itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from kstorm._kafka.client import create_topic

pytestmark = pytest.mark.integration

PROJECT = '''
from kstorm import BaseBasicBolt, Fields, KafkaSpout, TopologyBuilder
from serdes import StringSerde
from sinks.redis import RedisConfig, RedisSink
import os


class Shout(BaseBasicBolt):
    def execute(self, tuple_, collector):
        collector.emit([tuple_.get_string_by_field("value").upper(), 1])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "n"))


def topology():
    builder = TopologyBuilder()
    builder.set_spout("words", KafkaSpout(os.environ["WORDS_TOPIC"], value_serde=StringSerde()))
    builder.set_bolt("shout", Shout(), 2).shuffle_grouping("words")
    builder.set_bolt("store", RedisSink(RedisConfig.from_url(os.environ["REDIS_URL"]),
                                        key=os.environ["WORDS_TOPIC"] + ":{word}", value="n",
                                        merge="add")).fields_grouping("shout", Fields("word"))
    return builder
'''


def test_submit_ships_the_project_and_runs_it_under_spark_submit(
        kafka: Any, redis_server: Any, topic_name: str, tmp_path: Path, produce: Any) -> None:
    project = tmp_path / "project"
    (project / "shop").mkdir(parents=True)
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "topo.py").write_text(PROJECT)
    (project / "tests").mkdir()
    (project / "tests" / "__init__.py").write_text("")
    create_topic(kafka.bootstrap_servers, topic_name, 2)
    produce(kafka.bootstrap_servers, topic_name, ["a", "b", "a"] * 10)
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "REDIS_URL": redis_server.url,
           "WORDS_TOPIC": topic_name, "PYTHONPATH": str(repo),
           "KSTORM_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
           "KSTORM_CHECKPOINT_DIR": str(tmp_path / "ck")}
    done = subprocess.run(
        [sys.executable, "-m", "kstorm.cli", "submit", "shop.topo:topology", "--master",
         "local[2]", "-c", "kstorm.trigger=available-now", "--name", topic_name],
        cwd=project, env=env, capture_output=True, text=True, timeout=400,
        stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    assert "kstorm: shipping shop" in done.stderr and "tests" not in done.stderr.split(
        "shipping", 1)[1].splitlines()[0]
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert {k: json.loads(client.get(k)) for k in client.keys(f"{topic_name}:*")} == {
        f"{topic_name}:A": 20, f"{topic_name}:B": 10}
