"""When a session kstorm built applies the extensions it deferred (session.py).

Fakes for Spark: the real path (a JVM, the class loader, MLlib's functions after the first
batch) is integration_tests/test_startup_planners.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kstorm._spark import session

NAME = session.DEFERRED_EXTENSIONS[0]


class FakeJvm:
    """``jvm.<Scala object>$.MODULE$.apply()`` and ``Utils.classIsLoadable``."""

    def __init__(self, loadable: bool = True, fails: bool = False) -> None:
        self.applied: list[str] = []
        self.loadable, self.fails = loadable, fails
        self.org = SimpleNamespace(apache=SimpleNamespace(spark=SimpleNamespace(
            util=SimpleNamespace(Utils=SimpleNamespace(classIsLoadable=lambda _: loadable)))))

    def __getattr__(self, name: str) -> Any:
        def apply() -> None:
            if self.fails:
                raise RuntimeError("boom")
            self.applied.append(name.removesuffix("$"))
        return SimpleNamespace(**{"MODULE$": SimpleNamespace(apply=apply)})


class FakeSpark:
    """``spark.streams.active`` following a script, one entry per poll."""

    def __init__(self, script: list[list[Any]], jvm: FakeJvm, stopped_at: int = -1) -> None:
        self.script, self.polls, self.stopped_at = script, 0, stopped_at
        self.sparkContext = SimpleNamespace(_jvm=jvm, _jsc=object())

    @property
    def streams(self) -> Any:
        active = self.script[min(self.polls, len(self.script) - 1)]
        self.polls += 1
        if self.polls == self.stopped_at:
            self.sparkContext._jsc = None
        return SimpleNamespace(active=active)


def query(progress: Any = None) -> Any:
    return SimpleNamespace(lastProgress=progress)


def test_applied_once_a_query_has_finished_a_batch() -> None:
    jvm = FakeJvm()
    spark = FakeSpark([[], [query()], [query()], [query({"batchId": 0})]], jvm)
    assert session.apply_deferred_extensions(spark, wait_s=30, poll_s=0) == [NAME]
    assert spark.polls == 4 and jvm.applied == [NAME]


def test_applied_when_the_query_ended_before_any_progress_was_seen() -> None:
    jvm = FakeJvm()  # run_to_completion: the query may be gone by the next poll
    spark = FakeSpark([[], [query()], []], jvm)
    assert session.apply_deferred_extensions(spark, wait_s=30, poll_s=0) == [NAME]
    assert spark.polls == 3


def test_applied_after_the_wait_without_any_query() -> None:
    jvm = FakeJvm()
    assert session.apply_deferred_extensions(FakeSpark([[]], jvm), wait_s=0.05,
                                             poll_s=0.01) == [NAME]


def test_a_stopped_session_gets_nothing() -> None:
    jvm = FakeJvm()
    spark = FakeSpark([[]], jvm)
    spark.sparkContext._jsc = None
    assert session.apply_deferred_extensions(spark, wait_s=30, poll_s=0) == []
    assert jvm.applied == []


def test_a_spark_without_mllib_has_nothing_to_apply() -> None:
    jvm = FakeJvm(loadable=False)
    assert session.apply_deferred_extensions(FakeSpark([[]], jvm), wait_s=0) == []


def test_a_failure_is_logged_with_what_it_means(caplog) -> None:
    jvm = FakeJvm(fails=True)
    with caplog.at_level("WARNING", logger="kstorm"):
        assert session.apply_deferred_extensions(FakeSpark([[]], jvm), wait_s=0) == []
    assert NAME in caplog.text and "not registered" in caplog.text
