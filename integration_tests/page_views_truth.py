"""The page-views example's ground truth, computed from the produced views alone.

Shared by the example's test on Spark (``test_examples.py``) and in a container
(``test_topology_container.py``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

WINDOW_MS, LAG_MS = 10_000, 5_000


def page_views_truth(views: dict[int, list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Every window the final watermark (min over partitions of max ts - lag) closed:
    ``page-views:<page>:<window start>`` -> views and distinct users."""
    watermark = min(max(v["ts"] for v in vs) for vs in views.values()) - LAG_MS
    users: dict[str, set[str]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for view in (v for vs in views.values() for v in vs):
        start = view["ts"] - view["ts"] % WINDOW_MS
        if start + WINDOW_MS < watermark:
            key = f"page-views:{view['page']}:{start}"
            counts[key] += 1
            users[key].add(view["user"])
    return {k: {"views": counts[k], "users": len(users[k])} for k in counts}
