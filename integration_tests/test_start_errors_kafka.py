"""A misspelled topic or a wrong broker address is an error at submit, naming what is wrong.

It used to be a topology idling forever on a missing topic, and a failure after ~19 s that
named no address for a wrong ``kafka.bootstrap.servers``. A missing topic is an error with
``kstorm.topics.must.exist``; by default a warning naming it at start and every minute.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from kstorm import KafkaSpout, TopologyBuilder, submit_topology
from kstorm._kafka.client import create_topic
from kstorm.embedded import free_port
from kstorm.errors import SourceError
from kstorm.testing import CaptureSink

pytestmark = pytest.mark.integration


def _topology(topic: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("events", KafkaSpout(topic))
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("events")
    return builder.create_topology()


def test_a_misspelled_topic_is_an_error_naming_it_and_similar_ones(
        kafka: Any, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafka.bootstrap_servers, f"{topic_name}-clicks", 1)
    with pytest.raises(SourceError, match=rf"topic\(s\) \['{topic_name}-click'\] do not "
                                          rf"exist at {kafka.bootstrap_servers}.*similar: "
                                          rf"\['{topic_name}-clicks'\]") as info:
        submit_topology("typo", {"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                 "kstorm.checkpoint.dir": str(tmp_path / "ck"),
                                 "kstorm.topics.must.exist": True},
                        _topology(f"{topic_name}-click"))
    assert "create the topic" in info.value.hint


def test_by_default_a_missing_topic_is_named_at_start_and_every_minute(
        spark: Any, kafka: Any, topic_name: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from kstorm._spark import runner

    monkeypatch.setattr(runner, "MISSING_TOPIC_WARNING_S", 1.0)  # a minute, shortened
    caplog.set_level(logging.INFO, logger="kstorm")
    topic = f"{topic_name}-later"
    handle = submit_topology("later", {"kafka.bootstrap.servers": kafka.bootstrap_servers,
                                       "kstorm.checkpoint.dir": str(tmp_path / "ck")},
                             _topology(topic))
    try:
        assert f"spout 'events': topic(s) ['{topic}'] do not exist" in caplog.text
        deadline = time.monotonic() + 60
        while f"still waits for topic(s) ['{topic}']" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text[-2000:]
            time.sleep(0.2)
        create_topic(kafka.bootstrap_servers, topic, 1)
        while "topics exist now" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text[-2000:]
            time.sleep(0.2)
    finally:
        handle.stop()


def test_a_wrong_bootstrap_address_is_named_within_seconds(tmp_path: Path) -> None:
    where = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(SourceError, match=rf"no Kafka broker answered at {where}"):
        submit_topology("nowhere", {"kafka.bootstrap.servers": where,
                                    "kstorm.checkpoint.dir": str(tmp_path / "ck")},
                        _topology("events"))
    assert time.monotonic() - started < 15
