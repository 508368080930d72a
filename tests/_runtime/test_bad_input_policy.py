"""kstorm.bad.input.policy: what happens to records the spout could not deserialize."""

import pyarrow as pa
import pytest

from kstorm import ConfigError, SerdeError, TopologyConfig
from kstorm._runtime.envelope import bad_input


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


def test_a_failed_topology_names_the_bolt_exception_not_sparks_wrapper():
    from kstorm.errors import KstormError, SerdeError
    from kstorm.handle import failure

    spark_text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: "
        "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function\n"
        "Traceback (most recent call last):\n"
        '  File "bolts.py", line 7, in execute\n'
        '    raise ValueError("cannot take 7")\n'
        "pyspark.errors.exceptions.captured.PythonException: An exception was thrown from "
        "the Python worker:\n"
        '    raise ValueError("cannot take 7")\n'
        "ValueError: cannot take 7\n")
    error = failure("wc", Exception(spark_text))
    assert type(error) is KstormError
    assert str(error) == "topology 'wc' failed: ValueError: cannot take 7"
    error = failure("wc", Exception("x\nkstorm.errors.SerdeError: spout 'e': bad"))
    assert isinstance(error, SerdeError)
    assert str(error) == "topology 'wc' failed: SerdeError: spout 'e': bad"


def test_a_failure_in_the_commit_phase_keeps_its_class():
    from kstorm.errors import SinkError
    from kstorm.handle import failure

    class KafkaCallError(SinkError):  # a sink's own subclass: the nearest kstorm class
        def __init__(self, message, kind):
            super().__init__(message)

    error = failure("wc", Exception("STREAM_FAILED"), KafkaCallError("no brokers", "fatal"))
    assert type(error) is SinkError
    assert "no brokers" in str(error)
