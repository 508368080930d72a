"""Read consumers kept between ranges (``kstorm._kafka.fetch._Kept``), on a fake partition.

Which consumer reads a range must never change its rows: a kept consumer that is behind
drops what precedes the range, one that is ahead (or too far behind) is not used, and one
is kept only when the planner capped the batch (``keep``: the stream is catching up).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

import kstorm._kafka.fetch as fetch
from kstorm._kafka.offsets import OffsetRange
from kstorm.kafka.spout import KafkaSpout
from serdes.string import StringSerde


class Message:
    def __init__(self, offset: int, error: KafkaError | None = None) -> None:
        self._offset, self._error = offset, error

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return f"v{self._offset}".encode()

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def headers(self) -> None:
        return None

    def error(self) -> KafkaError | None:
        return self._error


class Partition:
    """One partition's offsets (gaps: transaction markers, compaction) and its low mark."""

    def __init__(self, offsets: list[int], low: int = 0) -> None:
        self.offsets, self.low = offsets, low
        self.made: list[FakeConsumer] = []

    def consumer(self, config: dict[str, Any]) -> FakeConsumer:
        made = FakeConsumer(self)
        self.made.append(made)
        return made


class FakeConsumer:
    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.at: int | None = None
        self.assigned: list[int] = []
        self.closed = False

    def assign(self, parts: list) -> None:
        self.at = parts[0].offset
        self.assigned.append(self.at)

    def consume(self, n: int, timeout: float) -> list[Message]:
        assert self.at is not None and not self.closed
        if self.at < self.partition.low:
            return [Message(-1, KafkaError(KafkaError.OFFSET_OUT_OF_RANGE))]
        got = [o for o in self.partition.offsets if o >= self.at][:n]
        if got:
            self.at = got[-1] + 1
        return [Message(o) for o in got]

    def position(self, parts: list) -> list:
        return [type("TP", (), {"offset": self.at})()]

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def kept(monkeypatch) -> fetch._Kept:
    made = fetch._Kept()
    monkeypatch.setattr(fetch, "_KEPT", made)
    monkeypatch.setattr(fetch, "_close_aside", lambda consumers: [c.close() for c in consumers])
    return made


def use(monkeypatch, partition: Partition) -> Partition:
    monkeypatch.setattr(fetch, "Consumer", partition.consumer)
    return partition


SPOUT = KafkaSpout("t", bootstrap_servers="b:9092", value_serde=StringSerde(), read_timeout=1)


def read(start: int, end: int, keep: bool = True) -> list[int]:
    return [o for batch in fetch.read_range(SPOUT, OffsetRange("t", 0, start, end), keep=keep)
            for o in batch.column("offset").to_pylist()]


def test_catching_up_the_next_range_reads_on_the_same_consumer(monkeypatch, kept):
    log = use(monkeypatch, Partition(list(range(100))))

    assert read(0, 10) == list(range(10))
    assert read(10, 20) == list(range(10, 20))
    assert read(20, 30) == list(range(20, 30))

    (only,) = log.made
    assert only.assigned == [0] and not only.closed


def test_at_the_tail_the_consumer_is_closed(monkeypatch, kept):
    log = use(monkeypatch, Partition(list(range(100))))

    assert read(0, 10, keep=False) == list(range(10))  # the batch was not capped
    assert read(10, 20, keep=False) == list(range(10, 20))

    assert len(log.made) == 2 and all(c.closed for c in log.made)


def test_a_consumer_a_range_behind_drops_what_precedes_the_range(monkeypatch, kept):
    log = use(monkeypatch, Partition(list(range(100))))

    read(0, 10)  # the next range went to another worker
    assert read(20, 30) == list(range(20, 30))
    assert len(log.made) == 1


def test_a_consumer_ahead_or_far_behind_is_not_used(monkeypatch, kept):
    log = use(monkeypatch, Partition(list(range(100_000))))

    read(0, 10)
    assert read(0, 10) == list(range(10))  # a replay: the kept one is past its start
    assert log.made[0].closed and len(log.made) == 2
    far = 10 + fetch._Kept.SKIP_MAX + 1
    assert read(far, far + 10) == list(range(far, far + 10))
    assert log.made[1].closed and log.made[2].assigned == [far]


def test_records_read_past_a_range_end_are_not_lost_to_the_next_range(monkeypatch, kept):
    # offsets 4 and 5 are transaction markers: asking for 5 records from 0 returns 0-3 and 6
    log = use(monkeypatch, Partition([0, 1, 2, 3, *range(6, 100)]))

    assert read(0, 5) == [0, 1, 2, 3]
    assert read(5, 10) == [6, 7, 8, 9]  # 6 was delivered (and trimmed) by the first consumer

    assert log.made[0].closed and log.made[1].assigned == [5]


def test_an_error_before_the_range_repositions_a_consumer_behind(monkeypatch, kept):
    log = use(monkeypatch, Partition(list(range(100))))
    read(0, 10)
    log.low = 15  # retention deleted 10-14 since: the range [20, 30) is whole

    assert read(20, 30) == list(range(20, 30))
    assert log.made[0].assigned == [0, 20]


def test_an_abandoned_read_closes_its_consumer(monkeypatch, kept):
    log = use(monkeypatch, Partition(list(range(100_000))))

    batches = fetch.read_range(SPOUT, OffsetRange("t", 0, 0, 30_000), keep=True)
    next(batches)
    batches.close()

    assert log.made[0].closed and not kept._consumers


def test_kept_consumers_are_bounded_and_closed_when_idle(monkeypatch, kept):
    made: list[FakeConsumer] = []
    partitions = {p: Partition(list(range(100))) for p in range(3)}
    monkeypatch.setattr(fetch, "Consumer", lambda config: made.append(
        FakeConsumer(partitions[len(made)])) or made[-1])
    kept.KEEP_MAX = 2
    for p in range(3):
        list(fetch.read_range(SPOUT, OffsetRange("t", p, 0, 10), keep=True))

    assert [c.closed for c in made] == [True, False, False]  # the least recently used
    kept.IDLE_S = -1.0
    list(fetch.read_range(SPOUT, OffsetRange("t", 2, 10, 20), keep=True))
    assert made[1].closed and not made[2].closed


def test_consumers_no_task_uses_are_closed_off_the_tasks_path():
    import threading

    started = threading.Event()

    class Slow:  # a close that waits for a long poll in flight
        closed = False

        def close(self) -> None:
            started.set()
            assert threading.current_thread() is not threading.main_thread()
            self.closed = True

    consumer = Slow()
    fetch._close_aside([consumer])
    assert started.wait(5.0)
