"""What Spark's planner processes pay when they build a Kafka spout's reader.

Spark builds a Python data source's stream reader in its planner processes too (the
streaming source runner, the read planner), which only plan offsets. The reader keeps the
fused first stage pickled until a read task runs it, so those processes never import the
stage's code: the user's bolts and whatever those import.
"""

from __future__ import annotations

import base64
import pickle

from pyspark.sql.types import StructType

from kstorm import KafkaSpout
from kstorm._spark.kafka_source import KafkaStreamReader


class _Unloadable:
    """Stands for a stage whose code a planner process cannot (or should not) import."""

    def __reduce__(self) -> tuple:
        return (_refuse, ())


def _refuse() -> None:
    msg = "the fused stage was unpickled"
    raise AssertionError(msg)


def test_building_a_reader_leaves_the_fused_stage_pickled() -> None:
    fused = base64.b64encode(pickle.dumps(_Unloadable())).decode()
    spout = KafkaSpout("events", bootstrap_servers="127.0.0.1:9092")
    reader = KafkaStreamReader(spout, StructType(), fused=fused)
    copy = pickle.loads(pickle.dumps(reader))  # as Spark ships it to a read task
    assert copy.fused == fused  # unpickled by read(), in the read task only


def test_a_capped_batch_marks_the_ranges_whose_consumer_is_kept() -> None:
    """Only ranges that stop short of what the planner saw keep their read consumer (the
    stream is catching up); at the tail, and when a restart re-plans a batch, none do."""
    spout = KafkaSpout("events", bootstrap_servers="127.0.0.1:9092")
    reader = KafkaStreamReader(spout, StructType())
    start = {"events": {"0": 0, "1": 0}}
    end = {"events": {"0": 10_000, "1": 10_000}}

    def marked() -> frozenset:
        return frozenset().union(*(part.value[2] for part in reader.partitions(start, end)))

    assert marked() == frozenset()  # re-planned after a restart: nothing seen
    reader._latest = {("events", 0): 25_000, ("events", 1): 10_000}
    assert marked() == {("events", 0)}
