"""A transactional spout (seed 002) as a PySpark streaming data source.

Spark keeps one Python process per streaming source for the query's life (the streaming
source runner, on the driver); the reader holds the spout's :class:`~kstorm._runtime.
tx_planner.TxPlanner` (its coordinator and, for partitioned spouts, its emitter) there. A
batch's end offset is the transaction's metadata (``kstorm/_runtime/tx_planner.py``). Spark
writes it to its offset log before the batch runs, so a replay of the batch gets the same
metadata, and the commit phase stores it with the sinks' records.

- ``latestOffset(start)``: plan transaction ``txid = txid base + the next Spark batch id``
  (:meth:`TxPlanner.plan`); a partitioned spout's tuples are kept in this process. No
  transaction (the coordinator is not ready, or no tuple at all): no batch.
- ``partitions``: a coordinated spout's emitter tasks (``parallelism``), or a partitioned
  spout's partitions, carrying the kept tuples (Arrow IPC). After a restart the kept tuples
  are gone: the read task asks the emitter for the batch again, from its metadata (an
  opaque spout's from the previous meta, which may differ: the metadata it then returns
  goes to the driver, which records it for the next transaction).
- ``read``: the task's tuples as ``(__stream, __vals)`` rows, through the spout's source
  stage (``fused``), as a free-form spout's. A coordinated spout's emitter gets
  ``cleanup_before`` with the newest txid the commit phase has committed (a job property).

The reader is also created (then pickled to executors) by Spark's read planner: it opens
nothing until a driver method runs.
"""

from __future__ import annotations

import base64
import json
import logging
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
from kstorm._runtime.spout_log import LoggedTuple, to_table
from kstorm._runtime.transaction import ATTEMPT_PROPERTY, COMMITTED_PROPERTY
from kstorm._runtime.tx_planner import TxPlanner, decode, emit_part, encode, last_metas
from kstorm._spark.offset_log import next_batch_id
from kstorm._spark.stage import _local, batch_id
from kstorm.component import TopologyContext
from kstorm.transactional.attempt import TransactionAttempt
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
        self._planner: TxPlanner | None = None
        self._kept: dict[int, dict[int, list[LoggedTuple]]] = {}  # end seq -> partition -> tuples
        self._planning_attempt = random.getrandbits(40) << 16

    def __getstate__(self) -> dict[str, Any]:  # executors get the spec, never the clients
        return {"spec": self.spec, "kind": self.kind, "_planner": None, "_kept": {},
                "_planning_attempt": self._planning_attempt}

    # -- driver (the streaming source runner process) --------------------------------------

    def _context(self, task: int = 0) -> TopologyContext:
        spec = self.spec
        return TopologyContext(spec.topology_name, spec.spout_id, task, spec.parallelism, -1,
                               dict(spec.streams))

    def _planner_here(self) -> TxPlanner:
        if self._planner is None:
            spec = self.spec
            self._planner = TxPlanner(spec.spout, spec.spout_id, spec.streams, spec.conf,
                                      self._context)
        return self._planner

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
        seq = int(start["seq"])
        txid = self.spec.txid_base + next_batch_id(Path(self.spec.checkpoint))
        planner = self._planner_here()
        last = None if planner.kind == "coordinated" else self._last_metas(start)
        planned = planner.plan(start, txid, self._planning_attempt + seq, last=last)
        if planned is None:
            return start
        end, kept = planned
        if kept:
            self._kept = {seq + 1: kept}  # only the batch being planned is ever read from here
        return end

    def _last_metas(self, start: dict) -> dict[int, Any]:
        """Each partition's metadata after the previous transaction (partitioned, opaque).

        A coordinated spout's planning needs none (and so reads no file per trigger). That is
        the previous end offset's, unless a replay of it (an opaque spout's) emitted
        differently: then the commit phase recorded what the replay returned.
        """
        metas = last_metas(start)
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
        if self._planner is not None:
            try:
                self._planner.close()
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
            committed = _local(COMMITTED_PROPERTY)
            tuples, meta = emit_part(
                spec.spout, spec.spout_id, spec.streams, spec.conf,
                self._context(which if how == "emit" else 0), how, which, payload, tx,
                committed=int(committed) if committed else None)
            if self.kind == "opaque":
                extra.append(Outgoing(txmeta_dest(spec.spout_id), which, spec.spout_id, "",
                                      encode(meta).encode(), None))
            table = to_table(tuples)
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
