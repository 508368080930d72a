"""The commit phase's way to a batch's rows (kstorm/_spark/batch_rows.py) on a real SparkSession.

``foreach_batch`` and ``ArrowRows`` on their private route (a speed-up: ``speedups.py``)
stand for pyspark's ``foreachBatch`` and ``DataFrame.toArrow``, their public route: each
batch must arrive as the same Arrow table on both routes and as ``toArrow`` gives it
(types, nulls, order, an empty batch with its schema), and a failing batch must fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kstorm._spark.batch_rows import ArrowRows, foreach_batch

pytestmark = pytest.mark.integration

SCHEMA = ("name STRING, n BIGINT, x DOUBLE, at TIMESTAMP, raw BINARY, "
          "tags ARRAY<STRING>, ok BOOLEAN")


def _write(folder: Path, index: int, rows: list[dict[str, Any]]) -> None:
    (folder / f"part-{index:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _stream(spark: Any, folder: Path) -> Any:
    from pyspark.sql import functions as F

    frame = (spark.readStream.schema(SCHEMA.replace("BINARY", "STRING"))
             .option("maxFilesPerTrigger", 1).json(str(folder)))
    return frame.withColumn("raw", F.col("raw").cast("binary"))


class Compare:
    """Each batch's rows by ArrowRows's private route and by toArrow, side by side (and
    by ArrowRows's public route, which must be toArrow's)."""

    def __init__(self) -> None:
        self.rows = ArrowRows(fast=True)
        self.public = ArrowRows(fast=False)
        self.batches: list[tuple[int, pa.Table, pa.Table]] = []

    def __call__(self, frame: Any, batch_id: int) -> None:
        theirs = frame.toArrow()
        assert self.public(frame).equals(theirs)
        self.batches.append((batch_id, self.rows(frame), theirs))
        assert self.rows.fast  # the private route stayed on: it was compared


def _run(spark: Any, frame: Any, func: Any, checkpoint: Path, fast: bool = True) -> Any:
    writer = frame.writeStream.option("checkpointLocation", str(checkpoint))
    query = foreach_batch(writer, spark, func, fast=fast).trigger(availableNow=True).start()
    query.awaitTermination(120)
    return query


@pytest.mark.parametrize("fast", [True, False], ids=["private-foreach", "public-foreach"])
def test_each_batch_arrives_as_to_arrow_gives_it(spark: Any, tmp_path: Path, fast: bool
                                                 ) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder, 0, [
        {"name": "a", "n": 1, "x": 0.5, "at": "2026-11-28T07:00:00Z", "raw": "r1",
         "tags": ["p", "q"], "ok": True},
        {"name": None, "n": None, "x": None, "at": None, "raw": None, "tags": None,
         "ok": None},
        {"name": "ü", "n": -(2 ** 62), "x": -1e300, "at": "1970-01-01T00:00:00Z",
         "raw": "", "tags": [], "ok": False},
    ])
    _write(folder, 1, [{"name": f"k{i}", "n": i} for i in range(5000)])
    _write(folder, 2, [{"name": "dropped", "n": -1}])  # a batch with no rows left
    compare = Compare()
    frame = _stream(spark, folder)
    query = _run(spark, frame.where("n IS NULL OR n != -1"), compare, tmp_path / "cp", fast)
    assert query.exception() is None
    assert [b for b, _, _ in compare.batches] == [0, 1, 2]
    for _, ours, theirs in compare.batches:
        assert ours.schema.equals(theirs.schema)
        assert ours.equals(theirs)
    by_size = {ours.num_rows: ours for _, ours, _ in compare.batches}  # files: any order
    assert sorted(by_size) == [0, 3, 5000]
    assert [r["name"] for r in by_size[3].to_pylist()] == ["a", None, "ü"]
    assert by_size[5000].column("n").to_pylist() == list(range(5000))
    assert by_size[0].schema.equals(by_size[3].schema)  # an empty batch keeps its schema

def test_large_variable_width_types_as_the_session_sets_them(spark: Any, tmp_path: Path
                                                               ) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder, 0, [{"name": "a", "n": 1, "raw": "r"}])
    compare = Compare()
    spark.conf.set("spark.sql.execution.arrow.useLargeVarTypes", "true")
    try:
        _run(spark, _stream(spark, folder), compare, tmp_path / "cp")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.useLargeVarTypes")
    (_, ours, theirs), = compare.batches
    assert ours.schema.field("name").type == pa.large_string()
    assert ours.equals(theirs)


def _fail(value: Any) -> Any:
    raise ValueError(f"bad value {value}")


def test_a_failing_batch_fails_the_query_with_the_cause(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder, 0, [{"name": "x", "n": 7}])
    failing = F.udf(lambda value: _fail(value), "string")  # (no type hints to infer from)
    seen: list[BaseException] = []
    rows = ArrowRows()

    def collect(frame: Any, batch_id: int) -> None:
        try:
            rows(frame)
        except Exception as exc:
            seen.append(exc)
            raise

    frame = _stream(spark, folder).withColumn("name", failing("n"))
    with pytest.raises(Exception, match="bad value 7"):
        _run(spark, frame, collect, tmp_path / "cp")
    assert len(seen) == 1 and "bad value 7" in str(seen[0])
