"""``topology.workers``: Spark executors on a cluster; one process locally (LocalCluster)."""

from __future__ import annotations

import pytest

from kstorm import Config
from kstorm._spark.spark_options import spark_options
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError


def _options(conf: dict) -> dict[str, str]:
    return spark_options(TopologyConfig.from_conf(conf))


def test_workers_are_executors_on_a_standalone_cluster() -> None:
    options = _options({"kstorm.spark.master": "spark://127.0.0.1:7077", "topology.workers": 3})
    assert options["spark.executor.instances"] == "3"
    assert options["spark.executor.cores"] == "1"
    assert options["spark.cores.max"] == "3"  # standalone allocates by cores


def test_executor_cores_of_the_user_multiply_on_standalone_only() -> None:
    conf = {"topology.workers": 2, "kstorm.spark.conf": {"spark.executor.cores": "2"}}
    standalone = _options({**conf, "kstorm.spark.master": "spark://h:7077"})
    assert (standalone["spark.executor.instances"], standalone["spark.cores.max"]) == ("2", "4")
    yarn = _options({**conf, "kstorm.spark.master": "yarn"})
    assert yarn["spark.executor.instances"] == "2" and "spark.cores.max" not in yarn


def test_the_config_helper_sets_the_key() -> None:
    conf = Config()
    conf.set_num_workers(2)
    assert conf["topology.workers"] == 2


@pytest.mark.parametrize("master", ["local[*]", "local[2]"])
def test_more_than_one_worker_in_one_process_runs_as_storm_s_local_cluster(master: str) -> None:
    settings = TopologyConfig.from_conf({"kstorm.spark.master": master, "topology.workers": 2})
    assert settings.workers == 2  # accepted, as Storm's LocalCluster accepts it
    note = settings.workers_note()
    assert note is not None and "runs every task of the topology in this one process" in note
    assert "LocalCluster" in note and "spark.executor.instances" in note
    options = _options({"kstorm.spark.master": master, "topology.workers": 2})
    assert "spark.executor.instances" not in options  # one process: nothing to set
    assert TopologyConfig.from_conf({"topology.workers": 2}).workers_note() is not None
    assert TopologyConfig.from_conf({"kstorm.spark.master": master,
                                     "topology.workers": 1}).workers_note() is None
    assert TopologyConfig.from_conf({"kstorm.spark.master": "spark://h:7077",
                                     "topology.workers": 2}).workers_note() is None


def test_spark_keys_that_contradict_the_workers_are_refused() -> None:
    with pytest.raises(ConfigError, match="spark.executor.instances"):
        _options({"kstorm.spark.master": "spark://h:7077", "topology.workers": 2,
                  "kstorm.spark.conf": {"spark.executor.instances": "5"}})
    with pytest.raises(ConfigError, match="dynamicAllocation"):
        _options({"kstorm.spark.master": "yarn", "topology.workers": 2,
                  "kstorm.spark.conf": {"spark.dynamicAllocation.enabled": "true"}})
    with pytest.raises(ConfigError):
        TopologyConfig.from_conf({"topology.workers": 0})
    with pytest.raises(ConfigError, match="spark.executor.cores = 'two'"):
        _options({"kstorm.spark.master": "spark://h:7077", "topology.workers": 2,
                  "kstorm.spark.conf": {"spark.executor.cores": "two"}})
