"""The same topologies on Spark and on ``TopologyTestDriver``: the same outputs (#15 item 6).

Each topology of ``conformance.py`` runs to completion on a real Spark session and on the
Spark-free test driver; every capture sink must receive the same tuples (task placement
included, where bolts emit their ``task_index``) and the dead letters must say the same.
The Python ``xxhash64`` the driver places raw rows with is checked against Spark's own.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conformance import TOPOLOGIES, dead_letter_view, normalized, sinks_of

from kstorm._runtime.sparkhash import spark_xxhash64
from kstorm.testdriver import TopologyTestDriver
from kstorm.testing import run_to_completion


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_the_driver_and_spark_give_the_same_outputs(spark: Any, tmp_path: Path,
                                                    name: str) -> None:
    (tmp_path / "spark").mkdir()
    (tmp_path / "driver").mkdir()
    topology, conf = TOPOLOGIES[name](str(tmp_path / "spark"))
    result = run_to_completion(topology, {**conf, "kstorm.checkpoint.dir":
                                          str(tmp_path / "checkpoint")}, name=name)
    on_spark = {s: normalized([t.values for t in result.sinks[s].tuples])
                for s in sinks_of(topology)}

    topology, conf = TOPOLOGIES[name](str(tmp_path / "driver"))
    started = time.perf_counter()
    with TopologyTestDriver(topology, conf, name=name) as driver:
        driver.run()
        on_driver = {s: normalized(driver.output(s)) for s in sinks_of(topology)}
        letters = driver.dead_letters
    took_ms = 1000 * (time.perf_counter() - started)

    assert on_driver == on_spark
    assert dead_letter_view(letters) == dead_letter_view(result.dead_letters)
    assert any(on_spark.values()), "the topology produced nothing to compare"
    assert took_ms < 5_000  # milliseconds per topology in practice (the closing note)
    if name == "free_form_failures":  # the spout's fail ran for the same ids on both
        from spouts import failed

        assert sorted(failed(tmp_path / "driver")) == sorted(failed(tmp_path / "spark"))
        assert failed(tmp_path / "driver")


def test_at_least_once_over_kafka_the_driver_replays_as_spark_does(
        spark: Any, kafka: Any, produce: Any, tmp_path: Path) -> None:
    from conformance import kafka_acking

    from kstorm import KafkaSpout
    from kstorm._kafka.client import create_topic
    from serdes import StringSerde

    topic = f"conf-{uuid.uuid4().hex[:8]}"
    create_topic(kafka.bootstrap_servers, topic, 2)
    words = [f"{'x' if i % 4 == 1 else 'w'}{i % 6}" for i in range(24)]
    rows = []
    for p in (0, 1):
        part = words[p::2]
        for word, (partition, offset) in zip(part, produce(kafka.bootstrap_servers, topic,
                                                           part, partition=p), strict=True):
            rows.append({"word": word, "topic": topic, "partition": partition,
                         "offset": offset})
    spout = KafkaSpout(topic, value_serde=StringSerde(field="word"))
    (tmp_path / "spark").mkdir()
    (tmp_path / "driver").mkdir()
    topology, conf = kafka_acking(spout, str(tmp_path / "spark"))
    result = run_to_completion(topology, {**conf, "kafka.bootstrap.servers":
                                          kafka.bootstrap_servers, "kstorm.checkpoint.dir":
                                          str(tmp_path / "checkpoint")}, name="kafka-acking")
    topology, conf = kafka_acking(spout, str(tmp_path / "driver"))
    with TopologyTestDriver(topology, conf) as driver:
        driver.pipe("words", sorted(rows, key=lambda r: (r["partition"], r["offset"])))
        driver.drain()
        on_driver = normalized([[w, n] for _, w, n in driver.output("out")])
        counters = {k: driver.counters[f"words.{k}"] for k in ("acked", "failed", "replayed")}
    # task placement differs here (the spout's Spark partitions are the broker's), so
    # compare what was counted, not where
    on_spark = normalized([[w, n] for _, w, n in (t.values for t in result.sinks["out"].tuples)])
    assert on_driver == on_spark
    spark_counters = result.progress["components"]["words"]
    assert counters == {k: spark_counters.get(k, 0) for k in counters}
    assert counters["failed"] == len({w for w in words if w.startswith("x")})


def test_the_drivers_xxhash64_is_sparks(spark: Any) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    rows = [("", 0, 0, 0.0, True, b""), ("word", 7, -3, 2.5, False, b"\x00\x01"),
            ("a longer string of more than thirty-two bytes", 2**40, 2**31 - 1, -0.0,
             True, bytes(range(40))), ("üñí", -(2**62), -7, 1e300, None, None)]
    schema = "s string, l long, i int, d double, b boolean, bin binary"
    frame = spark.createDataFrame(rows, schema)
    columns = ["s", "l", "i", "d", "b", "bin"]
    kinds = [pa.string(), pa.int64(), pa.int32(), pa.float64(), pa.bool_(), pa.binary()]
    got = frame.select(*[F.xxhash64(c).alias(c) for c in columns],
                       F.xxhash64(*columns).alias("all")).collect()
    for row, values in zip(got, rows, strict=True):
        for i, column in enumerate(columns):
            assert row[column] == spark_xxhash64([values[i]], [kinds[i]]), (column, values[i])
        assert row["all"] == spark_xxhash64(list(values), kinds)
