"""``kstorm run``'s inputs: the topology from pkg.module:attr, config from file, env and -c."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kstorm import StormTopology
from kstorm.cli import main
from kstorm.cli.project import env_name, load_conf, load_topology
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    toml = tmp_path / "conf.toml"
    toml.write_text('[kafka]\nbootstrap.servers = "file:9092"\n'
                    '[topology]\nmax.spout.pending = 10\nguarantee = "at-least-once"\n'
                    '[kstorm.spark]\nconf = { "spark.executor.memory" = "1g" }\n')
    conf = load_conf(toml, {"KSTORM_KAFKA_BOOTSTRAP_SERVERS": "env:9092",
                            "KSTORM_TOPOLOGY_MAX_SPOUT_PENDING": "20",
                            "KSTORM_UNRELATED": "x", "HOME": "/root"},
                     ["topology.max.spout.pending=30"])
    assert conf == {"kafka.bootstrap.servers": "env:9092", "topology.max.spout.pending": 30,
                    "topology.guarantee": "at-least-once",
                    "kstorm.spark.conf": {"spark.executor.memory": "1g"}}
    assert TopologyConfig.from_conf(conf).max_spout_pending == 30


@pytest.mark.parametrize(("name", "text"), [
    ("c.yaml", "kstorm:\n  trigger: available-now\ntopology.debug: true\n"),
    ("c.json", json.dumps({"kstorm.trigger": "available-now", "topology.debug": True})),
])
def test_yaml_and_json_files(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_conf(path, {}, []) == {"kstorm.trigger": "available-now", "topology.debug": True}


def test_storm_aliases_have_environment_names_too() -> None:
    assert env_name("topology.state.checkpoint.interval.ms") == \
        "KSTORM_TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS"
    conf = load_conf(None, {"KSTORM_TOPOLOGY_STATE_CHECKPOINT_INTERVAL_MS": "500"}, [])
    assert TopologyConfig.from_conf(conf).trigger_interval_ms == 500


@pytest.mark.parametrize(("setup", "match"), [
    (("bad.txt", "x"), "expected .toml"),
    (("bad.toml", "= nope"), "not valid TOML"),
    (("list.yaml", "- a\n- b\n"), "expected a table of keys"),
])
def test_bad_files_are_named(tmp_path: Path, setup: tuple[str, str], match: str) -> None:
    path = tmp_path / setup[0]
    path.write_text(setup[1])
    with pytest.raises(ConfigError, match=match):
        load_conf(path, {}, [])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_conf(None, {}, ["novalue"])


def test_an_unknown_key_from_any_source_fails_validation_naming_it() -> None:
    conf = load_conf(None, {}, ["topology.no.such.key=1"])
    with pytest.raises(ConfigError, match="topology.no.such.key"):
        TopologyConfig.from_conf(conf)


def _write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_topo.py").write_text(
        "from kstorm import Fields, TopologyBuilder\n"
        "from kstorm.testing import CaptureSink, ListSpout\n"
        "def build():\n"
        "    b = TopologyBuilder()\n"
        "    b.set_spout('w', ListSpout([[['a']]], Fields('word')))\n"
        "    b.set_bolt('out', CaptureSink()).shuffle_grouping('w')\n"
        "    return b\n"
        "builder = build()\n"
        "topology = builder.create_topology()\n"
        "not_a_topology = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_topo", None)
    return "my_topo"


def test_targets_a_topology_a_builder_or_a_function(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    module = _write_module(tmp_path, monkeypatch)
    for attr, name in (("topology", "my_topo"), ("builder", "builder"), ("build", "my_topo")):
        got_name, topology = load_topology(f"{module}:{attr}")
        assert isinstance(topology, StormTopology) and got_name == name
    with pytest.raises(ConfigError, match="expected a topology"):
        load_topology(f"{module}:not_a_topology")
    with pytest.raises(ConfigError, match="has no attribute 'nope'"):
        load_topology(f"{module}:nope")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_x'"):
        load_topology("no_such_module_x:topology")
    with pytest.raises(ConfigError, match="expected pkg.module:attribute"):
        load_topology("my_topo")


def test_run_reports_a_bad_target_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "no_such_module_x:topology"]) == 1
    err = capsys.readouterr().err
    assert "kstorm: error: cannot import 'no_such_module_x'" in err and "hint:" in err

