"""``kstorm describe``: components, groupings, the fused stages and what runs on the driver."""

from __future__ import annotations

import pytest

from kstorm import Fields, TopologyBuilder
from kstorm.cli import main
from kstorm.cli.describe import describe, mermaid
from kstorm.testing import CaptureSink, ListSpout
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate


def _topology() -> object:
    from kstorm.cli.demo import SplitPath, WindowCount

    builder = TopologyBuilder()
    builder.set_spout("views", ListSpout([[["a b", 1]]], Fields("path", "ts")), 2)
    builder.set_bolt("split", SplitPath(), 2).shuffle_grouping("views")
    builder.set_bolt("count", WindowCount(), 3).fields_grouping("split", Fields("page"))
    builder.set_bolt("results", CaptureSink()).fields_grouping("count", Fields("page"))
    return builder.create_topology()


def test_describe_names_components_groupings_stages_and_the_driver() -> None:
    text = describe(_topology())
    assert "split: SplitPath x2, bolt" in text
    assert "<- split: fields(page)" in text
    assert ("count: WindowCount x3, stateful bolt (per task; KeyValueState in "
            "topology.state.provider)") in text
    assert ("state by key group h = stable_hash(grouping values): task 0 holds h mod 3 = 0, "
            "task 1 holds h mod 3 = 1, task 2 holds h mod 3 = 2; rescalable "
            "(topology.state.provider spark or redis)") in text
    assert "results: CaptureSink x1, sink (driver, commit phase)" in text
    assert "input hash-partitioned by task" in text
    assert "commit phase (driver, one batch at a time, in txid order): results" in text


def test_describe_says_why_a_global_grouped_stateful_bolt_keeps_its_parallelism() -> None:
    from kstorm.cli.demo import SplitPath, WindowCount

    builder = TopologyBuilder()
    builder.set_spout("views", ListSpout([[["a b", 1]]], Fields("path", "ts")))
    builder.set_bolt("split", SplitPath(), 2).shuffle_grouping("views")
    builder.set_bolt("count", WindowCount(), 2).global_grouping("split")
    text = describe(builder.create_topology())
    assert ("    state per task, kept at this parallelism: its input split:default is a global "
            "grouping") in text


def test_mermaid_draws_every_edge() -> None:
    chart = mermaid(_topology())
    assert chart.startswith("flowchart LR")
    assert 'views -->|"shuffle"| split' in chart and 'split -->|"fields(page)"| count' in chart
    assert 'results[/"results<br/>CaptureSink x1 (driver)"/]' in chart


def test_a_windowed_aggregate_is_described_as_split_between_executors_and_driver() -> None:
    builder = TopologyBuilder()
    builder.set_spout("e", ListSpout([[["k", 1]]], Fields("key", "ts")))
    builder.set_bolt("agg", WindowedAggregate(key="key", n=Agg.count())
                     .with_tumbling_window(Duration.seconds(1)).with_timestamp_field("ts")
                     ).fields_grouping("e", Fields("key"))
    builder.set_bolt("out", CaptureSink()).shuffle_grouping("agg")
    assert "windows closed on the driver" in describe(builder.create_topology())


def test_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "examples.page_views:topology"]) == 0
    out = capsys.readouterr().out
    assert "per_page: WindowedAggregate x1" in out and "store: RedisSink x1" in out
    assert main(["describe", "--mermaid", "examples.page_views:topology"]) == 0
    assert capsys.readouterr().out.startswith("flowchart LR")
