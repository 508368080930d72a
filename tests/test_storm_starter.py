"""storm-starter's topologies, ported as written (``examples/storm_starter/``), on the test
driver: each gives Storm's output, computed here independently of the port (#42).

One difference shows in the volumes, not in the rules checked: a free-form spout
(``next_tuple``) runs as one instance whatever its parallelism (``docs/limits.md``), so
``TestWordSpout`` with 10 tasks emits ``limit`` words, not ten times that.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, ClassVar

import pytest

from examples.storm_starter import (
    anchored_word_count,
    exclamation,
    rolling_top_words,
    single_join,
    word_count,
)
from examples.storm_starter.tools import RankableObjectWithFields, Rankings, RotatingMap
from kstorm import FailedException, Fields, Values
from kstorm.testing import FeederSpout, TopologyTestDriver


def test_exclamation_appends_three_bangs_per_bolt_to_every_word() -> None:
    with TopologyTestDriver(exclamation.build(limit=40, seed=3).create_topology()) as driver:
        driver.run()
        words = [w for (w,) in driver.output("word")]
        assert len(words) == 40
        assert Counter(w for (w,) in driver.output("exclaim1")) == Counter(
            w + "!!!" for w in words)
        assert Counter(w for (w,) in driver.output("exclaim2")) == Counter(
            w + "!!!!!!" for w in words)


def _final_counts(rows: list[list[Any]]) -> dict[str, int]:
    """Each word's last emitted count, checking each word's counts go 1, 2, 3, ..."""
    seen: dict[str, list[int]] = {}
    for word, count in rows:
        seen.setdefault(word, []).append(count)
    for word, counts in seen.items():
        assert counts == list(range(1, len(counts) + 1)), word
    return {word: counts[-1] for word, counts in seen.items()}


def test_word_count_counts_equal_a_counter_of_the_sentences() -> None:
    topology = word_count.build(limit=60, seed=11, sleep_ms=0).create_topology()
    with TopologyTestDriver(topology) as driver:
        driver.run()
        sentences = [s for (s,) in driver.output("spout")]
        counts = _final_counts(driver.output("count"))
    assert len(sentences) == 60
    assert counts == Counter(w for s in sentences for w in s.split(" "))
    assert topology.components["count"].parallelism == 12


def test_word_count_local_mode_caps_every_component_at_three_tasks() -> None:
    topology = word_count.build(limit=1, is_local=True).create_topology()
    assert {c: s.parallelism for c, s in topology.components.items()} == {
        "spout": 3, "split": 3, "count": 3}


class RecordingSpout(anchored_word_count.RandomSentenceSpout):
    """The ported spout, recording what it emitted and what came back (Storm's ack and
    fail do nothing; the copies the runtime runs share these lists)."""

    emitted: ClassVar[list[tuple[Any, str]]] = []
    acked: ClassVar[list[Any]] = []
    failed: ClassVar[list[Any]] = []

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        real = self._collector

        class Recorder:
            def emit(self, values: Any, msg_id: Any) -> None:
                RecordingSpout.emitted.append((msg_id, values[0]))
                real.emit(values, msg_id)
        self._collector = Recorder()

    def ack(self, id: Any) -> None:  # noqa: A002
        self.acked.append(id)

    def fail(self, id: Any) -> None:  # noqa: A002
        self.failed.append(id)


@pytest.fixture
def recording() -> type[RecordingSpout]:
    RecordingSpout.emitted, RecordingSpout.acked, RecordingSpout.failed = [], [], []
    return RecordingSpout


def test_anchored_word_count_acks_every_sentence_tree(recording: type[RecordingSpout]) -> None:
    spout = recording(limit=50, seed=5, sleep_ms=0)
    topology = anchored_word_count.anchored_word_count(spout).create_topology()
    with TopologyTestDriver(topology, anchored_word_count.conf()) as driver:
        driver.run()
        counts = _final_counts(driver.output("count"))
    sentences = [s for _, s in recording.emitted]
    assert len(sentences) == 50
    assert counts == Counter(w for s in sentences for w in re.split(r"\s+", s))
    assert sorted(recording.acked) == sorted(m for m, _ in recording.emitted)
    assert recording.failed == []


class FailsCowOnce(anchored_word_count.WordCount):
    """Fails the first ``cow`` a task gets (a BasicBolt fails its input by raising)."""

    failed_once: ClassVar[bool] = False

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        if tuple.get_string(0) == "cow" and not FailsCowOnce.failed_once:
            FailsCowOnce.failed_once = True
            raise FailedException("cow")
        super().execute(tuple, collector)


def test_a_word_failed_downstream_fails_its_anchored_sentence_at_the_spout(
        recording: type[RecordingSpout]) -> None:
    """Seed 001: "Since the word tuple is anchored, the spout tuple at the root of the tree
    will be replayed later on if the word tuple failed to be processed downstream" -- the
    spout's ``fail`` gets the sentence's id (this spout, as Storm's, does not re-emit)."""
    FailsCowOnce.failed_once = False
    spout = recording(limit=30, seed=8, sleep_ms=0)
    topology = anchored_word_count.guaranteed_word_count(spout, FailsCowOnce()).create_topology()
    with TopologyTestDriver(topology, anchored_word_count.conf()) as driver:
        driver.run()
        counts = _final_counts(driver.output("count"))
    cows = [m for m, s in recording.emitted if "cow" in s.split(" ")]
    assert len(cows) >= 2
    assert len(recording.failed) == 1 and recording.failed[0] in cows  # that cow's sentence
    assert sorted(recording.acked) == sorted(
        m for m, _ in recording.emitted if m != recording.failed[0])
    expected = Counter(w for _, s in recording.emitted for w in s.split(" "))
    expected["cow"] -= 1  # the failed word tuple was never counted
    assert counts == expected


def _window_counts(batches: list[tuple[int, list[str]]], k: int) -> dict[str, int]:
    """RollingCountBolt(9, 3)'s window at its k-th tick (time 3000k): the words that arrived
    in the 3 emit periods before it (a batch at time t is in period t // 3000)."""
    return dict(Counter(w for t, words in batches if k - 3 <= t // 3000 <= k - 1
                        for w in words))


def test_rolling_top_words_ranks_the_counts_of_the_last_window() -> None:
    """Every ranking ``finalRanker`` emits is the brute-force top 5 of one window's counts.

    Ticks: the counter every 3 s, the rankers every 2 s (their own configuration). A tick
    reaches a bolt before the tuples its upstream emits in the same batch, so the total
    ranking emitted at time T holds what the intermediate rankers emitted at T - 2 s, which
    holds the counter's last window before that: tick k with 3000k < T - 2000.
    """
    topology = rolling_top_words.build(seed=21).create_topology()
    batches: list[tuple[int, list[str]]] = []
    finals: list[tuple[int, Rankings]] = []
    with TopologyTestDriver(topology, {"kstorm.spout.max.batch.tuples": 7}) as driver:
        for step in range(40):
            if step < 25:  # words for 25 s, then the windows drain
                before = len(driver.output("wordGenerator"))
                driver.run(max_batches=1)
                batches.append((driver.now_ms, [w for (w,) in
                                                driver.output("wordGenerator")[before:]]))
            before = len(driver.output("finalRanker"))
            driver.advance_time(1_000)
            finals += [(driver.now_ms, r) for (r,) in driver.output("finalRanker")[before:]]
    assert [t for t, _ in finals] == list(range(2_000, 41_000, 2_000))
    distinct = set()
    for t, rankings in finals:
        ticks = [k for k in range(1, 20) if 3_000 * k < t - 2_000]
        expected = _window_counts(batches, ticks[-1]) if ticks else {}
        ranked = rankings.get_rankings()
        got = {r.get_object(): r.get_count() for r in ranked}
        assert got == expected, t  # 5 words, top 5: every word with a count is ranked
        assert [r.get_count() for r in ranked] == sorted(got.values(), reverse=True)
        distinct.add(tuple(sorted(got.items())))
    everything = Counter(w for _, words in batches for w in words)
    assert tuple(sorted(everything.items())) not in distinct  # the window slid
    assert len(distinct) > 5 and () in distinct  # ... and drained to nothing at the end


def test_rankings_keep_the_top_n_by_count_as_storm_s() -> None:
    rankings = Rankings(2)
    for obj, count in (("a", 1), ("b", 5), ("c", 3), ("a", 7)):
        rankings.update_with(RankableObjectWithFields(obj, count))
    assert [(r.get_object(), r.get_count()) for r in rankings.get_rankings()] == [
        ("a", 7), ("b", 5)]
    rankings.update_with(RankableObjectWithFields("a", 0))
    rankings.prune_zero_counts()
    assert [r.get_object() for r in rankings.get_rankings()] == ["b"]
    with pytest.raises(ValueError, match="topN must be >= 1"):
        Rankings(0)


def _join(gender: list[list[Any]], age: list[list[Any]]) -> list[tuple[Any, ...]]:
    """The brute-force join on ``id``: (gender, age) per id both sides have."""
    return sorted((g, a) for gid, g in gender for aid, a in age if gid == aid)


def test_single_join_emits_the_brute_force_join_of_the_two_feeders() -> None:
    gender_spout = FeederSpout(Fields("id", "gender"))
    age_spout = FeederSpout(Fields("id", "age"))
    topology = single_join.build(gender_spout, age_spout).create_topology()
    with TopologyTestDriver(topology) as driver:
        single_join.feed(gender_spout, age_spout)
        driver.run()
        got = sorted(map(tuple, driver.output("join")))
    genders = [[i, "male" if i % 2 == 0 else "female"] for i in range(10)]
    ages = [[i, i + 20] for i in range(10)]
    assert got == _join(genders, ages)
    assert len(got) == 10


def test_single_join_fails_an_id_that_stays_incomplete_past_the_timeout() -> None:
    """TimeCacheMap-style expiry: the pending map rotates on a tick a second, through
    ``topology.message.timeout.secs`` buckets; an incomplete id's tuples are failed, and a
    side arriving after that waits alone. Run at most once, where a bolt's ``fail`` is only
    counted (``join.failed``): at least once the acker times the tree out at the same
    moment, and exactly once a ``fail`` re-runs the batch (``docs/guarantees.md``)."""
    gender_spout = FeederSpout(Fields("id", "gender"))
    age_spout = FeederSpout(Fields("id", "age"))
    topology = single_join.build(gender_spout, age_spout).create_topology()
    conf = {"topology.message.timeout.secs": 60, "topology.guarantee": "at-most-once"}
    with TopologyTestDriver(topology, conf) as driver:
        gender_spout.feed(Values(1, "male"))
        gender_spout.feed(Values(2, "female"))
        age_spout.feed(Values(2, 30))
        driver.run()
        assert driver.output("join") == [["female", 30]]
        for _ in range(59):  # 59 rotations of 60 buckets: id 1 is still pending
            driver.advance_time(1_000)
        assert driver.counters["join.failed"] == 0
        assert driver.bolt("join")._pending.size() == 1
        driver.advance_time(1_000)  # the 60th, at 60 s: its bucket expires
        assert driver.counters["join.failed"] == 1
        assert driver.bolt("join")._pending.size() == 0
        age_spout.feed(Values(1, 40))
        driver.run()
        assert driver.output("join") == [["female", 30]]  # gender 1 expired: no match


def test_rotating_map_expires_an_entry_at_the_num_buckets_th_rotation() -> None:
    expired: list[tuple[str, int]] = []
    rotating: RotatingMap[str, int] = RotatingMap(3, lambda k, v: expired.append((k, v)))
    rotating.put("a", 1)
    rotating.rotate()
    rotating.put("b", 2)
    assert rotating.rotate() == {} and expired == []
    rotating.rotate()
    assert expired == [("a", 1)] and rotating.contains_key("b")
    rotating.put("b", 3)  # refreshed: back to the newest bucket
    rotating.rotate()
    assert rotating.get("b") == 3 and rotating.size() == 1
