"""Spark settings kstorm chooses for a session, and that the user's ``kstorm.spark.conf`` wins."""

from __future__ import annotations

from kstorm._spark.session import spark_options
from kstorm.config import TopologyConfig

RAW = "org.apache.hadoop.fs.local.RawLocalFs"
KEY = "spark.hadoop.fs.AbstractFileSystem.file.impl"


def test_local_checkpoints_are_written_without_crc_side_files() -> None:
    options = spark_options(TopologyConfig.from_conf({}))
    assert options[KEY] == RAW
    # Hadoop's FileSystem.getLocal must stay a (checksummed) LocalFileSystem
    assert "spark.hadoop.fs.file.impl" not in options


def test_the_users_spark_conf_wins_over_kstorms_choice() -> None:
    chosen = "org.apache.hadoop.fs.local.LocalFs"
    options = spark_options(TopologyConfig.from_conf({"kstorm.spark.conf": {KEY: chosen}}))
    assert options[KEY] == chosen


def test_no_planner_is_stopped_while_another_query_may_be_planning() -> None:
    """A query of the session before its first batch may be planning: nothing is touched."""
    from types import SimpleNamespace

    from kstorm._spark.session import LOOKUP_PLANNER, QUERY_PLANNERS, release_planners

    ours = SimpleNamespace(id="ours", lastProgress=None)
    planning = SimpleNamespace(id="other", lastProgress=None)
    spark = SimpleNamespace(streams=SimpleNamespace(active=[ours, planning]))  # no JVM here
    assert release_planners(spark, (LOOKUP_PLANNER, *QUERY_PLANNERS), ours) == []  # type: ignore[arg-type]
