"""A transactional spout's transactions: planned on the driver, emitted by tasks (seed 002).

One implementation for Spark (``kstorm/_spark/txspout_source.py``: :meth:`TxPlanner.plan`
in ``latestOffset``, :func:`emit_part` in ``read``) and for the test driver
(``kstorm/testdriver.py``), so both plan and replay a spout's batches alike.

A transaction's end offset is JSON: ``{"seq": n, "meta": ...}`` (a coordinated spout) or
``{"seq": n, "metas": {partition: meta}, "prev": {partition: meta}}`` (partitioned and
opaque spouts), metadata pickled in base64 (:func:`encode`).

- A coordinated spout (``ITransactionalSpout``): when its coordinator ``is_ready()``,
  ``initialize_transaction(txid, previous meta)`` gives the metadata; each of the spout's
  ``parallelism`` emitter tasks then emits its part (``emit_batch(tx, meta, collector)``).
  An emitter is made for one task and one batch: ``cleanup_before(txid)`` first, with the
  newest txid whose commit is known to be done (none until one is), then ``emit_batch``,
  then ``close``.
- A partitioned spout: per partition ``emit_partition_batch_new(tx, collector, p, last
  meta)`` at planning (the tuples kept for the batch); a replay after a restart
  ``emit_partition_batch(tx, collector, p, meta)``, which must emit the identical batch.
- An opaque spout: per partition ``emit_partition_batch(tx, collector, p, last meta)``; a
  replay after a restart calls it again from the same previous meta and may get another
  batch; the meta it returns then is what the next transaction goes on from (seed 002:
  "they always emit where the last transaction left off").
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Callable, Mapping
from typing import Any

from kstorm._runtime.spout_executor import EmitBuffer
from kstorm._runtime.spout_log import LoggedTuple
from kstorm.component import TopologyContext
from kstorm.transactional.attempt import TransactionAttempt
from kstorm.transactional.bolt import BatchOutputCollector
from kstorm.tuple import Fields

Planned = tuple[dict[str, Any], dict[int, list[LoggedTuple]]]


def encode(meta: Any) -> str:
    """A metadata object as a JSON-safe string."""
    return base64.b64encode(pickle.dumps(meta, protocol=5)).decode()


def decode(text: str | None) -> Any:
    """:func:`encode`'s inverse (``None`` stays ``None``)."""
    return None if text is None else pickle.loads(base64.b64decode(text))


def _buffer(spout_id: str, streams: Mapping[str, Fields]
            ) -> tuple[EmitBuffer, BatchOutputCollector]:
    buffer = EmitBuffer(spout_id, streams)
    return buffer, BatchOutputCollector(lambda s, v, _a, b=buffer: b(s, v, None))


class TxPlanner:
    """Plans the transactions of one transactional spout (its coordinator, on the driver).

    ``context(task)`` gives the ``TopologyContext`` of an emitter task.
    """

    def __init__(self, spout: Any, spout_id: str, streams: Mapping[str, Fields],
                 conf: Mapping[str, Any], context: Callable[[int], TopologyContext]) -> None:
        self.spout, self.spout_id, self.streams = spout, spout_id, dict(streams)
        self.conf, self.context = dict(conf), context
        self.kind: str = spout.transactional_kind
        self._coordinator: Any = None
        self._emitter: Any = None

    def _clients(self) -> tuple[Any, Any]:
        if self._coordinator is None:
            self._coordinator = self.spout.get_coordinator(dict(self.conf), self.context(0))
            if self.kind != "coordinated":
                self._emitter = self.spout.get_emitter(dict(self.conf), self.context(0))
        return self._coordinator, self._emitter

    def plan(self, start: Mapping[str, Any], txid: int, attempt_id: int,
             last: Mapping[int, Any] | None = None) -> Planned | None:
        """The end offset of transaction ``txid`` after ``start``, and its kept tuples.

        ``None``: no transaction now (the coordinator is not ready, or a partitioned or
        opaque spout emitted nothing). A coordinated spout keeps no tuples (its emitter
        tasks emit them, :func:`emit_part`). ``last``: each partition's metadata after
        the previous transaction, when not ``start``'s own (an opaque replay's).
        """
        coordinator, emitter = self._clients()
        if not coordinator.is_ready():
            return None
        seq = int(start["seq"])
        if self.kind == "coordinated":
            meta = coordinator.initialize_transaction(txid, decode(start.get("meta")))
            return {"seq": seq + 1, "meta": encode(meta)}, {}
        tx = TransactionAttempt(txid, attempt_id)
        last = dict(last) if last is not None else last_metas(start)
        partitions = (coordinator.number_partitions() if self.kind == "partitioned"
                      else emitter.number_partitions())
        metas: dict[str, str] = {}
        kept: dict[int, list[LoggedTuple]] = {}
        for p in range(partitions):
            buffer, collector = _buffer(self.spout_id, self.streams)
            if self.kind == "partitioned":
                meta = emitter.emit_partition_batch_new(tx, collector, p, last.get(p))
            else:
                meta = emitter.emit_partition_batch(tx, collector, p, last.get(p))
            metas[str(p)] = encode(meta)
            kept[p] = buffer.take()
        if not any(kept.values()):
            return None
        return ({"seq": seq + 1, "metas": metas,
                 "prev": {str(p): encode(m) for p, m in last.items()}}, kept)

    def close(self) -> None:
        """The topology stops: close the coordinator and the planning emitter."""
        for client in (self._coordinator, self._emitter):
            if client is not None:
                client.close()


def last_metas(start: Mapping[str, Any]) -> dict[int, Any]:
    """Each partition's metadata after the transaction that ended at ``start``."""
    return {int(p): decode(m) for p, m in start.get("metas", {}).items()}


def emit_part(spout: Any, spout_id: str, streams: Mapping[str, Fields],
              conf: Mapping[str, Any], context: TopologyContext, how: str, which: int,
              payload: str | None, tx: TransactionAttempt, committed: int | None = None
              ) -> tuple[list[LoggedTuple], Any]:
    """One task's part of a batch, from its metadata: ``(tuples, meta returned or None)``.

    ``how``: ``"emit"`` (emitter task ``which`` of a coordinated spout, ``payload`` the
    transaction's meta; ``committed``: the newest txid known committed, for
    ``cleanup_before``) or ``"replay"`` (partition ``which`` again after a restart:
    ``payload`` is its meta, an opaque spout's the previous one; the meta an opaque
    emitter returns is the second item).
    """
    buffer, collector = _buffer(spout_id, streams)
    emitter = spout.get_emitter(dict(conf), context)
    returned = None
    try:
        if how == "emit":
            if committed is not None:
                emitter.cleanup_before(committed)
            emitter.emit_batch(tx, decode(payload), collector)
        elif spout.transactional_kind == "partitioned":
            emitter.emit_partition_batch(tx, collector, which, decode(payload))
        else:
            returned = emitter.emit_partition_batch(tx, collector, which, decode(payload))
    finally:
        emitter.close()
    return buffer.take(), returned
