"""A window fires once: a partition that starts delivering late cannot reopen it (issue 11.8).

Partition 0 delivers 100 s of events while partition 1 has delivered nothing; windows close.
Then partition 1 delivers its first events, with early timestamps. Those are late tuples:
the stream starts at the closed watermark (``@new`` in the clocks), the executors flag them
late (late stream / counted), and the driver drops any partial of a fired window as late.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kstorm._kafka.clocks import NEW_STREAM, clock_of, read_clocks
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._spark.windowed import WindowCommit
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate, late_mask, merge, partials

SPEC = (WindowedAggregate(key="k", n=Agg.count()).with_tumbling_window(Duration.seconds(10))
        .with_timestamp_field("ts").with_lag(Duration.seconds(5)).spec())


def executor(rows: list[tuple[str, int]], clocks: dict[str, Any]) -> tuple[bytes, int]:
    """One task, as WindowStageRunner: each stream starts at its clock (clock_of)."""
    table = pa.table({"k": ["a"] * len(rows), "ts": [ts for _, ts in rows],
                      "stream": [s for s, _ in rows]})
    streams = np.array([s for s, _ in rows], dtype=object)
    latest = {s: c for s in set(streams.tolist())
              if (c := clock_of(clocks, s)) is not None}
    late = late_mask(table.column("ts").to_numpy(), streams, latest, SPEC.lag_ms)
    on_time = table.filter(pa.array(~late))
    merged = merge([partials(on_time, SPEC)], SPEC) if on_time.num_rows else \
        partials(table.slice(0, 0), SPEC)
    payload = {"partials": merged, "latest": latest, "late": int(late.sum())}
    return pickle.dumps(payload), int(late.sum())


def test_a_late_partition_cannot_fire_a_window_again(tmp_path: Path) -> None:
    layout = CheckpointLayout(tmp_path)
    driver = WindowCommit("agg", SPEC, layout)
    first = [("t/0", s * 1000) for s in range(1, 101)]  # 100 s on partition 0 only
    payload, _ = executor(first, {})
    fired, state = driver.commit(0, [payload])
    driver.persist(0, state)
    assert [w[1] for w in fired] == list(range(0, 90_000, 10_000))  # ends < 95 s closed
    assert [w[3] for w in fired] == [10] * 9

    clocks = read_clocks(str(layout.clocks_path("agg")))
    assert clocks[NEW_STREAM] == 95_000 + 5_000  # closed watermark + lag
    early = [("t/1", s * 1000) for s in range(1, 21)]  # partition 1's first events
    payload, late = executor(early, clocks)
    assert late == 20  # all below the watermark: late, on the late stream
    fired, state = driver.commit(1, [payload])
    assert fired == []
    assert state.watermark == 95_000  # did not go back


def test_the_driver_drops_partials_of_fired_windows_as_late(tmp_path: Path) -> None:
    driver = WindowCommit("agg", SPEC, CheckpointLayout(tmp_path))
    payload, _ = executor([("t/0", s * 1000) for s in range(1, 101)], {})
    _, state = driver.commit(0, [payload])
    driver.persist(0, state)
    before = state.late
    # an executor that knew no clock (e.g. clocks from an earlier version): not flagged late
    payload, late = executor([("t/1", 3_000), ("t/1", 97_000)], {})
    assert late == 0
    fired, state = driver.commit(1, [payload])
    assert all(w[1] != 0 for w in fired)  # the window [0, 10 s) did not fire again
    assert state.late == before + 1
