"""Ground truth of the benchmark topology, computed without kstorm (plain Python).

The rules (``/work/notes/runtime.md``, seed 004) for a tumbling window of ``length_ms``
with lag ``lag_ms``:

1. Lateness is decided per Kafka partition, in offset order: a record is late iff its
   ``ts`` is below ``max(ts of the earlier records of its partition) - lag_ms``. Late
   records are counted and left out of every window.
2. An on-time record belongs to the window ``(end - length_ms, end]`` with
   ``end = ceil(ts / length_ms) * length_ms``; results are keyed ``(key, window_start)``
   with ``window_start = end - length_ms``.
3. The final watermark is the minimum over partitions (that hold records) of their max
   ``ts`` minus ``lag_ms``; a window is emitted iff ``end < watermark``.

Example:
    >>> t = ground_truth([(0, 0, "a", 1_000, 5), (0, 1, "a", 30_000, 1)])
    >>> t.windows, t.late, t.watermark
    ({('a', 0): (1, 5)}, 0, 25000)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

Record = tuple[int, int, str, int, int]  # (partition, offset, key, ts, value)
WindowKey = tuple[str, int]  # (key, window_start)


@dataclass(frozen=True)
class Truth:
    """What the topology must have written, and what it must have counted."""

    windows: dict[WindowKey, tuple[int, int]]  # emitted: (key, start) -> (count, sum)
    late: int
    watermark: int | None
    still_open: int  # (key, window) pairs with on-time records that are never emitted
    on_time: int = field(default=0)


def ground_truth(records: Iterable[Record], *, length_ms: int = 10_000,
                 lag_ms: int = 5_000) -> Truth:
    """The emitted windows, late count and final watermark of ``records`` (any order)."""
    if length_ms <= 0 or lag_ms < 0:
        raise ValueError(f"ground_truth: need length_ms > 0 and lag_ms >= 0, got "
                         f"{length_ms}, {lag_ms}")
    ordered = sorted(records, key=lambda r: (r[0], r[1]))
    latest: dict[int, int] = {}
    sums: dict[WindowKey, list[int]] = {}
    late = on_time = 0
    for partition, _, key, ts, value in ordered:
        seen = latest.get(partition)
        if seen is not None and ts < seen - lag_ms:
            late += 1
        else:
            on_time += 1
            start = -(-ts // length_ms) * length_ms - length_ms
            acc = sums.get((key, start))
            if acc is None:
                sums[(key, start)] = [1, value]
            else:
                acc[0] += 1
                acc[1] += value
        if seen is None or ts > seen:
            latest[partition] = ts
    watermark = min(latest.values()) - lag_ms if latest else None
    emitted = {k: (c, s) for k, (c, s) in sums.items()
               if watermark is not None and k[1] + length_ms < watermark}
    return Truth(emitted, late, watermark, len(sums) - len(emitted), on_time)


def compare(truth: Truth, got: dict[WindowKey, tuple[int, int]]) -> list[str]:
    """Differences between ``got`` and ``truth.windows`` (empty: exact), at most 10 lines."""
    problems = []
    missing = truth.windows.keys() - got.keys()
    extra = got.keys() - truth.windows.keys()
    wrong = [k for k in truth.windows.keys() & got.keys() if truth.windows[k] != got[k]]
    for k in sorted(missing)[:3]:
        problems.append(f"missing window {k}: expected (count, sum) {truth.windows[k]}")
    for k in sorted(extra)[:3]:
        problems.append(f"extra window {k}: got {got[k]}")
    for k in sorted(wrong)[:3]:
        problems.append(f"window {k}: expected {truth.windows[k]}, got {got[k]}")
    if missing or extra or wrong:
        problems.append(f"{len(missing)} missing, {len(extra)} extra, {len(wrong)} wrong of "
                        f"{len(truth.windows)} expected windows")
    return problems
