"""``topology.acker.executors`` (seed 003): 0 is Storm's at-most-once; a count of ackers is
accepted only where ackers run (at least once), never accepted and ignored."""

from __future__ import annotations

import pytest

from kstorm import Config
from kstorm.config import Guarantee, TopologyConfig
from kstorm.errors import ConfigError


def test_no_ackers_without_a_guarantee_is_at_most_once_as_in_storm() -> None:
    conf = Config()
    conf.set_num_ackers(0)
    settings = TopologyConfig.from_conf(dict(conf))
    assert settings.guarantee is Guarantee.AT_MOST_ONCE
    assert settings.acks_on_emit and not settings.ackers_enabled


def test_no_ackers_at_least_once_is_at_most_once_too() -> None:
    settings = TopologyConfig.from_conf({"topology.guarantee": "at-least-once",
                                         "topology.acker.executors": 0})
    assert settings.acks_on_emit and not settings.ackers_enabled


def test_ackers_count_at_least_once() -> None:
    settings = TopologyConfig.from_conf({"topology.guarantee": "at-least-once",
                                         "topology.acker.executors": 3})
    assert settings.acker_executors == 3 and settings.ackers_enabled


@pytest.mark.parametrize(("conf", "match"), [
    ({"topology.acker.executors": 2}, r"no effect .*exactly-once \(the default\)"),
    ({"topology.acker.executors": 2, "topology.guarantee": "exactly-once"},
     "no effect with topology.guarantee = exactly-once:"),
    ({"topology.acker.executors": 0, "topology.guarantee": "exactly-once"},
     "asks for Storm's at-most-once"),
    ({"topology.acker.executors": 1, "topology.guarantee": "at-most-once"}, "tracks nothing"),
])
def test_ackers_where_none_run_are_refused(conf: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        TopologyConfig.from_conf(conf)
    assert caught.value.hint
