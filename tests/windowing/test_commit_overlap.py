"""kstorm.commit.overlap: which topologies may commit their sinks after ``foreachBatch``, and
how a start recovers when Spark recorded a batch its sinks had not committed yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstorm import BaseBasicBolt, BaseStatefulBolt, Fields, KafkaSpout, TopologyBuilder
from kstorm._runtime.plan import compile_plan
from kstorm._runtime.reconcile import Resume, decide
from kstorm._spark import overlap
from kstorm._spark.offset_log import last_committed_batch, next_batch_id, replay_last_batch
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError
from kstorm.sink import BaseSink, CommitRecord
from kstorm.testing import CaptureSink, ListSpout
from kstorm.windowing import Duration
from kstorm.windowing.aggregate import Agg, WindowedAggregate
from serdes import JsonSerde


class Recording(BaseSink):
    records_offsets = True

    def commit(self, batch):  # pragma: no cover - never run here
        pass


class Plain(BaseSink):
    def commit(self, batch):  # pragma: no cover - never run here
        pass


class Upper(BaseBasicBolt):
    def declare_output_fields(self, d):
        d.declare(Fields("word"))

    def execute(self, t, c):
        c.emit([t.get_value(0).upper()])


class Count(BaseStatefulBolt):
    def init_state(self, state):
        self.state = state

    def declare_output_fields(self, d):
        d.declare(Fields("word", "n"))


def kafka_spout() -> KafkaSpout:
    return KafkaSpout(topics=["t"], bootstrap_servers="127.0.0.1:1",
                      value_serde=JsonSerde({"word": str, "ts": int}))


def refusals(builder: TopologyBuilder, sinks: dict[str, BaseSink], **conf) -> list[str]:
    topology = builder.create_topology()
    return overlap.refusals(topology, compile_plan(topology), TopologyConfig.from_conf(conf),
                            sinks)


def windowed() -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("events", kafka_spout())
    b.set_bolt("agg", WindowedAggregate(key="word", count=Agg.count())
               .with_tumbling_window(Duration.seconds(10)).with_timestamp_field("ts")
               ).shuffle_grouping("events")
    b.set_bolt("store", Recording()).shuffle_grouping("agg")
    return b


def test_a_kafka_windowed_aggregate_into_a_recording_sink_overlaps():
    assert refusals(windowed(), {"store": Recording()}) == []
    b = TopologyBuilder()
    b.set_spout("events", kafka_spout())
    b.set_bolt("upper", Upper(), 2).shuffle_grouping("events")
    b.set_bolt("store", Recording()).shuffle_grouping("upper")
    assert refusals(b, {"store": Recording()}) == []


def test_what_keeps_the_commit_inside_the_batch_is_named():
    assert any("at-least-once" in w for w in
               refusals(windowed(), {"store": Recording()},
                        **{"topology.guarantee": "at-least-once"}))
    assert any("dead-letter" in w for w in
               refusals(windowed(), {"store": Recording()},
                        **{"kstorm.transaction.failure.policy": "dead-letter"}))
    assert any("'store'" in w and "record offsets" in w
               for w in refusals(windowed(), {"store": Plain()}))
    b = TopologyBuilder()
    b.set_spout("lines", ListSpout([[("a",)]], Fields("word")))
    b.set_bolt("count", Count()).fields_grouping("lines", Fields("word"))
    b.set_bolt("store", CaptureSink()).shuffle_grouping("count")
    why = refusals(b, {"store": Recording()})
    assert any("'lines'" in w and "not Kafka" in w for w in why)
    assert any("'count' is a stateful bolt" in w for w in why)


def test_the_key_decides_and_true_is_refused_where_it_cannot_be_kept():
    auto = TopologyConfig.from_conf({})
    assert auto.commit_overlap == "auto"
    cluster = "spark://10.0.0.1:7077"
    assert overlap.enabled("t", auto, [], cluster) is True
    assert overlap.enabled("t", auto, ["'count' is a stateful bolt"], cluster) is False
    # auto: not where the batch's tasks take every core the driver has
    assert overlap.enabled("t", auto, [], "local[*]") is False
    off = TopologyConfig.from_conf({"kstorm.commit.overlap": "false"})
    assert overlap.enabled("t", off, [], cluster) is False
    on = TopologyConfig.from_conf({"kstorm.commit.overlap": True})
    assert overlap.enabled("t", on, [], "local[*]") is True
    overlap.check("t", on, [])
    overlap.check("t", auto, ["'count' is a stateful bolt"])  # auto: commits in the batch
    with pytest.raises(ConfigError,
                       match="overlap = true.*'count' is a stateful bolt"):
        overlap.check("t", on, ["'count' is a stateful bolt"])
    with pytest.raises(ConfigError, match="kstorm.commit.overlap"):
        TopologyConfig.from_conf({"kstorm.commit.overlap": "sometimes"})


@pytest.mark.parametrize(("master", "cores", "shares"), [
    ("local[*]", 2, True), ("local[2]", 2, True), ("local[4]", 2, True),
    ("local[1]", 2, False), ("local", 2, False), ("local", 1, True),
    ("local[3,2]", 8, False), ("local-cluster[2,1,1024]", 8, True),
    ("spark://127.0.0.1:7077", 2, False), ("yarn", 2, False), ("k8s://https://k:443", 2, False),
])
def test_a_local_master_on_every_core_shares_them_with_the_driver(master, cores, shares):
    assert overlap.shares_cores(master, cores=cores) is shares


def rec(txid: int) -> CommitRecord:
    return CommitRecord(txid, {"t": {0: 10 * txid}})


def test_a_sink_one_batch_behind_replays_the_checkpoints_last_batch():
    # checkpoint: last committed batch 7, txid base 100 -> txid 107; the sink has 106
    assert decide(7, 100, True, {"s": rec(106)}, replayable=True) == Resume(100, replay_last=7)
    # one sink has it, the other not: the batch runs again, the first skips it by txid
    assert decide(7, 100, True, {"a": rec(107), "b": rec(106)}, replayable=True) == Resume(
        100, replay_last=7)
    # the first batch: a sink without a record
    assert decide(0, 0, True, {"s": None}, replayable=True) == Resume(0, replay_last=0)


def test_other_lags_keep_the_resume_from_the_sink():
    two_behind = decide(7, 100, True, {"s": rec(105)}, replayable=True)
    assert two_behind.replay_last is None and two_behind.from_sink == "s"
    assert two_behind.reset_checkpoint and two_behind.txid_base == 106
    not_replayable = decide(7, 100, True, {"s": rec(106)})
    assert not_replayable.replay_last is None and not_replayable.from_sink == "s"
    emptied = decide(3, 0, True, {"s": None}, replayable=True)
    assert emptied.replay_last is None and emptied.reset_checkpoint
    assert decide(7, 100, True, {"s": rec(107)}, replayable=True) == Resume(100)


def write_log(checkpoint: Path, kind: str, batch: int) -> None:
    (checkpoint / kind).mkdir(parents=True, exist_ok=True)
    (checkpoint / kind / str(batch)).write_text("v1\n{}\n")


def test_replay_last_batch_leaves_spark_the_batch_to_run_again(tmp_path: Path):
    checkpoint = tmp_path / "cp"
    for batch in range(4):
        write_log(checkpoint, "offsets", batch)
    for batch in range(3):
        write_log(checkpoint, "commits", batch)
    (checkpoint / "offsets" / ".3.crc").write_text("x")  # a checksum file goes with its log
    # batch 2 committed by Spark, not by the sinks; batch 3 planned, not run
    removed = replay_last_batch(checkpoint, 2)
    assert sorted(removed) == ["commits/2", "offsets/.3.crc", "offsets/3"]
    assert last_committed_batch(checkpoint) == 1
    assert next_batch_id(checkpoint) == 3  # batch 2's offsets stay: Spark re-runs them


def test_progress_tells_the_commit_time_from_the_part_the_batch_waited_for():
    from kstorm._runtime.progress import Progress

    progress = Progress()
    progress.batch_committed(0, {}, 0.030, blocking=0.010)  # overlapped: the sinks ran after
    progress.batch_committed(1, {}, 0.020)  # committed inside its batch: all of it
    snap = progress.snapshot()
    assert snap["commit_seconds"] == pytest.approx(0.050)
    assert snap["commit_blocking_seconds"] == pytest.approx(0.030)
