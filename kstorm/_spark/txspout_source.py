"""A transactional spout (seed 002) as a PySpark streaming data source.

Spark keeps one Python process per streaming source for the query's life (the streaming
source runner, on the driver); the reader holds the spout's coordinator (and, for
partitioned spouts, its emitter) there. A batch's end offset is the transaction's metadata,
JSON: ``{"seq": n, "meta": ...}`` (coordinated spouts) or ``{"seq": n, "metas": {partition:
meta}, "prev": {partition: meta}}`` (partitioned and opaque spouts), metadata pickled in
base64. Spark writes it to its offset log before the batch runs, so a replay of the batch
gets the same metadata, and the commit phase stores it with the sinks' records.

- ``latestOffset(start)``: when the coordinator ``is_ready()``, plan transaction ``txid =
  txid base + the next Spark batch id``: a coordinated spout's
  ``initialize_transaction(txid, previous meta)``; a partitioned spout's
  ``emit_partition_batch_new(tx, collector, p, last meta)`` per partition (an opaque
  spout's ``emit_partition_batch``), the tuples kept in this process. No tuple at all: no
  batch.
- ``partitions``: a coordinated spout's emitter tasks (``parallelism``), or a partitioned
  spout's partitions, carrying the kept tuples (Arrow IPC). After a restart the kept tuples
  are gone: the read task asks the emitter for the batch again, from its metadata
  (``emit_partition_batch(tx, collector, p, meta)``, which must emit the identical batch;
  an opaque spout's from the previous meta, which may differ: the metadata it then returns
  goes to the driver, which records it for the next transaction).
- ``read``: the task's tuples as ``(__stream, __vals)`` rows, through the spout's source
  stage (``fused``), as a free-form spout's.

The reader is also created (then pickled to executors) by Spark's read planner: it opens
nothing until a driver method runs.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kstorm._runtime.envelope import Outgoing, to_arrow, txmeta_dest
from kstorm._runtime.spout_executor import EmitBuffer
from kstorm._runtime.spout_log import LoggedTuple, to_table
from kstorm._runtime.transaction import ATTEMPT_PROPERTY
from kstorm._spark.offset_log import next_batch_id
from kstorm._spark.stage import _local, batch_id
from kstorm.component import TopologyContext
from kstorm.transactional.attempt import TransactionAttempt
from kstorm.transactional.bolt import BatchOutputCollector
from kstorm.tuple import Fields

FORMAT = "kstorm_txspout"
SPEC_OPTION = "kstorm.txspout"
ROW_DDL = "__stream string, __vals binary"
log = logging.getLogger("kstorm.spout")


@dataclass(frozen=True)
class TxSpoutSpec:
    """Everything the source needs, cloudpickled into one option."""

    spout: Any
    spout_id: str
    topology_name: str
    conf: dict[str, Any]
    streams: dict[str, Fields]
    checkpoint: str
    txid_base: int
    parallelism: int = 1
    fused: Any = None  # the spout's source stage (StageRunner), run inside read()
    seed: dict[str, Any] | None = None  # the last end offset a sink stored (lost checkpoint)
    txmeta_file: str | None = None  # the metadata replays really used (commit phase)


STATE_PREFIX = "txspout:"  # + spout id: its end offset, in the sinks' stored state


def state_key(spout: str) -> str:
    """Name of a transactional spout's metadata (its end offset) in the sinks' state."""
    return STATE_PREFIX + spout


def seed_from(stored: Mapping[str, bytes], spout: str) -> dict[str, Any] | None:
    """The end offset a sink stored for ``spout`` (where a lost checkpoint resumes)."""
    blob = stored.get(state_key(spout))
    return None if blob is None else json.loads(blob)


def effective_end(end: Mapping[str, Any], replayed: Mapping[int, bytes]) -> dict[str, Any]:
    """``end`` with the metadata an opaque replay really returned for some partitions."""
    out = dict(end)
    if replayed:
        out["metas"] = {**end.get("metas", {}),
                        **{str(p): m.decode() for p, m in replayed.items()}}
    return out


def encode(meta: Any) -> str:
    """A metadata object as a JSON-safe string."""
    return base64.b64encode(pickle.dumps(meta, protocol=5)).decode()


def decode(text: str | None) -> Any:
    """:func:`encode`'s inverse (``None`` stays ``None``)."""
    return None if text is None else pickle.loads(base64.b64decode(text))


class TxSpoutDataSource(DataSource):
    """``spark.readStream.format("kstorm_txspout")``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return FORMAT

    def schema(self) -> str:
        """The rows ``read`` yields (envelope rows when a stage is fused)."""
        return ROW_DDL

    def streamReader(self, schema: StructType) -> TxSpoutStreamReader:
        """A reader for the spout in the options."""
        return TxSpoutStreamReader(self.options[SPEC_OPTION])


class TxSpoutStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans transactions of a transactional spout (see the module docstring)."""

    def __init__(self, spec: str) -> None:
        self.spec: TxSpoutSpec = cloudpickle.loads(base64.b64decode(spec))
        self.kind: str = self.spec.spout.transactional_kind
        self._coordinator: Any = None
        self._emitter: Any = None
        self._kept: dict[int, dict[int, list[LoggedTuple]]] = {}  # end seq -> partition -> tuples
        self._planning_attempt = random.getrandbits(40) << 16

    def __getstate__(self) -> dict[str, Any]:  # executors get the spec, never the clients
        return {"spec": self.spec, "kind": self.kind, "_coordinator": None, "_emitter": None,
                "_kept": {}, "_planning_attempt": self._planning_attempt}

    # -- driver (the streaming source runner process) --------------------------------------

    def _context(self, task: int = 0) -> TopologyContext:
        spec = self.spec
        return TopologyContext(spec.topology_name, spec.spout_id, task, spec.parallelism, -1,
                               dict(spec.streams))

    def _clients(self) -> tuple[Any, Any]:
        if self._coordinator is None:
            conf = dict(self.spec.conf)
            self._coordinator = self.spec.spout.get_coordinator(conf, self._context())
            if self.kind != "coordinated":
                self._emitter = self.spec.spout.get_emitter(conf, self._context())
        return self._coordinator, self._emitter

    def initialOffset(self) -> dict:
        """A new checkpoint starts at the metadata a sink stored, else at nothing."""
        return dict(self.spec.seed) if self.spec.seed else {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        """Informational: a transaction is what the spout's coordinator decides."""
        return ReadMaxRows(1)

    def prepareForTriggerAvailableNow(self) -> None:
        """Available-now: the run ends at the first transaction that emits nothing."""

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Plan the next transaction (see the module docstring), or ``start`` for none."""
        coordinator, emitter = self._clients()
        if not coordinator.is_ready():
            return start
        seq = int(start["seq"])
        txid = self.spec.txid_base + next_batch_id(Path(self.spec.checkpoint))
        tx = TransactionAttempt(txid, self._planning_attempt + seq)
        if self.kind == "coordinated":
            meta = coordinator.initialize_transaction(txid, decode(start.get("meta")))
            return {"seq": seq + 1, "meta": encode(meta)}
        last = self._last_metas(start)
        partitions = (coordinator.number_partitions() if self.kind == "partitioned"
                      else emitter.number_partitions())
        metas: dict[str, str] = {}
        kept: dict[int, list[LoggedTuple]] = {}
        for p in range(partitions):
            buffer = EmitBuffer(self.spec.spout_id, self.spec.streams)
            collector = BatchOutputCollector(lambda s, v, _a, b=buffer: b(s, v, None))
            if self.kind == "partitioned":
                meta = emitter.emit_partition_batch_new(tx, collector, p, last.get(p))
            else:
                meta = emitter.emit_partition_batch(tx, collector, p, last.get(p))
            metas[str(p)] = encode(meta)
            kept[p] = buffer.take()
        if not any(kept.values()):
            return start
        self._kept = {seq + 1: kept}  # only the batch being planned is ever read from here
        return {"seq": seq + 1, "metas": metas,
                "prev": {str(p): encode(m) for p, m in last.items()}}

    def _last_metas(self, start: dict) -> dict[int, Any]:
        """Each partition's metadata after the previous transaction.

        That is the previous end offset's, unless a replay of it (an opaque spout's) emitted
        differently: then the commit phase recorded what the replay returned.
        """
        metas = {int(p): decode(m) for p, m in start.get("metas", {}).items()}
        if self.spec.txmeta_file:
            try:
                recorded = json.loads(Path(self.spec.txmeta_file).read_text())
            except FileNotFoundError:
                recorded = None
            if recorded is not None and int(recorded["seq"]) == int(start["seq"]):
                metas.update({int(p): decode(m) for p, m in recorded["metas"].items()})
        return metas

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """A coordinated spout's emitter tasks, or a partitioned spout's partitions."""
        seq = int(end["seq"])
        if self.kind == "coordinated":
            return [InputPartition(("emit", seq, task, end["meta"]))
                    for task in range(self.spec.parallelism)]
        kept = self._kept.pop(seq, None)
        parts = []
        for p, meta in sorted(end["metas"].items(), key=lambda kv: int(kv[0])):
            if kept is not None:
                if kept.get(int(p)):
                    parts.append(InputPartition(("kept", seq, int(p), _ipc(kept[int(p)]))))
            else:  # a restart: the emitter emits the batch again from its metadata
                again = meta if self.kind == "partitioned" else end["prev"].get(p)
                parts.append(InputPartition(("replay", seq, int(p), again)))
        return parts

    def commit(self, end: dict) -> None:
        """Spark committed through ``end``."""

    def stop(self) -> None:
        """The query stopped: close the spout's coordinator and emitter."""
        for client in (self._coordinator, self._emitter):
            if client is not None:
                try:
                    client.close()
                except Exception:
                    log.exception("transactional spout %r: close() raised", self.spec.spout_id)

    # -- executors -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's (or emitter task's) tuples, through the fused source stage."""
        how, _seq, which, payload = partition.value
        spec = self.spec
        extra: list[Outgoing] = []
        if how == "kept":
            table = pa.ipc.open_stream(payload).read_all()
        else:
            tx = TransactionAttempt(spec.txid_base + batch_id(),
                                    int(_local(ATTEMPT_PROPERTY) or 0))
            buffer = EmitBuffer(spec.spout_id, spec.streams)
            collector = BatchOutputCollector(lambda s, v, _a: buffer(s, v, None))
            conf = dict(spec.conf)
            emitter = spec.spout.get_emitter(conf, self._context(which if how == "emit" else 0))
            try:
                if how == "emit":
                    emitter.emit_batch(tx, decode(payload), collector)
                elif self.kind == "partitioned":
                    emitter.emit_partition_batch(tx, collector, which, decode(payload))
                else:
                    meta = emitter.emit_partition_batch(tx, collector, which, decode(payload))
                    extra.append(Outgoing(txmeta_dest(spec.spout_id), which, spec.spout_id, "",
                                          encode(meta).encode(), None))
            finally:
                emitter.close()
            table = to_table(buffer.take())
        table = table.drop_columns([c for c in ("__msgid",) if c in table.schema.names])
        batches = table.to_batches()
        if spec.fused is not None:
            yield from spec.fused(iter(batches))
        else:
            yield from batches
        if extra:
            yield to_arrow(extra)


def _ipc(tuples: list[LoggedTuple]) -> bytes:
    table = to_table(tuples).drop_columns(["__msgid"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def read_txspout_stream(spark: SparkSession, spec: TxSpoutSpec, schema: str) -> DataFrame:
    """A streaming DataFrame of ``spec``'s spout; ``schema`` is the fused stage's output."""
    spark.dataSource.register(TxSpoutDataSource)
    option = base64.b64encode(cloudpickle.dumps(spec)).decode()
    return spark.readStream.format(FORMAT).schema(schema).option(SPEC_OPTION, option).load()
