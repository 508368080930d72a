"""The Spark runtime end to end on a real SparkSession, fed by ListSpout (no broker)."""

import datetime as dt
import shutil
from collections import Counter

import pytest

from kstorm import (
    BaseBasicBolt,
    BaseStatefulBolt,
    ConfigError,
    Fields,
    StateError,
    TopologyBuilder,
    submit_topology,
)
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm.testing import CaptureSink, ListSpout, run_to_completion
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate

pytestmark = pytest.mark.integration


class Split(BaseBasicBolt):
    def declare_output_fields(self, d):
        d.declare(Fields("word"))

    def execute(self, t, c):
        for w in t.get_string(0).split():
            if w == "boom":
                raise ValueError("boom is not a word")
            c.emit([w])


class Count(BaseStatefulBolt):
    def init_state(self, state):
        self.state = state

    def prepare(self, conf, context, collector):
        self.collector = collector

    def declare_output_fields(self, d):
        d.declare(Fields("word", "count"))

    def execute(self, t):
        word = t.get_value_by_field("word")
        n = self.state.get(word, 0) + 1
        self.state.put(word, n)
        self.collector.emit([word, n], anchors=t)
        self.collector.ack(t)


BATCHES = [[("the cat sat",), ("the dog",)], [("a cat",), ("boom the end",)], [("cat cat",)]]


def word_count(batches=BATCHES, count_tasks=3):
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout(batches, Fields("sentence"), partitions=2))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), count_tasks).fields_grouping("split", Fields("word"))
    b.set_bolt("out", CaptureSink()).global_grouping("count")
    return b.create_topology()


def expected(batches):
    words = Counter(w for batch in batches for (s,) in batch if "boom" not in s for w in s.split())
    return dict(words)


def test_a_run_without_a_checkpoint_dir_leaves_no_directory_behind(spark, tmp_path,
                                                                    monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where it makes its own
    result = run_to_completion(word_count(BATCHES[:2]))
    assert result.sinks["out"].values  # it ran
    assert not list(tmp_path.glob("kstorm-test-*"))  # and its checkpoint went with it
    with pytest.raises(Exception):  # noqa: B017, PT011 - any failure: still removed
        run_to_completion(word_count(), {"kstorm.trigger": "not-a-trigger"})
    assert not list(tmp_path.glob("kstorm-test-*"))


def test_word_count_state_spans_batches(spark, tmp_path):
    result = run_to_completion(word_count(), {"kstorm.checkpoint.dir": str(tmp_path / "cp")})
    final = {}
    for word, n in result.sinks["out"].values:
        final[word] = max(final.get(word, 0), n)
    assert final == expected(BATCHES)
    # one micro-batch per list batch, each committed once, in order
    assert sorted(result.sinks["out"].batches) == [0, 1, 2]
    # the bad sentence became a dead letter naming the bolt and the error; the rest went on
    assert [d["component"] for d in result.dead_letters] == ["split"]
    assert result.dead_letters[0]["error_type"] == "ValueError"
    assert result.progress["components"]["split"]["executed"] == 5
    assert sorted(result.emitted["split"]["default"]) == sorted(
        [[w] for batch in BATCHES for (s,) in batch if "boom" not in s for w in s.split()])


def test_stateful_and_stateless_stages_share_one_pool_of_python_workers(spark, tmp_path):
    """One worker daemon for the Arrow stages, the spout's reads and the stateful bolt's
    transformWithState: the first stateful batch takes warm workers instead of starting a
    second daemon whose workers import pandas again (and stay, ~300 MiB on 2 cores)."""
    from kstorm._spark.speedups.planners import _python_workers

    run_to_completion(word_count(), {"kstorm.checkpoint.dir": str(tmp_path / "cp")})
    keys, entries = [], _python_workers(spark).iterator()
    while entries.hasNext():
        key = entries.next()._1()
        if key.workerModule() == "pyspark.worker":
            keys.append(key)
    assert len(keys) == 1, [str(key.envVars()) for key in keys]


def test_restart_from_checkpoint_continues_state(spark, tmp_path):
    cp = str(tmp_path / "cp")
    first = run_to_completion(word_count(BATCHES[:2]), {"kstorm.checkpoint.dir": cp})
    assert sorted(first.sinks["out"].batches) == [0, 1]
    second = run_to_completion(word_count(BATCHES), {"kstorm.checkpoint.dir": cp})
    # only the new list batch ran, and the counts continued from the saved state
    assert sorted(second.sinks["out"].batches) == [2]
    assert sorted(map(tuple, second.sinks["out"].values)) == [("cat", 3), ("cat", 4)]


def test_a_checkpoint_from_before_task_keys_keeps_its_state(spark, tmp_path):
    """A checkpoint whose stateful stage grouped on the task index keeps doing so.

    Spark stores a stateful stage's state under its grouping key. kstorm now groups on keys
    that spread the tasks over Spark's partitions (``compiler.recorded_task_keys``); a
    checkpoint that ran before has its state under the task index and must keep it.
    """
    cp = tmp_path / "cp"
    layout = CheckpointLayout(cp)
    # the first run groups as kstorm did before it recorded keys: on the task index
    layout.set_task_keys({"count": {"kind": "task", "partitions": 4, "keys": [0, 1, 2]}})
    run_to_completion(word_count(BATCHES[:2]), {"kstorm.checkpoint.dir": str(cp)})
    layout.task_keys_path.unlink()  # ... and has no record of it
    second = run_to_completion(word_count(BATCHES), {"kstorm.checkpoint.dir": str(cp)})
    assert sorted(map(tuple, second.sinks["out"].values)) == [("cat", 3), ("cat", 4)]
    record = layout.task_keys()["count"]
    assert (record["kind"], record["partitions"], record["keys"]) == ("task", 4, [0, 1, 2])


def test_a_changed_parallelism_of_a_bolt_with_state_in_the_checkpoint_is_refused(spark,
                                                                                  tmp_path):
    """The state can move to 3 tasks only into a checkpoint resumed from a sink's offsets.

    Without a sink that records offsets (here: CaptureSink) the start is refused, naming
    the bolt and both task counts, and changes nothing: 2 tasks go on from the state.
    """
    cp = str(tmp_path / "cp")
    run_to_completion(word_count(BATCHES[:2], count_tasks=2), {"kstorm.checkpoint.dir": cp})
    with pytest.raises(StateError, match="'count' now runs 3 task.* for 2 task") as err:
        run_to_completion(word_count(BATCHES, count_tasks=3), {"kstorm.checkpoint.dir": cp})
    assert "keep the bolt's parallelism at 2" in (err.value.hint or "")
    # nothing was lost: the old parallelism goes on from the state
    again = run_to_completion(word_count(BATCHES, count_tasks=2), {"kstorm.checkpoint.dir": cp})
    assert sorted(map(tuple, again.sinks["out"].values)) == [("cat", 3), ("cat", 4)]


def test_a_lost_record_of_task_keys_is_an_error_not_a_state_reset(spark, tmp_path):
    """Spark keeps the state under the recorded keys: without them, it would read as empty."""
    cp = tmp_path / "cp"
    layout = CheckpointLayout(cp)
    conf = {"kstorm.checkpoint.dir": str(cp)}
    run_to_completion(word_count(BATCHES[:2], count_tasks=2), conf)
    record = layout.task_keys_path.read_bytes()
    layout.task_keys_path.unlink()
    with pytest.raises(StateError, match="task_keys.json is missing"):
        run_to_completion(word_count(BATCHES, count_tasks=2), conf)
    layout.task_keys_path.write_bytes(record)  # restored: the counts go on
    again = run_to_completion(word_count(BATCHES, count_tasks=2), conf)
    assert sorted(map(tuple, again.sinks["out"].values)) == [("cat", 3), ("cat", 4)]


def test_shuffle_partitions_a_checkpoint_ignores_are_refused(spark, tmp_path):
    """Spark runs a checkpoint with its first partitions; a different choice is not ignored."""
    conf = {"kstorm.checkpoint.dir": str(tmp_path / "cp")}
    run_to_completion(word_count(BATCHES[:2], count_tasks=2), conf)  # the session's 4
    with pytest.raises(ConfigError, match=r"kstorm.shuffle.partitions = '2', but the "
                                          r"checkpoint .* ran with spark.sql.shuffle.partitions"
                                          r" = '4'"):
        run_to_completion(word_count(BATCHES, count_tasks=2),
                          {**conf, "kstorm.shuffle.partitions": 2})
    again = run_to_completion(word_count(BATCHES, count_tasks=2),  # the checkpoint's own value
                              {**conf, "kstorm.shuffle.partitions": 4})
    assert sorted(map(tuple, again.sinks["out"].values)) == [("cat", 3), ("cat", 4)]


def test_a_later_topology_of_the_process_gets_its_settings_or_an_error(spark, tmp_path):
    """One SparkSession per process: a topology's own settings apply, or are refused."""
    import json

    def partitions_of(cp):
        meta = json.loads((cp / "offsets" / "0").read_text().splitlines()[1])
        return meta["conf"]["spark.sql.shuffle.partitions"]

    before = spark.conf.get("spark.sql.shuffle.partitions")
    run_to_completion(word_count(BATCHES[:1], count_tasks=2),
                      {"kstorm.checkpoint.dir": str(tmp_path / "three"),
                       "kstorm.shuffle.partitions": 3})
    assert partitions_of(tmp_path / "three") == "3"  # its own, not the session's
    assert spark.conf.get("spark.sql.shuffle.partitions") == before  # put back
    with pytest.raises(ConfigError, match=r"kstorm.spark.master = 'local\[1\]', but this "
                                          r"process's SparkSession already runs with"):
        run_to_completion(word_count(BATCHES[:1]), {"kstorm.checkpoint.dir": str(tmp_path / "m"),
                                                    "kstorm.spark.master": "local[1]"})


class KeepTypes(BaseStatefulBolt):
    """Remembers each key's value exactly as it arrived (its Python type included)."""

    def init_state(self, state):
        self.state = state

    def prepare(self, conf, context, collector):
        self.collector = collector

    def declare_output_fields(self, d):
        d.declare(Fields("key", "value", "type"))

    def execute(self, t):
        value = t.get_value_by_field("value")
        self.state.put(t.get_value_by_field("key"), value)
        self.collector.emit([t.get_value_by_field("key"), value, type(value).__name__])


def test_stateful_bolt_gets_spout_values_with_their_types(spark, tmp_path):
    # Spark hands a stateful stage its rows as pandas, which turns an integer column with
    # nulls into floats: the bolt must still see 7 (an int) and None, never 7.0 or NaN.
    b = TopologyBuilder()
    b.set_spout("rows", ListSpout([[("a", 7), ("b", None)], [("c", 2**53 + 1)]],
                                  Fields("key", "value")))
    b.set_bolt("keep", KeepTypes(), 2).fields_grouping("rows", Fields("key"))
    b.set_bolt("out", CaptureSink()).global_grouping("keep")
    result = run_to_completion(b.create_topology(), {"kstorm.checkpoint.dir": str(tmp_path)})
    assert sorted(result.sinks["out"].values, key=lambda v: v[0]) == [
        ["a", 7, "int"], ["b", None, "NoneType"], ["c", 2**53 + 1, "int"]]


def test_seed_004_worked_example(spark, tmp_path):
    def at(h, m, s):
        return (h * 3600 + m * 60 + s) * 1000

    batch1 = [("e1", at(6, 0, 3)), ("e2", at(6, 0, 5)), ("e3", at(6, 0, 7)),
              ("e4", at(6, 0, 18)), ("e5", at(6, 0, 26)), ("e6", at(6, 0, 36))]
    batch2 = [("e7", at(8, 0, 25)), ("e8", at(8, 0, 26)), ("e9", at(8, 0, 27)),
              ("e10", at(8, 0, 39))]
    agg = (WindowedAggregate(count=Agg.count(), first=Agg.min("ts"), last=Agg.max("ts"))
           .with_window(Duration.seconds(20), Duration.seconds(10))
           .with_timestamp_field("ts").with_lag(Duration.seconds(5)))
    b = TopologyBuilder()
    b.set_spout("events", ListSpout([batch1, batch2], Fields("id", "ts")))
    b.set_bolt("windows", agg).shuffle_grouping("events")
    b.set_bolt("out", CaptureSink()).shuffle_grouping("windows")
    result = run_to_completion(b.create_topology(), {"kstorm.checkpoint.dir": str(tmp_path)})

    def clock(ms):
        return str(dt.timedelta(milliseconds=ms))

    got = {bid: [(clock(s), clock(e), n, clock(lo), clock(hi)) for s, e, n, lo, hi in
                 (t.values for t in tuples)]
           for bid, tuples in result.sinks["out"].batches.items() if tuples}
    assert got == {
        # w1 = 6:00:31: e1..e5 evaluated, e6 held back
        0: [("5:59:50", "6:00:10", 3, "6:00:03", "6:00:07"),
            ("6:00:00", "6:00:20", 4, "6:00:03", "6:00:18"),
            ("6:00:10", "6:00:30", 2, "6:00:18", "6:00:26")],
        # w2 = 8:00:34: e6 from the earlier batch, e7..e9; e10 held back
        1: [("6:00:20", "6:00:40", 2, "6:00:26", "6:00:36"),
            ("6:00:30", "6:00:50", 1, "6:00:36", "6:00:36"),
            ("8:00:10", "8:00:30", 3, "8:00:25", "8:00:27")],
    }


def test_late_tuples_are_counted_and_routed(spark, tmp_path):
    # lag 2 s: after t=20 s arrives, anything before 18 s is late
    rows = [[("k", 1000), ("k", 20_000), ("k", 17_000), ("k", 19_000)], [("k", 5_000),
                                                                          ("k", 40_000)]]
    agg = (WindowedAggregate(key="key", n=Agg.count())
           .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
           .with_lag(Duration.seconds(2)).with_late_tuple_stream("late"))
    b = TopologyBuilder()
    b.set_spout("events", ListSpout(rows, Fields("key", "ts")))
    b.set_bolt("w", agg).fields_grouping("events", Fields("key"))
    b.set_bolt("out", CaptureSink()).shuffle_grouping("w")
    b.set_bolt("late", CaptureSink()).shuffle_grouping("w", stream="late")
    result = run_to_completion(b.create_topology(), {"kstorm.checkpoint.dir": str(tmp_path)})
    late = [t.values[0] for t in result.sinks["late"].tuples]
    assert sorted(r["ts"] for r in late) == [5_000, 17_000]  # each late tuple once
    assert result.progress["components"]["w"]["late"] == 2
    # late tuples are in no window; watermark 38 s closes (0,10], (10,20] and (20,30]
    assert result.sinks["out"].values == [["k", 0, 10_000, 1], ["k", 10_000, 20_000, 2]]


def test_submit_topology_handle(spark, tmp_path):
    handle = submit_topology("handle-test", {"kstorm.checkpoint.dir": str(tmp_path),
                                             "kstorm.trigger": "available-now"}, word_count())
    assert handle.await_termination(300)
    assert not handle.is_active
    assert handle.progress["batches"] == 3
    handle.stop()  # stopping a finished topology is harmless


def test_a_second_driver_on_a_running_checkpoint_is_refused(spark, tmp_path):
    """Two drivers on one checkpoint would plan the same batches twice: the second is refused."""
    conf = {"kstorm.checkpoint.dir": str(tmp_path / "cp"), "kstorm.trigger": "continuous",
            "kstorm.trigger.interval.ms": 200}
    first = submit_topology("first", conf, word_count(BATCHES[:2], count_tasks=2))
    try:
        with pytest.raises(StateError, match="in use by another running topology "
                                             r"\(topology 'first', this process"):
            submit_topology("second", conf, word_count(BATCHES, count_tasks=2))
        assert first.is_active  # the running one is untouched
        first.process_all_available()
    finally:
        first.stop()
    again = run_to_completion(word_count(BATCHES, count_tasks=2),
                              {**conf, "kstorm.trigger": "available-now"})
    assert sorted(map(tuple, again.sinks["out"].values)) == [("cat", 3), ("cat", 4)]


def test_a_run_stopped_during_its_first_batch_starts_again(spark, tmp_path):
    """Stopped before its first batch committed (offsets log written, no commit), a stateful
    topology starts again and counts exactly (Spark may refuse to re-run batch 0 of a query
    with state operators: kstorm plans it again from the spouts' starting offsets)."""
    cp = tmp_path / "cp"
    run_to_completion(word_count(BATCHES[:1]), {"kstorm.checkpoint.dir": str(cp)})
    for name in ("commits",):  # as if stopped before batch 0 committed
        shutil.rmtree(cp / name, ignore_errors=True)
    for extra in (cp / "offsets").iterdir():
        if extra.name != "0":
            extra.unlink()
    assert (cp / "offsets" / "0").exists()
    result = run_to_completion(word_count(BATCHES[:1]), {"kstorm.checkpoint.dir": str(cp)})
    final = {}
    for word, n in result.emitted["count"]["default"]:
        final[word] = max(n, final.get(word, 0))
    assert final == expected(BATCHES[:1])
