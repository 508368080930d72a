"""Each task of a fields- or shuffle-by-task-exchanged stage gets a Spark partition of its own.

Spark's hash partitioning puts a row in ``pmod(murmur3(key, 42), n)``; on the task index
itself that sent both tasks of a 2-task bolt to partition 1. kstorm partitions on a key per
task that lands in the task's own partition (``compiler.task_partition_keys``).
"""

from __future__ import annotations

import pytest

from kstorm._spark.compiler import _murmur3_int, task_partition_keys


def test_murmur3_is_sparks_hash_of_an_int() -> None:
    # values of Spark 4.3's F.hash(F.lit(v)) and pmod(hash(t), 2 / 4) for t in 0..7
    assert _murmur3_int(123456789) == -598405280
    assert _murmur3_int(-7) == -1618159745
    assert [_murmur3_int(t) % 2 for t in range(8)] == [1, 1, 0, 1, 0, 0, 1, 1]
    assert [_murmur3_int(t) % 4 for t in range(8)] == [3, 3, 2, 3, 2, 2, 1, 3]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16, 64])
def test_every_task_has_a_partition_of_its_own(n: int) -> None:
    keys = task_partition_keys(n)
    assert [_murmur3_int(k) % n for k in keys] == list(range(n))
