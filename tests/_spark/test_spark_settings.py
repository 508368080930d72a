"""Spark settings: what a checkpoint fixes, and kstorm keys against ``kstorm.spark.conf``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kstorm._spark.offset_log import checkpoint_sql_conf
from kstorm._spark.runner import check_checkpoint_conf
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError

PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def _planned(cp: Path, batch: int, conf: dict[str, str]) -> None:
    """Spark's offset log entry for ``batch``: a version, the metadata, one source line."""
    (cp / "offsets").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": conf}
    (cp / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{{\"batch\": 1}}")


def _settings(**conf: object) -> TopologyConfig:
    return TopologyConfig.from_conf(conf)


def test_the_latest_planned_batch_gives_the_checkpoint_settings(tmp_path):
    assert checkpoint_sql_conf(tmp_path / "none") == {}
    _planned(tmp_path, 0, {"spark.sql.shuffle.partitions": "2"})
    _planned(tmp_path, 1, {"spark.sql.shuffle.partitions": "3"})
    assert checkpoint_sql_conf(tmp_path) == {"spark.sql.shuffle.partitions": "3"}


def test_an_unreadable_log_gives_nothing(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\nnot json")
    assert checkpoint_sql_conf(tmp_path) == {}


def test_other_shuffle_partitions_than_the_checkpoint_ran_with_are_refused(tmp_path):
    _planned(tmp_path, 0, {"spark.sql.shuffle.partitions": "2"})
    with pytest.raises(ConfigError) as err:
        check_checkpoint_conf(tmp_path, _settings(**{"kstorm.shuffle.partitions": 4}))
    assert "kstorm.shuffle.partitions = '4'" in str(err.value)
    assert "spark.sql.shuffle.partitions = '2'" in str(err.value)
    assert "'2'" in err.value.hint


def test_the_same_or_no_choice_runs(tmp_path):
    _planned(tmp_path, 0, {"spark.sql.shuffle.partitions": "2", PROVIDER: "rocksdb"})
    check_checkpoint_conf(tmp_path, _settings(**{"kstorm.shuffle.partitions": 2}))
    check_checkpoint_conf(tmp_path, _settings())  # the default takes the checkpoint's
    check_checkpoint_conf(tmp_path, _settings(**{"kstorm.spark.conf": {PROVIDER: "rocksdb"}}))
    check_checkpoint_conf(tmp_path / "new", _settings(**{"kstorm.shuffle.partitions": 8}))


def test_a_spark_setting_the_checkpoint_keeps_is_refused_too(tmp_path):
    _planned(tmp_path, 0, {PROVIDER: "rocksdb"})
    with pytest.raises(ConfigError, match=f"kstorm.spark.conf {PROVIDER} = 'hdfs'"):
        check_checkpoint_conf(tmp_path, _settings(**{"kstorm.spark.conf": {PROVIDER: "hdfs"}}))
    # settings the checkpoint does not keep are not its concern
    check_checkpoint_conf(tmp_path, _settings(**{"kstorm.spark.conf": {"spark.ui.enabled": "x"}}))


@pytest.mark.parametrize(("key", "value", "spark_key", "theirs"), [
    ("kstorm.shuffle.partitions", 4, "spark.sql.shuffle.partitions", "8"),
    ("kstorm.spark.master", "local[2]", "spark.master", "spark://h:7077"),
])
def test_a_kstorm_key_and_the_spark_key_it_sets_may_not_disagree(key, value, spark_key, theirs):
    with pytest.raises(ConfigError, match=f"{key} = .*, but kstorm.spark.conf sets {spark_key}"):
        _settings(**{key: value, "kstorm.spark.conf": {spark_key: theirs}})
    _settings(**{key: value, "kstorm.spark.conf": {spark_key: str(value)}})  # agreeing: fine


def test_a_master_set_in_spark_conf_is_the_master_kstorm_plans_for():
    from kstorm._spark.spark_options import spark_options

    settings = _settings(**{"kstorm.spark.conf": {"spark.master": "spark://h:7077"}})
    assert settings.spark_master == "spark://h:7077"
    options = spark_options(settings)
    assert options["spark.master"] == "spark://h:7077"
    assert "spark.driver.host" not in options  # not pinned to 127.0.0.1 as a local master is


class _Conf:
    """A running session's ``spark.conf``: ``spark.sql.*`` modifiable, the rest fixed."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = str(value)

    def unset(self, key):
        self.values.pop(key, None)

    def isModifiable(self, key):  # noqa: N802 - pyspark's name
        return key.startswith("spark.sql.")


class _Session:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf(values)


RUNNING = {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "4",
           "spark.driver.extraJavaOptions": "-Dmine=1 -XX:SharedArchiveFile=/c.jsa"}


def test_a_running_session_takes_a_topologys_runtime_settings_until_its_query_started():
    from kstorm._spark.session import adopt_session_settings

    spark = _Session(RUNNING)
    restore = adopt_session_settings(spark, _settings(**{
        "kstorm.shuffle.partitions": 3, "kstorm.spark.master": "local[2]",
        "kstorm.spark.conf": {"spark.sql.session.timeZone": "UTC",
                              "spark.driver.extraJavaOptions": "-Dmine=1"}}))
    assert spark.conf.values["spark.sql.shuffle.partitions"] == "3"
    assert spark.conf.values["spark.sql.session.timeZone"] == "UTC"
    restore()
    assert spark.conf.values == RUNNING  # as it was, the unset key unset again


def test_a_setting_spark_fixed_at_start_that_differs_is_refused_and_nothing_stays_changed():
    from kstorm._spark.session import adopt_session_settings

    spark = _Session(RUNNING)
    with pytest.raises(ConfigError, match=r"kstorm.spark.conf spark.executor.memory = '2g', "
                                          r"but this process's SparkSession already runs with "
                                          r"spark.executor.memory = None"):
        adopt_session_settings(spark, _settings(**{
            "kstorm.shuffle.partitions": 3,
            "kstorm.spark.conf": {"spark.executor.memory": "2g"}}))
    assert spark.conf.values == RUNNING
    with pytest.raises(ConfigError, match="kstorm.spark.master = 'local.1.'"):
        adopt_session_settings(spark, _settings(**{"kstorm.spark.master": "local[1]"}))
    adopt_session_settings(spark, _settings())()  # nothing chosen: the session's, untouched
    assert spark.conf.values == RUNNING


def test_local_masters_of_the_same_threads_agree():
    import os

    from kstorm._spark.session import adopt_session_settings

    spark = _Session({**RUNNING, "spark.master": f"local[{os.cpu_count()}]"})
    adopt_session_settings(spark, _settings(**{"kstorm.spark.master": "local[*]"}))()
    with pytest.raises(ConfigError):
        adopt_session_settings(spark, _settings(**{"kstorm.spark.master": "local"}))
