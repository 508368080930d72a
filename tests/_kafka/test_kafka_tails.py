"""Confirmed end offsets against a tansu-like broker (short high watermark, one batch per fetch).

The embedded broker reports the base offset of a partition's last record batch + 1 as its
high watermark and answers a fetch with one record batch; a partition being written to never
shows its end. :func:`kstorm._kafka.client.latest_offsets` must neither chase such a
partition until the tail timeout nor ever stop reading a partition whose end it did not see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError

from kstorm._kafka import client


@dataclass
class _Msg:
    where: tuple[str, int, int]
    eof: bool = False

    def topic(self) -> str:
        return self.where[0]

    def partition(self) -> int:
        return self.where[1]

    def offset(self) -> int:
        return self.where[2]

    def error(self) -> KafkaError | None:
        return KafkaError(KafkaError._PARTITION_EOF) if self.eof else None


@dataclass
class _Tansu:
    """Record batches per partition on a fake clock; ``writing`` adds a batch per 10 ms.

    Like librdkafka, one ``consume`` hands over at most ``per_call`` records of a partition,
    so a read can stop inside a record batch.
    """

    batches: dict[tuple[str, int], list[tuple[int, int]]]  # (base offset, record count)
    now: float = 0.0
    writing: bool = False
    fetches: int = 0
    per_call: int = 4
    position: dict[tuple[str, int], int] = field(default_factory=dict)
    told_eof: set[tuple[str, int]] = field(default_factory=set)

    def end(self, key: tuple[str, int]) -> int:
        base, count = self.batches[key][-1]
        return base + count

    def high_watermark(self, key: tuple[str, int]) -> int:
        return self.batches[key][-1][0] + 1  # tansu: the last batch's base offset + 1

    def clock(self) -> float:
        return self.now

    def assign(self, tps: list) -> None:
        self.position = {(tp.topic, tp.partition): tp.offset for tp in tps}
        self.told_eof = set()

    def unassign(self) -> None:
        self.position = {}

    def consume(self, n: int, timeout: float) -> list[_Msg]:
        self.fetches += 1
        self.now += 0.01
        if self.writing:
            for key in self.batches:
                self.batches[key].append((self.end(key), 5))
        out: list[_Msg] = []
        for key, at in self.position.items():
            batch = next(((b, c) for b, c in self.batches[key] if at < b + c), None)
            if batch is None:
                if key not in self.told_eof:
                    out.append(_Msg((*key, at), eof=True))
                    self.told_eof.add(key)
                continue
            base, count = batch
            upto = min(base + count, max(at, base) + self.per_call)
            out += [_Msg((*key, offset)) for offset in range(max(at, base), upto)]
            self.position[key] = upto
            self.told_eof.discard(key)
        return out

    def ends(self, bootstrap: str, **kwargs: float) -> dict[tuple[str, int], int]:
        high = {key: self.high_watermark(key) for key in self.batches}
        return client.latest_offsets(self, high, bootstrap=bootstrap,  # type: ignore[arg-type]
                                     clock=self.clock, **kwargs)


def _broker() -> _Tansu:
    return _Tansu({("t", 0): [(0, 50), (50, 8)], ("t", 1): [(0, 10)]})


def test_a_quiet_partition_is_read_to_its_end_once_and_then_left_alone() -> None:
    broker = _broker()
    assert broker.high_watermark(("t", 0)) == 51  # short: the partition ends at 58
    assert broker.ends("quiet") == {("t", 0): 58, ("t", 1): 10}
    fetches = broker.fetches
    assert broker.ends("quiet") == {("t", 0): 58, ("t", 1): 10}
    assert broker.fetches == fetches  # the end was seen: nothing to read again


def test_a_partition_being_written_to_is_not_chased_until_the_timeout() -> None:
    broker = _broker()
    broker.writing = True
    started = broker.now
    ends = broker.ends("busy")
    assert broker.now - started <= client.TAIL_CHASE + 0.05
    assert ends[("t", 0)] >= 58 and ends[("t", 1)] >= 10  # what existed when asked
    assert ends[("t", 0)] <= broker.end(("t", 0))  # never past what exists


def test_a_read_cut_short_is_redone_until_the_end_is_seen_even_behind_a_short_high_watermark(
) -> None:
    broker = _broker()
    broker.writing = True
    for _ in range(5):
        broker.ends("stops")
    broker.writing = False  # writes stop: the high watermark stays short of the end for good
    final = {key: broker.end(key) for key in broker.batches}
    assert all(broker.high_watermark(key) < end for key, end in final.items())
    answers = [broker.ends("stops") for _ in range(2)]
    assert answers[-1] == final  # the partition does not stay stuck behind its watermark


def test_a_read_cut_short_inside_the_last_record_batch_is_not_taken_for_the_end() -> None:
    broker = _broker()  # t[0]'s last batch holds 50..57, its high watermark says 51
    first = broker.ends("inside", chase=0.0)  # stops after the first 4 records of that batch
    assert first[("t", 0)] == 54
    later = [broker.ends("inside", chase=0.0)[("t", 0)] for _ in range(3)]
    assert later == [57, 58, 58]  # read again, on from 54: 54 was not the end


def test_an_available_now_target_reads_every_tail_to_its_end() -> None:
    broker = _broker()
    broker.writing = True
    started = broker.now
    ends = broker.ends("target", chase=client.TAIL_TIMEOUT)
    assert broker.now - started >= client.TAIL_TIMEOUT - 0.05  # followed the writes throughout
    assert ends[("t", 0)] > 58 + 400


@pytest.mark.parametrize("writing", [False, True])
def test_the_answer_never_goes_below_the_batch_start(writing: bool) -> None:
    broker = _broker()
    broker.writing = writing
    high = {key: broker.high_watermark(key) for key in broker.batches}
    known = {("t", 0): 58, ("t", 1): 10}
    ends = client.latest_offsets(broker, high, known, bootstrap=f"floor-{writing}",  # type: ignore[arg-type]
                                 clock=broker.clock)
    assert all(ends[key] >= known[key] for key in known)


def _write_between_answers(broker: _Tansu) -> None:
    """A producer appends one 5-record batch to every partition."""
    for key in broker.batches:
        broker.batches[key].append((broker.end(key), 5))


def test_a_partition_whose_watermark_moved_since_the_last_answer_is_not_followed() -> None:
    """A busy partition costs one fetch, not the chase: its first answer is taken."""
    broker = _broker()
    broker.writing = True
    broker.ends("moving")  # first answer: followed for up to the chase
    fetches, started = broker.fetches, broker.now
    ends = broker.ends("moving")  # the watermarks moved meanwhile
    assert broker.fetches - fetches == 1 and broker.now - started < client.TAIL_CHASE
    assert all(ends[key] > broker.high_watermark(key) - 5 for key in ends)  # read past them
    assert all(ends[key] <= broker.end(key) for key in ends)


def test_a_partition_that_stops_moving_is_read_to_its_end_at_the_next_answer() -> None:
    broker = _broker()
    broker.ends("stops-moving")
    for _ in range(3):
        _write_between_answers(broker)
        broker.ends("stops-moving")
    final = {key: broker.end(key) for key in broker.batches}
    assert all(broker.high_watermark(key) < end for key, end in final.items())
    assert broker.ends("stops-moving") == final  # the writes stopped: tails read
    fetches = broker.fetches
    assert broker.ends("stops-moving") == final
    assert broker.fetches == fetches  # confirmed: left alone


def test_a_moving_partition_read_short_is_never_taken_for_confirmed() -> None:
    """Its first answer is not remembered as an end: the next answer reads on from it."""
    broker = _broker()
    broker.ends("never-confirmed")
    _write_between_answers(broker)
    first = broker.ends("never-confirmed")[("t", 0)]  # moving: one fetch of 4 of 5 records
    assert first < broker.end(("t", 0))
    assert client._KNOWN_ENDS.get(("never-confirmed", "t", 0), 0) < broker.end(("t", 0))
    assert broker.ends("never-confirmed")[("t", 0)] == broker.end(("t", 0))


def test_every_tail_follows_moving_partitions_too() -> None:
    """An available-now target and a start at latest need today's ends, now."""
    broker = _broker()
    broker.ends("every")
    _write_between_answers(broker)  # the watermarks move ...
    broker.writing = True  # ... and go on moving
    started = broker.now
    high = {key: broker.high_watermark(key) for key in broker.batches}
    client.latest_offsets(broker, high, bootstrap="every",  # type: ignore[arg-type]
                          clock=broker.clock, every_tail=True, chase=client.TAIL_TIMEOUT)
    assert broker.now - started >= client.TAIL_TIMEOUT - 0.05  # followed throughout
