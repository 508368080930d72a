"""``python -m bench.topology_throughput``'s figures: per-batch rates, the same-run baseline
ratio and the chart."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bench import topology_throughput as tt


def report(steady: float | None = 20_000.0, raws: list[float] | None = None) -> dict[str, Any]:
    return {"words_per_sentence": 8.0, "steady_sentences_s": steady,
            "raw_words_s": [800_000.0, 900_000.0] if raws is None else raws,
            "spark_batches": [(50_000, {"triggerExecution": 4000, "addBatch": 3900}),
                              (50_000, {"triggerExecution": 2000, "addBatch": 1950}),
                              (10, {})]}


def test_each_batch_rate_is_its_words_over_its_trigger_time() -> None:
    # a batch Spark reported no trigger time for has no rate (not a division by zero)
    assert tt.batch_rates(report()) == [100_000.0, 200_000.0]


def test_the_ratio_is_to_the_faster_baseline_run() -> None:
    assert tt.ratio(report()) == pytest.approx(160_000 / 900_000)
    assert tt.ratio(report(raws=[])) is None  # no baseline measured: no ratio
    assert tt.ratio(report(steady=None)) is None  # one batch: no steady rate


def test_the_chart_is_a_png_or_a_hint_without_matplotlib(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "topology.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        has_matplotlib = False
    else:
        has_matplotlib = True
    assert tt.chart(report(), path) is has_matplotlib
    if has_matplotlib:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        path.unlink()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert tt.chart(report(), path) is False
    assert not path.exists()
    assert "pip install -e '.[bench]'" in capsys.readouterr().out
