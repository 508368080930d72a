"""A windowed bolt's running value in an instance field stays right on Spark.

storm-starter's ``SlidingWindowSumBolt`` keeps ``sum`` in a field. On Spark a windowed bolt
task may run in another Python worker from one batch to the next; its fields travel with its
windows (``kstorm/_runtime/bolt_fields.py``), so the sum always equals the window's.
"""

from __future__ import annotations

import pytest
from windowed_bolts import RunningSum

from kstorm import Fields, TopologyBuilder
from kstorm.testing import CaptureSink, ListSpout, run_to_completion
from kstorm.windowing import Count

pytestmark = pytest.mark.integration


def test_a_running_sum_in_a_field_equals_the_windows_sum_in_every_batch(spark, tmp_path):
    batches = [[(f"k{i % 5}", 100 * b + i) for i in range(10)] for b in range(12)]
    b = TopologyBuilder()
    b.set_spout("n", ListSpout(batches, Fields("k", "n"), partitions=2))
    b.set_bolt("sum", RunningSum().with_window(Count(6), Count(3)), 2).fields_grouping(
        "n", Fields("k"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("sum")
    result = run_to_completion(b.create_topology(), {"kstorm.checkpoint.dir": str(tmp_path)})

    rows = [t.values for ts in result.sinks["out"].batches.values() for t in ts]
    assert len(rows) >= 30  # a window every 3 tuples of a task: 120 tuples, 2 tasks
    wrong = [r for r in rows if r[1] != r[2]]
    assert not wrong, f"{len(wrong)} of {len(rows)} sums differ from their windows: {wrong[:5]}"
