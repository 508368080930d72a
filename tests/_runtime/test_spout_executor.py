"""Free-form spouts without Spark: batch bounds, the write-ahead log, acks, errors, the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kstorm import BaseBasicBolt, BaseRichSpout, Fields, TopologyBuilder
from kstorm._runtime.plan import compile_plan
from kstorm._runtime.spout_executor import BatchBounds, SpoutExecutor
from kstorm._runtime.spout_log import LoggedTuple, SpoutLog
from kstorm.component import TopologyContext
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError, SourceError, TopologyError
from kstorm.testing import CaptureSink, ManualClock
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate

STREAMS = {"default": Fields("n"), "alerts": Fields("n", "why")}


class Script(BaseRichSpout):
    """Each next_tuple call runs the next step: a list of values to emit, or an exception."""

    def __init__(self, steps: list[Any], clock: ManualClock | None = None,
                 call_ms: int = 0) -> None:
        self.steps = list(steps)
        self.clock = clock
        self.call_ms = call_ms
        self.calls = 0
        self.acks: list[Any] = []
        self.opened = 0
        self.closed = 0

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(STREAMS["default"])
        declarer.declare_stream("alerts", STREAMS["alerts"])

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.opened += 1

    def next_tuple(self) -> None:
        self.calls += 1
        if self.clock is not None:
            self.clock.advance(self.call_ms)
        step = self.steps.pop(0) if self.steps else []
        if isinstance(step, BaseException):
            raise step
        for item in step:
            stream, values, msg = item if isinstance(item, tuple) else ("default", [item], item)
            self.collector.emit(values, message_id=msg, stream=stream)

    def ack(self, msg_id: Any) -> None:
        self.acks.append(msg_id)

    def close(self) -> None:
        self.closed += 1


def executor(spout: Script, tmp_path: Path, clock: ManualClock | None = None,
             ack_on_emit: bool = False, **bounds: Any) -> SpoutExecutor:
    clock = clock or ManualClock()
    return SpoutExecutor(spout, "api", {}, TopologyContext("t", "api", output_streams=STREAMS),
                         SpoutLog(tmp_path / "api"), BatchBounds(**bounds),
                         ack_on_emit=ack_on_emit, clock=lambda: clock() / 1000,
                         sleep=lambda s: None)


def logged(tmp_path: Path, seq: int) -> list[LoggedTuple]:
    return list(SpoutLog(tmp_path / "api").tuples(seq))


def test_batch_ends_at_max_tuples_and_the_next_goes_on(tmp_path: Path) -> None:
    spout = Script([[0, 1], [2, 3], [4, 5], [6]])
    ex = executor(spout, tmp_path, max_tuples=3)
    assert ex.next_batch(0) == 1
    assert [t.values for t in logged(tmp_path, 0)] == [[0], [1], [2], [3]]  # one call over
    assert ex.next_batch(1) == 2
    assert [t.message_id for t in logged(tmp_path, 1)] == [4, 5, 6]


def test_idle_spout_ends_the_batch_and_an_empty_one_is_not_logged(tmp_path: Path) -> None:
    spout = Script([[0], [], [], [1], [], [], []])
    ex = executor(spout, tmp_path, idle_calls=3)
    assert ex.next_batch(0) == 1
    assert [t.values for t in logged(tmp_path, 0)] == [[0], [1]]
    assert spout.calls == 7  # two empty calls did not end it, three did
    assert ex.next_batch(1) == 1  # nothing: no batch, no file
    assert not SpoutLog(tmp_path / "api").exists(1)


def test_batch_ends_after_max_ms(tmp_path: Path) -> None:
    clock = ManualClock()
    spout = Script([[i] for i in range(100)], clock=clock, call_ms=30)
    ex = executor(spout, tmp_path, clock=clock, max_ms=100)
    ex.next_batch(0)
    assert len(logged(tmp_path, 0)) == 4  # calls at 0, 30, 60, 90 ms


def test_streams_and_untracked_tuples_are_logged(tmp_path: Path) -> None:
    spout = Script([[("alerts", [7, "hot"], None), ("default", [7], {"id": 7})]])
    executor(spout, tmp_path).next_batch(0)
    assert logged(tmp_path, 0) == [LoggedTuple("alerts", [7, "hot"], None),
                                   LoggedTuple("default", [7], {"id": 7})]


def test_acks_come_once_after_commit_for_tracked_tuples_only(tmp_path: Path) -> None:
    spout = Script([[("default", [1], "a"), ("default", [2], None)], [], [], [],
                    [("default", [3], "b")]])
    ex = executor(spout, tmp_path)
    assert ex.next_batch(0) == 1
    assert spout.acks == []  # logged, not yet committed
    assert ex.next_batch(1) == 2  # planning batch 1 means batch 0 committed
    assert spout.acks == ["a"]
    ex.ack_through(2)  # Spark's commit(end) of batch 1
    ex.ack_through(2)
    assert spout.acks == ["a", "b"]


def test_at_most_once_acks_right_after_logging(tmp_path: Path) -> None:
    spout = Script([[1, 2]])
    ex = executor(spout, tmp_path, ack_on_emit=True)
    ex.next_batch(0)
    assert spout.acks == [1, 2]
    ex.ack_through(1)
    assert spout.acks == [1, 2]


def test_restart_replays_a_logged_batch_and_acks_before_next_tuple(tmp_path: Path) -> None:
    first = Script([[1, 2], [], [], [], [3]])
    ex = executor(first, tmp_path)
    ex.next_batch(0)
    ex.next_batch(1)  # batch 1 logged; the process dies before Spark records it
    assert first.acks == [1, 2]
    # batch 0's acks were delivered; batch 1 never committed: a fresh instance replays it
    fresh = Script([[99]])
    ex2 = executor(fresh, tmp_path)
    assert ex2.next_batch(1) == 2
    assert fresh.calls == 0 and fresh.opened == 1
    assert [t.values for t in logged(tmp_path, 1)] == [[3]]
    assert ex2.next_batch(2) == 3  # batch 1 committed: acked to the fresh instance first
    assert fresh.acks == [3]
    assert [t.values for t in logged(tmp_path, 2)] == [[99]]


def test_acks_not_delivered_before_a_crash_go_to_the_next_instance(tmp_path: Path) -> None:
    ex = executor(Script([[1]]), tmp_path)
    ex.next_batch(0)  # batch 0 runs and commits, then the process dies before any ack
    fresh = Script([[2]])
    executor(fresh, tmp_path).next_batch(1)
    assert fresh.acks == [1]


def test_committed_logs_are_pruned(tmp_path: Path) -> None:
    from kstorm._runtime.checkpoint import KEEP_BATCHES

    ex = executor(Script([[i] for i in range(KEEP_BATCHES + 10)]), tmp_path, max_tuples=1)
    for seq in range(KEEP_BATCHES + 6):
        ex.next_batch(seq)
    kept = sorted(int(p.name) for p in (tmp_path / "api").iterdir() if p.name.isdigit())
    # batch KEEP_BATCHES + 5 in flight, the KEEP_BATCHES acked ones before it kept
    assert kept == list(range(5, KEEP_BATCHES + 6))


def test_next_tuple_raising_ends_the_batch_with_what_came_before(tmp_path: Path) -> None:
    spout = Script([[1], ConnectionError("api down"), [2]])
    ex = executor(spout, tmp_path)
    assert ex.next_batch(0) == 1
    assert [t.values for t in logged(tmp_path, 0)] == [[1]]
    assert ex.failures == 1
    ex.next_batch(1)
    assert ex.failures == 0  # a good call resets the count
    assert [t.values for t in logged(tmp_path, 1)] == [[2]]


def test_repeated_failures_fail_with_the_spout_name(tmp_path: Path) -> None:
    spout = Script([ConnectionError("api down")] * 5)
    ex = executor(spout, tmp_path, max_failures=3)
    with pytest.raises(SourceError, match=r"spout 'api': next_tuple raised 3 times in a row; "
                                          r"last: ConnectionError: api down"):
        ex.next_batch(0)
    assert spout.calls == 3


def test_wrong_arity_and_unknown_stream_are_topology_errors(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"spout 'api' emitted 2 values on stream "
                                            r"'default', which declares 1 fields \['n'\]"):
        executor(Script([[("default", [1, 2], None)]]), tmp_path).next_batch(0)
    with pytest.raises(TopologyError, match=r"undeclared stream 'nope'; it declares "
                                            r"\['alerts', 'default'\]"):
        executor(Script([[("nope", [1], None)]]), tmp_path / "b").next_batch(0)


def test_an_emit_error_the_spout_swallows_still_fails(tmp_path: Path) -> None:
    class Swallow(Script):
        def next_tuple(self) -> None:
            try:
                self.collector.emit([1, 2, 3])
            except Exception:  # noqa: BLE001 (what a careless spout does)
                pass

    with pytest.raises(TopologyError, match="emitted 3 values"):
        executor(Swallow([]), tmp_path).next_batch(0)


def test_close_runs_once_and_only_after_open(tmp_path: Path) -> None:
    spout = Script([[1]])
    ex = executor(spout, tmp_path)
    ex.close()
    assert spout.closed == 0
    ex.next_batch(0)
    ex.close()
    ex.close()
    assert spout.closed == 1


def test_missing_logged_batch_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"spout 'api': batch 4 is not in its log"):
        SpoutLog(tmp_path / "api").table(4)


@pytest.mark.parametrize("bad", [{"max_tuples": 0}, {"max_ms": -1}, {"idle_calls": 1.5},
                                 {"max_failures": True}, {"wait_ms": -1}])
def test_bounds_are_validated(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(bad))):
        BatchBounds(**bad)


def test_config_keys() -> None:
    settings = TopologyConfig.from_conf({"kstorm.spout.max.batch.tuples": 500,
                                         "kstorm.spout.max.batch.ms": 250})
    assert (settings.spout_max_batch_tuples, settings.spout_max_batch_ms) == (500, 250)
    assert (settings.spout_idle_calls, settings.spout_max_failures) == (3, 3)
    with pytest.raises(ConfigError, match="kstorm.spout.max.batch.tuples"):
        TopologyConfig.from_conf({"kstorm.spout.max.batch.tuples": 0})
    assert TopologyConfig.from_conf({"topology.guarantee": "at-most-once"}).acks_on_emit
    assert not TopologyConfig.from_conf({}).acks_on_emit


class Upper(BaseBasicBolt):
    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))

    def execute(self, t: Any, collector: Any) -> None:
        collector.emit(t.values[:1])


def test_plan_consumers_of_a_free_form_spout_read_envelope_rows() -> None:
    b = TopologyBuilder()
    b.set_spout("api", Script([]))
    b.set_bolt("upper", Upper(), 3).fields_grouping("api", Fields("n"))
    b.set_bolt("alerts", CaptureSink()).shuffle_grouping("api", "alerts")
    plan = compile_plan(b.create_topology())
    source, upper = plan.stage("api"), plan.stage("upper")
    assert source.envelope_source and source.is_source
    assert upper.raw_spout is None  # hashed by the spout's stage, not on raw columns
    assert upper.inputs[0][1] == source.index


def test_plan_rejects_a_builtin_window_over_a_free_form_spout() -> None:
    b = TopologyBuilder()
    b.set_spout("api", Script([]))
    agg = (WindowedAggregate(key="n", count=Agg.count())
           .with_tumbling_window(Duration.seconds(10)))
    b.set_bolt("agg", agg).fields_grouping("api", Fields("n"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("agg")
    with pytest.raises(TopologyError, match="use a BaseWindowedBolt for a free-form spout"):
        compile_plan(b.create_topology())
