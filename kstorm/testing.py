"""Helpers for testing topologies (Storm's ``testing/``, Bytewax's ``testing.py``).

- :class:`ListSpout`: a replayable spout fed from a list of batches; each batch is one
  micro-batch (one transaction).
- :class:`CaptureSink`: a sink that keeps what it receives, per batch, on the driver.
- :func:`run_to_completion`: run a topology over everything its spouts have, return what
  every component emitted on every stream and what each capture received.
- :class:`ManualClock`: a controllable clock for windowing and timeout logic.
- :class:`TestWordSpout` and :class:`FeederSpout`: Storm's test spouts (random words; tuples
  the test feeds in).
- :func:`sink_context`: what ``BaseSink.open`` gets, to test a sink on its own.
- :class:`TopologyTestDriver`: run a topology in this process, without Spark or a broker:
  pipe tuples in, read what every component emitted (``kstorm/testdriver.py``).
- pytest fixtures (``pytest_plugins = ["kstorm.testing"]`` in the root ``conftest.py``):
  ``kstorm_kafka`` (an embedded broker), ``kstorm_redis`` (an embedded ``redis-server``),
  both per session, and ``kstorm_driver`` (test drivers closed after the test).

Example:
    >>> spout = ListSpout([[("a b",)], [("b",)]], Fields("sentence"))
    >>> builder.set_spout("lines", spout)                      # doctest: +SKIP
    >>> result = run_to_completion(builder.create_topology())  # doctest: +SKIP
    >>> result.emitted["split"]["default"]                     # doctest: +SKIP
    [['a'], ['b'], ['b']]
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kstorm._test_spouts import FeederSpout, TestWordSpout  # noqa: F401 - re-exported
from kstorm.acking.retry import RetryPolicy
from kstorm.component import OutputFieldsDeclarer
from kstorm.config import TopologyConfig
from kstorm.errors import ConfigError, KstormError, TopologyError
from kstorm.sink import BaseSink, Offsets, SinkBatch, SinkContext
from kstorm.spout import BaseRichSpout
from kstorm.testdriver import TopologyTestDriver  # noqa: F401 - re-exported
from kstorm.topology import StormTopology
from kstorm.tuple import Fields, Tuple


class ListSpout(BaseRichSpout):
    """A spout that emits the given batches of rows, one batch per micro-batch.

    Args:
        batches: list of batches; each batch a list of rows; each row a sequence of values
            in ``fields`` order. Values must be Arrow-typeable (str, int, float, bool, bytes,
            lists and dicts of them), with one type per field.
        fields: the output fields.
        partitions: how many Spark partitions (spout tasks) each batch is split into.
        retry: at least once (``topology.guarantee``): when to re-emit a row whose tuple
            tree failed or timed out, and after how many retries it is dead-lettered
            (default, as ``KafkaSpout``'s: storm-kafka-client's backoff, unlimited retries;
            give a bolt that always fails some rows a ``RetryPolicy(max_retries=n)``).

    Row ``i`` of batch ``b`` has the message id ``"b:i"``. At least once each row is tracked
    as a ``KafkaSpout`` record is: a failed or timed-out row is re-emitted, with its message
    id, in a later batch, and a subclass's ``ack(msg_id)``/``fail(msg_id)`` run on the
    driver, on a copy of the spout.
    """

    source_kind = "list"  # read by the runtime's list source, never through next_tuple

    def __init__(self, batches: Sequence[Sequence[Sequence[Any]]], fields: Fields, *,
                 partitions: int = 1, retry: RetryPolicy | None = None) -> None:
        if isinstance(batches, Fields | str) or not isinstance(fields, Fields) and (
                isinstance(fields, str) or not isinstance(fields, Sequence)
                or not all(isinstance(name, str) for name in fields)):
            msg = (f"ListSpout(batches, fields): batches must be a list of batches and fields "
                   f"a Fields or a list of field names, got {batches!r}, {fields!r}")
            raise TopologyError(msg, hint="write ListSpout([[row, ...], ...], Fields('a', 'b'))")
        if not isinstance(fields, Fields):
            fields = Fields(*fields)
        self.fields = fields
        self.batches = [[list(row) for row in batch] for batch in batches]
        self.partitions = partitions
        if retry is not None and not isinstance(retry, RetryPolicy):
            msg = f"ListSpout retry: expected a kstorm.acking.RetryPolicy, got {retry!r}"
            raise ConfigError(msg)
        self.retry = retry
        for b, batch in enumerate(self.batches):
            for r, row in enumerate(batch):
                if len(row) != len(fields):
                    msg = (
                        f"ListSpout batch {b} row {r} has {len(row)} values, "
                                        f"fields are {fields.to_list()}"
                    )
                    raise TopologyError(msg)
        self.schema = self._infer_schema()

    def _infer_schema(self) -> pa.Schema:
        out = []
        for i, name in enumerate(self.fields):
            column = [row[i] for batch in self.batches for row in batch]
            try:
                kind = pa.array(column).type if column else pa.string()
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                msg = (
                    f"ListSpout field {name!r} has values of mixed or "
                                    f"unsupported types: {exc}"
                )
                raise TopologyError(msg) from exc
            out.append(pa.field(name, pa.string() if kind == pa.null() else kind))
        return pa.schema(out)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The given fields on the default stream."""
        declarer.declare(self.fields)


class CaptureSink(BaseSink):
    """A sink that records every tuple it receives, by batch id (on the driver).

    ``batches`` maps batch id -> tuples, ``offsets`` batch id -> the Kafka end offsets,
    ``txids`` batch id -> txid.
    """

    def __init__(self) -> None:
        self.batches: dict[int, list[Tuple]] = {}
        self.offsets: dict[int, Offsets] = {}
        self.txids: dict[int, int] = {}

    def commit(self, batch: SinkBatch) -> None:
        """Record the batch (a replayed batch id replaces the earlier attempt)."""
        self.batches[batch.batch_id] = list(batch.tuples)
        self.offsets[batch.batch_id] = batch.offsets
        self.txids[batch.batch_id] = batch.txid

    @property
    def tuples(self) -> list[Tuple]:
        """All received tuples in batch order."""
        return [t for b in sorted(self.batches) for t in self.batches[b]]

    @property
    def values(self) -> list[list[Any]]:
        """The values of all received tuples in batch order."""
        return [t.values for t in self.tuples]


@dataclass
class RunResult:
    """What a finished run produced."""

    emitted: Mapping[str, Mapping[str, list[list[Any]]]]  # component -> stream -> values
    sinks: Mapping[str, BaseSink]
    progress: Mapping[str, Any] = field(default_factory=dict)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)


def run_to_completion(topology: StormTopology, conf: Mapping[str, Any] | None = None, *,
                      name: str = "test", timeout: float = 300.0) -> RunResult:
    """Run ``topology`` until its spouts are drained (available-now), then return its outputs.

    Every tuple every component emits is captured (``result.emitted``), in batch order. A
    run still going after ``timeout`` seconds is stopped and raises :class:`KstormError`.
    Without ``kstorm.checkpoint.dir`` in ``conf`` the run checkpoints to a temporary
    directory, removed when it returns or raises.
    """
    from kstorm.submit import submit_topology

    settings = dict(conf or {})
    settings.setdefault("kstorm.trigger", "available-now")
    own_checkpoint = None  # made here, so removed here: nobody can resume from it
    if "kstorm.checkpoint.dir" not in settings:
        own_checkpoint = tempfile.mkdtemp(prefix="kstorm-test-")
        settings["kstorm.checkpoint.dir"] = own_checkpoint
    settings["kstorm.capture.emitted"] = True
    # A test session starts many queries: keep Spark's planners for the next one (~1 s each)
    settings.setdefault("kstorm.spark.release.planners", False)
    try:
        handle = submit_topology(name, settings, topology)
        if not handle.await_termination(timeout):
            handle.stop()
            msg = (f"run_to_completion: topology {name!r} did not finish within {timeout:g} s "
                   "(stopped); at least once, a tuple failed on every attempt is retried for "
                   "ever")
            raise KstormError(msg, hint="give the spout retry=RetryPolicy(max_retries=n), or "
                                        "pass a longer timeout=")
        emitted: dict[str, dict[str, list[list[Any]]]] = defaultdict(lambda: defaultdict(list))
        for component, stream, values in handle.captured:
            emitted[component][stream].append(values)
        return RunResult({k: dict(v) for k, v in emitted.items()}, handle.sinks,
                         handle.progress, list(handle.dead_letters))
    finally:
        if own_checkpoint is not None:
            shutil.rmtree(own_checkpoint, ignore_errors=True)


def sink_context(topology_name: str = "test", component_id: str = "sink",
                 conf: Mapping[str, Any] | None = None) -> SinkContext:
    """The :class:`SinkContext` the runtime would open a sink with (testing a sink alone).

    Example:
        >>> sink.open(sink_context("wc", "store", {"kafka.bootstrap.servers": "b:9092"}))
        ... # doctest: +SKIP
    """
    settings = TopologyConfig.from_conf(conf)
    return SinkContext(topology_name, component_id, settings, dict(conf or {}), settings.kafka)


class ManualClock:
    """A clock that only moves when told to (milliseconds)."""

    def __init__(self, start_ms: int = 0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        """The current time in ms."""
        return self.now_ms

    def advance(self, ms: int) -> int:
        """Move forward by ``ms``; returns the new time."""
        self.now_ms += ms
        return self.now_ms


# -- pytest fixtures: ``pytest_plugins = ["kstorm.testing"]`` in your root conftest.py ----------

try:
    import pytest
except ImportError:  # pragma: no cover - pytest is only needed to use the fixtures
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def kstorm_kafka() -> Iterator[Any]:
        """An embedded Kafka-protocol broker (tansu) for the test session.

        ``kstorm_kafka.bootstrap_servers`` is its address; stopped (by PID) at the end.
        """
        from kstorm.embedded import EmbeddedKafka

        with EmbeddedKafka() as broker:
            yield broker

    @pytest.fixture(scope="session")
    def kstorm_redis() -> Iterator[Any]:
        """An embedded ``redis-server`` for the test session (``kstorm_redis.url``)."""
        from kstorm.embedded import EmbeddedRedis

        with EmbeddedRedis() as server:
            yield server

    @pytest.fixture
    def kstorm_driver() -> Iterator[Any]:
        """``kstorm_driver(topology, conf)``: a :class:`TopologyTestDriver`, closed at the end."""
        drivers: list[TopologyTestDriver] = []

        def make(topology: StormTopology, conf: Mapping[str, Any] | None = None,
                 **options: Any) -> TopologyTestDriver:
            drivers.append(TopologyTestDriver(topology, conf, **options))
            return drivers[-1]

        yield make
        for driver in drivers:
            driver.close()
