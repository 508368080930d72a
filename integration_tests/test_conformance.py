"""The same topologies on Spark and on ``TopologyTestDriver``: the same outputs (#15 item 6).

Each topology of ``conformance.py`` runs to completion on a real Spark session and on the
Spark-free test driver; every capture sink must receive the same tuples (task placement
included, where bolts emit their ``task_index``) and the dead letters must say the same.
The Python ``xxhash64`` the driver places raw rows with is checked against Spark's own.
"""

from __future__ import annotations

import time
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
