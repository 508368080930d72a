"""The Kafka spout as a PySpark streaming data source (``format("kstorm_kafka")``).

A micro-batch is a Storm transaction (seed 002): Spark asks :meth:`latestOffset` where the
next batch ends, writes ``{topic: {"partition": next_offset}}`` to its offset log, then plans
one read task per topic-partition range (:meth:`partitions`) and runs them on executors
(:meth:`read`). A replayed batch has the same offsets, so it reads the same records.

The reader object is created on the driver and pickled to executors: it holds only plain
values. Kafka clients are created inside the methods (driver clients are cached in
``kstorm._kafka``, executor consumers live for one read task).

Example:
    >>> df = read_stream(spark, KafkaSpout("clicks", bootstrap_servers="127.0.0.1:9092"))
    ... # doctest: +SKIP
    >>> df.writeStream.format("memory").queryName("clicks").start()  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa
from confluent_kafka import Consumer
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kstorm._kafka import client as _kafka
from kstorm._kafka.clocks import CLOCKS_KEY, clock_of, due_mark, stream_clocks
from kstorm._kafka.fetch import read_range
from kstorm._kafka.offsets import (
    OffsetRange,
    Offsets,
    TopicPartition,
    from_json,
    group_ranges,
    plan_end,
    split_ranges,
    to_json,
)
from kstorm._runtime.envelope import ATTEMPT_COLUMN, CLOCK_COLUMN, PLANNED_COLUMN
from kstorm._spark.speedups.gc_control import freeze_imports
from kstorm.acking.replay import SpoutBook, next_batch, read_marks
from kstorm.acking.replay import marks as acking_marks
from kstorm.errors import ConfigError
from kstorm.kafka.spout import EARLIEST, LATEST, KafkaSpout

FORMAT = "kstorm_kafka"
Marks = tuple[int, int]  # (low, high) watermark
log = logging.getLogger("kstorm.kafka")
CLOCKS_OPTION = "kstorm.clocks_file"
FUSED_OPTION = "kstorm.fused_stage"  # a stage run inside read(): rows never reach the JVM
ACK_ON_EMIT_OPTION = "kstorm.ack_on_emit"  # at most once, a spout with its own ack: "1"
ACKING_OPTION = "kstorm.acking"  # tracked spout (at-least-once): {"book": path, "max_pending"}
# A read task's fixed cost (a Spark task, its Python worker round trip, a fetch) is ~20-35
# ms on 2 cores: ranges shorter than this are read several to a task. At 20,000 offsets a
# batch over 4 partitions runs as 2 tasks instead of 4 (two waves on 2 cores).
MIN_OFFSETS_PER_TASK = 10_000


def spark_schema(spout: KafkaSpout) -> StructType:
    """The Spark schema of the rows ``spout`` produces (from its Arrow schema)."""
    return from_arrow_schema(spout.arrow_schema())


class KafkaInputPartition(InputPartition):
    """One read task: ``(range, clock)`` pairs, read one after the other.

    Each range is an :class:`OffsetRange` of one topic-partition; ``clock`` is that
    partition's latest event timestamp before the range, recorded with the batch's offsets
    when a windowed aggregate reads this spout (None otherwise or unknown). ``more``: the
    partitions whose range ends before the records the planner saw (the batch was capped:
    the stream is catching up), whose read consumer is kept for their next range.
    """

    def __init__(self, ranges: list[tuple[OffsetRange, int | None]],
                 now: int | None = None, more: frozenset[tuple[str, int]] = frozenset()
                 ) -> None:
        super().__init__((ranges, now, more))


class KafkaRetryPartition(InputPartition):
    """One read task re-emitting failed records of one topic-partition (at-least-once).

    ``retries`` are ``(offset, attempt)`` pairs taken from the batch's end offsets, so a
    replay of the batch re-reads exactly the same records with the same attempts.
    """

    def __init__(self, topic: str, partition: int, retries: list[tuple[int, int]],
                 now: int | None) -> None:
        super().__init__((topic, partition, sorted(retries), now))


class KafkaDataSource(DataSource):
    """``spark.readStream.format("kstorm_kafka")``; options come from ``KafkaSpout``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def schema(self) -> StructType:
        """Schema derived from the spout's serdes and the Kafka metadata fields."""
        return spark_schema(KafkaSpout.from_options(self.options))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        """A stream reader for the spout in the options."""
        return KafkaStreamReader(KafkaSpout.from_options(self.options), schema,
                                 self.options.get(CLOCKS_OPTION),
                                 self.options.get(FUSED_OPTION),
                                 self.options.get(ACKING_OPTION),
                                 self.options.get(ACK_ON_EMIT_OPTION) == "1")


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans batches of Kafka offsets and reads them (see the module docstring)."""

    def __init__(self, spout: KafkaSpout, schema: StructType,
                 clocks_file: str | None = None, fused: str | None = None,
                 acking: str | None = None, ack_on_emit: bool = False) -> None:
        self.spout = spout
        self.clocks_file = clocks_file
        # The first stage, when it reads this spout alone (e.g. a windowed aggregate's
        # partials): run in the read task, so only its small output crosses into the JVM.
        # Kept pickled until a read task runs it: Spark's planner processes, which build
        # readers too, then never import the stage's code (the user's bolts and what they
        # import).
        self.fused = fused
        # a cache key of confirmed ends (raises ConfigError if the spout has no brokers)
        self.bootstrap: str = spout.resolved_connection().bootstrap_servers
        # At-least-once: the commit phase's SpoutBook (un-acked tuples, retries) for this spout.
        self.acking: dict[str, Any] | None = json.loads(acking) if acking else None
        # At most once: seed 003's ack right after emit, on the read task's copy of a spout
        # that overrides ack (the default does nothing: no per-record call then).
        self.ack_on_emit = ack_on_emit
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        # Driver-only bookkeeping (plain values; the reader is pickled to executors).
        self._known: list[TopicPartition] = []
        self._discovered_at: float | None = None
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._committed: dict | None = None  # last offsets told to the consumer group
        self._planned = False  # whether this run planned a batch yet (first-batch ramp-up)

    # -- driver: offsets -------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Start offsets per ``starting_offsets`` (clamped to what the brokers still hold)."""
        partitions = self._discover(force=True)
        low = {tp: lo for tp, (lo, _) in self._watermarks(partitions).items()}
        start = self.spout.starting_offsets
        if start == "earliest":
            return to_json(low)
        if start == "latest":
            return to_json(self._latest_offsets(partitions))
        if start == "group":
            group = _kafka.driver_consumer(
                self.spout.client_config("group", group_id=self.spout.group_id))
            committed = _kafka.committed_offsets(group, partitions)
            chosen = {tp: committed.get(tp) for tp in partitions}
        else:  # an explicit {topic: {partition: offset}} map (validated by KafkaSpout)
            explicit = cast(Mapping[str, Mapping[int, int]], start)
            chosen = {(t, p): explicit.get(t, {}).get(p) for t, p in partitions}
            if any(v == LATEST for v in chosen.values()):
                latest = self._latest_offsets(partitions)
                chosen = {tp: latest[tp] if v == LATEST else v for tp, v in chosen.items()}
        offsets: Offsets = {}
        for tp, offset in chosen.items():
            if offset is not None and offset != EARLIEST and offset < low[tp]:
                log.warning(
                    "kafka spout: %s[%s] start %s was deleted; starting at %s", *tp, offset, low[tp]
                )
            offsets[tp] = low[tp] if offset is None or offset == EARLIEST else max(offset, low[tp])
        return to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(max_offsets_per_batch)``, or everything available."""
        cap = self.spout.max_offsets_per_batch
        return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """End of the next batch: confirmed ends, capped fairly; new partitions join.

        ``start`` is the end of the last batch Spark completed (batches run one at a time),
        so it is also what the consumer group is told (Spark's own ``commit`` call for a
        batch only comes when the *next* batch is planned, which never happens for the last
        batch of an available-now run).
        """
        book = self._book()
        self._commit_group(start if self.acking is None else None, book)
        begin = from_json(start)
        partitions = sorted(set(begin) | set(self._discover()))
        marks = self._watermarks(partitions)
        latest = _kafka.latest_offsets(
            self._consumer(),
            {tp: hi for tp, (_, hi) in marks.items()},
            begin,
            bootstrap=self.bootstrap,
        )
        earliest = {tp: lo for tp, (lo, _) in marks.items() if tp not in begin}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ramp = self.spout.first_batch_max_offsets
        if cap is not None and ramp is not None and not self._planned:
            cap = min(cap, ramp)  # ramp-up: the first batch after a start is small
        self._latest = latest
        if book is None:
            end = plan_end(begin, latest, earliest, cap, self._target)
            if end == begin:
                return self._due(start)
            self._planned = True
            return {**to_json(end), **stream_clocks(self.clocks_file)}
        # At-least-once: max.spout.pending limits new offsets; due retries and timeouts make
        # a batch even without new records (available-now waits for them: nothing may be
        # left un-acked when the run ends).
        def new_end(new_cap: int | None) -> tuple[Offsets, bool]:
            limit_new = cap if new_cap is None else min(cap or new_cap, new_cap)
            end = plan_end(begin, latest, earliest, limit_new, self._target)
            return end, end != begin

        found = next_batch(book, self.acking.get("max_pending") if self.acking else None,
                           new_end, waits=self._target is not None,
                           clock_ms=lambda: int(time.time() * 1000), sleep=time.sleep)
        if found is None:
            return self._due(start)
        now, plan, end = found
        self._planned = True
        tracked = acking_marks(now, plan.retries)
        return {**to_json(end), **stream_clocks(self.clocks_file), **tracked}

    def _due(self, start: dict) -> dict:
        """Nothing new: ``start`` (no batch), or a batch without input if one is due.

        Due: a windowed aggregate's processing-time session is to close (``due_mark``); not
        in an available-now run, which ends when the input is drained.
        """
        if self._target is not None:
            return start
        due = due_mark(self.clocks_file, int(time.time() * 1000))
        if not due:
            return start
        return {**to_json(from_json(start)), **stream_clocks(self.clocks_file), **due}

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: the batches of an available-now run stop at today's ends."""
        self._target = self._latest_offsets(self._discover(force=True))

    def reportLatestOffset(self) -> dict | None:
        """The ends seen by the last :meth:`latestOffset` (for query progress)."""
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The batch's read tasks: its non-empty ranges, grouped.

        Ranges are packed into tasks of at least :data:`MIN_OFFSETS_PER_TASK` offsets, or
        each split by ``max_offsets_per_task`` when the spout sets it.
        """
        clocks = end.get(CLOCKS_KEY, {})
        if clocks and self.spout.max_offsets_per_task is not None:
            msg = ("kafka spout: max_offsets_per_task cannot split partitions read by a "
                   "windowed aggregate (lateness is decided in offset order)")
            raise ConfigError(msg)
        ranges = split_ranges(from_json(start), from_json(end), self.spout.max_offsets_per_task)
        groups = (group_ranges(ranges, MIN_OFFSETS_PER_TASK)
                  if self.spout.max_offsets_per_task is None else [[r] for r in ranges])
        now, retries = read_marks(end)
        # Which ranges stop short of what this reader saw when it planned the batch (none
        # when a restart re-plans it): only a read consumer's speed depends on it.
        latest = self._latest or {}
        parts: list[InputPartition] = [
            KafkaInputPartition([(r, clock_of(clocks, f"{r.topic}/{r.partition}"))
                                 for r in group], now,
                                frozenset((r.topic, r.partition) for r in group
                                          if latest.get((r.topic, r.partition), -1) > r.end))
            for group in groups]
        by_partition: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        for topic, partition, offset, attempt in retries:
            by_partition[(topic, partition)].append((offset, attempt))
        parts += [KafkaRetryPartition(t, p, found, now)
                  for (t, p), found in sorted(by_partition.items())]
        return parts

    def commit(self, end: dict) -> None:
        """Record progress in the consumer group (if any) without joining it; never fails."""
        if self.acking is None:
            self._commit_group(end)
        else:
            self._commit_group(None, self._book())

    # -- executors -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one range as Arrow batches with the query's schema."""
        freeze_imports()
        if isinstance(partition, KafkaRetryPartition):
            yield from self._read_retries(*partition.value)
            return
        ranges, now, more = partition.value
        batches = self._ranges(ranges, now, more)
        if self.fused is not None:
            yield from pickle.loads(base64.b64decode(self.fused))(batches)
            return
        for batch in batches:
            yield batch if batch.schema.equals(self.arrow_schema) else batch.cast(self.arrow_schema)

    def _ranges(self, ranges: list[tuple[OffsetRange, int | None]], now: int | None,
                more: frozenset[tuple[str, int]] = frozenset()) -> Iterator[pa.RecordBatch]:
        """The records of a read task's ranges, one range after the other."""
        for task, clock in ranges:
            records = read_range(self.spout, task, keep=(task.topic, task.partition) in more)
            if self.ack_on_emit:
                records = _acked_on_emit(self.spout, records)
            yield from self._with_clock(records, clock, now)

    def _read_retries(self, topic: str, partition: int, retries: list[tuple[int, int]],
                      now: int | None) -> Iterator[pa.RecordBatch]:
        """The records to re-emit, read in runs of consecutive offsets."""
        attempts = dict(retries)
        offsets = sorted(attempts)
        runs: list[list[int]] = []
        for offset in offsets:
            if runs and runs[-1][1] == offset:
                runs[-1][1] = offset + 1
            else:
                runs.append([offset, offset + 1])
        for lo, hi in runs:
            task = OffsetRange(topic, partition, lo, hi)
            for batch in self._with_clock(read_range(self.spout, task), None, now, attempts):
                yield (batch if batch.schema.equals(self.arrow_schema)
                       else batch.cast(self.arrow_schema))

    def _with_clock(self, batches: Iterator[pa.RecordBatch], clock: int | None,
                    now: int | None = None, attempts: dict[int, int] | None = None
                    ) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if self.clocks_file is not None:
                batch = batch.append_column(CLOCK_COLUMN, pa.array([clock] * batch.num_rows,
                                                                   pa.int64()))
            if self.acking is not None:
                n = batch.num_rows
                if attempts is None:
                    attempt = pa.repeat(pa.scalar(0, pa.int32()), n)
                else:
                    offsets = batch.column("offset").to_pylist()
                    attempt = pa.array([attempts.get(o, 0) for o in offsets], pa.int32())
                batch = batch.append_column(ATTEMPT_COLUMN, attempt)
                batch = batch.append_column(PLANNED_COLUMN,
                                            pa.repeat(pa.scalar(now, pa.int64()), n))
            yield batch

    # -- helpers ---------------------------------------------------------------------------

    def _consumer(self) -> Consumer:
        return _kafka.driver_consumer(self.spout.client_config("consumer"))

    def _commit_group(self, offsets: dict | None, book: SpoutBook | None = None) -> None:
        """Tell the group ``offsets``, or (at-least-once) the book's committable offsets.

        The committable offset of a partition never passes an un-acked record.
        """
        if offsets is None:
            if book is None:
                return
            offsets = to_json(book.committable)
        if self.spout.group_id is None or offsets == self._committed:
            return
        group = _kafka.driver_consumer(
            self.spout.client_config("group", group_id=self.spout.group_id))
        if _kafka.commit_offsets(group, from_json(offsets)):
            self._committed = offsets

    def _book(self) -> SpoutBook | None:
        """The commit phase's latest book for this spout (tracked spouts only)."""
        return None if self.acking is None else SpoutBook.load(self.acking["book"])

    def _discover(self, force: bool = False) -> list[TopicPartition]:
        now = time.monotonic()
        due = self._discovered_at is None or (
            now - self._discovered_at >= self.spout.metadata_refresh_secs
        )
        if force or due:
            self._known = _kafka.partitions_of(self._consumer(), self.spout.subscribes)
            self._discovered_at = now
            missing = set(self.spout.topics or ()) - {topic for topic, _ in self._known}
            if missing and force:
                log.warning("kafka spout: topic(s) %s do not exist (yet)", sorted(missing))
        return self._known

    def _watermarks(self, partitions: list[TopicPartition]) -> dict[TopicPartition, Marks]:
        return _kafka.watermarks(self._consumer(), partitions)

    def _latest_offsets(self, partitions: list[TopicPartition]) -> Offsets:
        """Today's ends, every tail read to its end (a start at latest, an available-now target)."""
        marks = self._watermarks(partitions)
        return _kafka.latest_offsets(
            self._consumer(),
            {tp: hi for tp, (_, hi) in marks.items()},
            bootstrap=self.bootstrap,
            chase=_kafka.TAIL_TIMEOUT,
            every_tail=True,
        )


def _acked_on_emit(spout: KafkaSpout, batches: Iterator[pa.RecordBatch]
                   ) -> Iterator[pa.RecordBatch]:
    """At most once: each record's ``spout.ack((topic, partition, offset))`` once emitted.

    Storm's spout executor acks a tuple right after emit when there are no ackers (seed
    003); here a record is emitted when the read task hands its batch on.
    """
    for batch in batches:
        yield batch
        if batch.num_rows:
            topic = batch.column("topic")[0].as_py()
            partition = batch.column("partition")[0].as_py()
            for offset in batch.column("offset").to_pylist():
                spout.ack((topic, partition, offset))


def register(spark: SparkSession) -> None:
    """Register the ``kstorm_kafka`` format with ``spark`` (idempotent)."""
    spark.dataSource.register(KafkaDataSource)


def read_stream(spark: SparkSession, spout: KafkaSpout,
                clocks_file: str | None = None, fused: Any = None,
                fused_schema: str | None = None,
                acking: dict[str, Any] | None = None, ack_on_emit: bool = False) -> DataFrame:
    """A streaming DataFrame of ``spout``'s records (columns: ``spout.arrow_schema()``).

    With ``clocks_file`` (written by a windowed aggregate's commit phase), each batch's
    offsets also record the partitions' latest event timestamps, and rows carry the one of
    their partition in ``__pmax0``.
    """
    register(spark)
    schema = spark_schema(spout)
    options = spout.to_options(dumps=cloudpickle.dumps)
    if clocks_file is not None:
        schema = schema.add(CLOCK_COLUMN, "long")
        options[CLOCKS_OPTION] = clocks_file
    if ack_on_emit and type(spout).ack is not KafkaSpout.ack:
        options[ACK_ON_EMIT_OPTION] = "1"
    if acking is not None:  # at-least-once: which attempt each row is, and the batch's time
        schema = schema.add(ATTEMPT_COLUMN, "integer").add(PLANNED_COLUMN, "long")
        options[ACKING_OPTION] = json.dumps(acking)
    if fused is not None:
        options[FUSED_OPTION] = base64.b64encode(cloudpickle.dumps(fused)).decode()
        return spark.readStream.format(FORMAT).schema(fused_schema).options(**options).load()
    return spark.readStream.format(FORMAT).schema(schema).options(**options).load()
