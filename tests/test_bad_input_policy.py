"""kstorm.bad.input.policy: what happens to records the spout could not deserialize."""

import pyarrow as pa
import pytest

from kstorm import ConfigError, SerdeError, TopologyConfig
from kstorm._spark.envelope import bad_input


def batch():
    return pa.RecordBatch.from_pydict({
        "value": ["ok", None, None],
        "topic": ["t", "t", "t"], "partition": [0, 0, 1], "offset": [5, 6, 7],
        "__error": [None, "MalformedJSON: not JSON", "MissingField: field 'ts' is missing"],
        "__raw": [None, b"{", b"{}"],
    })


def test_dead_letter_keeps_reason_position_and_bytes():
    dead, skipped = bad_input(batch(), "events", "dead-letter")
    assert skipped == 0
    assert [(d[0], d[2], d[5], d[6], d[7], d[8]) for d in dead] == [
        ("events", "MalformedJSON", "t", 0, 6, b"{"),
        ("events", "MissingField", "t", 1, 7, b"{}")]
    assert dead[1][3] == "field 'ts' is missing"


def test_skip_and_count():
    assert bad_input(batch(), "events", "skip-and-count") == ([], 2)


def test_fail_names_topic_partition_offset():
    with pytest.raises(SerdeError, match=r"spout 'events'.*t\[0\]@6: MalformedJSON"):
        bad_input(batch(), "events", "fail")


def test_policy_is_validated():
    with pytest.raises(ConfigError, match="bad.input.policy"):
        TopologyConfig.from_conf({"kstorm.bad.input.policy": "ignore"})
