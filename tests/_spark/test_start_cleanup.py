"""A start that fails at any step closes what it opened, once, and lets the checkpoint go.

Spark is replaced in the runner module (the session, ``compile_query``, ``foreachBatch``),
so these run without a JVM: what they check is the runner's own bookkeeping. Before the
start path held everything in one ExitStack, a ``compile_query`` or ``writer.start()`` that
raised left the sinks' clients open.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from kstorm import Fields, TopologyBuilder
from kstorm._runtime.checkpoint_lock import CheckpointLock
from kstorm._spark import runner
from kstorm._spark.speedups import planners
from kstorm.errors import ConfigError, StateError
from kstorm.testing import CaptureSink, ListSpout


class ClosingSink(CaptureSink):
    """A CaptureSink that notes, for every driver-side copy, its opens and closes."""

    events: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, label: str, fail_open: bool = False, fail_close: bool = False) -> None:
        super().__init__()
        self.label = label
        self.fail_open = fail_open
        self.fail_close = fail_close

    def open(self, context: Any) -> None:
        if self.fail_open:
            raise ConnectionError(f"sink {self.label!r} cannot connect")
        self.events.append(("open", self.label))

    def close(self) -> None:
        self.events.append(("close", self.label))
        if self.fail_close:
            raise OSError(f"sink {self.label!r} cannot close")


class Spark:
    """What the runner reads of a session and a query while it starts one, recorded."""

    def __init__(self, start_fails: bool) -> None:
        self.sparkContext = SimpleNamespace(master="local[2]")
        self.start_fails = start_fails
        self.events: list[str] = []

    def restore(self) -> None:
        self.events.append("restore")

    # the writer (foreach_batch's result) and the query it starts
    def option(self, *_: Any) -> Spark:
        return self

    def queryName(self, _: str) -> Spark:  # noqa: N802 - pyspark's name
        return self

    def trigger(self, **_: Any) -> Spark:
        return self

    def start(self) -> Any:
        if self.start_fails:
            raise RuntimeError("writer.start failed")
        return SimpleNamespace(isActive=True, stop=lambda: self.events.append("query.stop"),
                               awaitTermination=lambda *_: True, recentProgress=[])


@pytest.fixture
def spark(monkeypatch: pytest.MonkeyPatch) -> Spark:
    """Spark replaced in the runner: a query compiles and starts unless a test says not."""
    session = Spark(start_fails=False)
    ClosingSink.events = []
    compiled = SimpleNamespace(output=SimpleNamespace(writeStream=None), run=None)
    monkeypatch.setattr(runner, "start_zygote", lambda settings: None)
    monkeypatch.setattr(runner, "session_for", lambda settings, app_name: (session,
                                                                           session.restore))
    monkeypatch.setattr(runner, "compile_query", lambda *args, **kwargs: compiled)
    monkeypatch.setattr(runner, "foreach_batch", lambda stream, spark, commit: session)
    monkeypatch.setattr(runner, "release_instances", lambda spark, run: None)
    monkeypatch.setattr(planners, "start_read_planner", lambda spark, cancel: None)
    monkeypatch.setattr(runner, "_release_planners_when_planned",
                        lambda *args, planned, **kwargs: planned())
    return session


def _topology(*sinks: ClosingSink) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("words", ListSpout([[["a"]]], Fields("word")))
    for sink in sinks:
        builder.set_bolt(sink.label, sink).shuffle_grouping("words")
    return builder.create_topology()


def _start(tmp_path: Path, *sinks: ClosingSink, **conf: Any) -> Any:
    conf = {"kstorm.checkpoint.dir": str(tmp_path / "ck"), **conf}
    return runner.start("t", conf, _topology(*sinks))


def _assert_let_go(checkpoint: Path) -> None:
    """The checkpoint's lock is free: another start may take it."""
    CheckpointLock.acquire(checkpoint, "next").release()


TWO_SINKS = [("open", "a"), ("open", "b"), ("close", "a"), ("close", "b")]


def test_a_compile_query_that_raises_closes_the_sinks_and_lets_the_checkpoint_go(
        spark: Spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def compile_query(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("compile_query failed")

    monkeypatch.setattr(runner, "compile_query", compile_query)
    planning = planners.starts_planning()
    with pytest.raises(RuntimeError, match="compile_query failed"):
        _start(tmp_path, ClosingSink("a"), ClosingSink("b"))
    assert ClosingSink.events == TWO_SINKS
    assert spark.events == ["restore"]  # the session's settings put back, once
    assert planners.starts_planning() == planning  # the planners' registration ended
    _assert_let_go(tmp_path / "ck")


def test_a_writer_start_that_raises_closes_the_sinks_and_lets_the_checkpoint_go(
        spark: Spark, tmp_path: Path) -> None:
    spark.start_fails = True
    with pytest.raises(RuntimeError, match="writer.start failed"):
        _start(tmp_path, ClosingSink("a"), ClosingSink("b"))
    assert ClosingSink.events == TWO_SINKS
    assert spark.events == ["restore"]
    _assert_let_go(tmp_path / "ck")


def test_an_early_check_that_refuses_closes_the_sinks(spark: Spark, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kstorm.commit.overlap = true, but .* not Kafka"):
        _start(tmp_path, ClosingSink("a"), ClosingSink("b"),
               **{"kstorm.commit.overlap": True})
    assert ClosingSink.events == TWO_SINKS
    assert spark.events == []  # refused before a session was asked for
    assert not (tmp_path / "ck").exists()  # nothing written yet: the lock's directory goes


def test_a_sink_that_cannot_open_closes_the_ones_opened_before_it(
        spark: Spark, tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match="'b' cannot connect"):
        _start(tmp_path, ClosingSink("a"), ClosingSink("b", fail_open=True))
    assert ClosingSink.events == [("open", "a"), ("close", "a")]
    assert not (tmp_path / "ck").exists()


def test_a_sink_that_cannot_close_does_not_keep_the_next_one_open(
        spark: Spark, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spark.start_fails = True
    with pytest.raises(RuntimeError, match="writer.start failed"):  # what made it fail
        _start(tmp_path, ClosingSink("a", fail_close=True), ClosingSink("b"))
    assert ClosingSink.events == TWO_SINKS
    assert "sink 'a' could not close after the start failed" in caplog.text
    assert "'a' cannot close" in caplog.text
    _assert_let_go(tmp_path / "ck")


def test_a_refused_start_keeps_a_checkpoint_that_was_there(
        spark: Spark, tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    spark.start_fails = True
    with pytest.raises(RuntimeError, match="writer.start failed"):
        _start(tmp_path, ClosingSink("a"))
    assert (tmp_path / "ck").is_dir()
    CheckpointLock.acquire(tmp_path / "ck", "next").release()


def test_a_started_topology_closes_its_sinks_once_when_it_stops(
        spark: Spark, tmp_path: Path) -> None:
    handle = _start(tmp_path, ClosingSink("a"), ClosingSink("b"))
    assert ClosingSink.events == [("open", "a"), ("open", "b")]
    assert spark.events == ["restore"]  # once the query started: not at its stop
    with pytest.raises(StateError, match="in use by another running topology"):
        CheckpointLock.acquire(tmp_path / "ck", "other")
    handle.stop()
    assert ClosingSink.events == TWO_SINKS
    assert spark.events == ["restore", "query.stop"]
    CheckpointLock.acquire(tmp_path / "ck", "next").release()


def test_a_topology_that_ended_closes_its_sinks_once_though_stopped_after(
        spark: Spark, tmp_path: Path) -> None:
    """``await_termination`` saw the end, then the user calls ``stop()`` as well."""
    handle = _start(tmp_path, ClosingSink("a"), ClosingSink("b"))
    assert handle.await_termination(1)
    assert ClosingSink.events == TWO_SINKS
    handle.stop()
    assert ClosingSink.events == TWO_SINKS
    CheckpointLock.acquire(tmp_path / "ck", "next").release()
