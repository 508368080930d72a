"""Arrow <-> tuples: the rows that carry tuples between stages."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from kstorm._runtime.executor import Outgoing, Packed, unpack_metas, unpack_values
from kstorm.acking.replay import ATTEMPT_COLUMN, NOW_COLUMN
from kstorm.errors import SerdeError
from kstorm.topology import StormTopology
from kstorm.tuple import Tuple

ENVELOPE_SCHEMA = pa.schema([
    ("__dest", pa.string()),
    ("__task", pa.int32()),
    ("__src", pa.string()),
    ("__stream", pa.string()),
    ("__vals", pa.binary()),
    ("__meta", pa.binary()),
])
ENVELOPE_DDL = ("__dest string, __task int, __src string, __stream string, "
                "__vals binary, __meta binary")
KAFKA_ID_COLUMNS = ("topic", "partition", "offset")


def to_arrow(rows: Sequence[Outgoing | Packed]) -> pa.RecordBatch:
    """Put envelope rows into one Arrow batch."""
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in ENVELOPE_SCHEMA]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(cols, ENVELOPE_SCHEMA, strict=True)],
        schema=ENVELOPE_SCHEMA,
    )


def split_for(batch: pa.RecordBatch, head: str) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """(rows addressed to ``head``, the other rows, which pass through unchanged)."""
    mine = pc.equal(batch.column("__dest"), head)
    return batch.filter(mine), batch.filter(pc.invert(mine))


def envelope_tuples(batch: pa.RecordBatch, topology: StormTopology) -> Iterator[tuple[int, Tuple]]:
    """``(task, Tuple)`` for each tuple of the envelope rows (packed rows, all for one bolt)."""
    tasks = batch.column("__task").to_pylist()
    srcs = batch.column("__src").to_pylist()
    streams = batch.column("__stream").to_pylist()
    vals = batch.column("__vals").to_pylist()
    metas = batch.column("__meta").to_pylist()
    comps = topology.components
    for task, src, stream, v, meta in zip(tasks, srcs, streams, vals, metas, strict=True):
        fields = comps[src].streams[stream]
        values = unpack_values(v)
        received = Tuple._received
        if meta is None:
            for tuple_values in values:
                yield task, received(tuple_values, fields, src, stream)
            continue
        for tuple_values, tuple_meta in zip(values, unpack_metas(meta, len(values)),
                                            strict=True):
            tup = received(tuple_values, fields, src, stream)
            tup._ids = tuple_meta
            yield task, tup


def raw_tuples(batch: pa.RecordBatch, spout: str, topology: StormTopology, tasks: list[int]
               ) -> Iterator[tuple[int, Tuple]]:
    """``(task, Tuple)`` for each good raw spout row (``__error`` rows are skipped).

    A free-form spout's rows carry their stream and pickled values (``__stream``,
    ``__vals``) instead of typed columns.
    """
    if "__vals" in batch.schema.names:
        streams = topology.components[spout].streams
        for task, stream, vals in zip(tasks, batch.column("__stream").to_pylist(),
                                      batch.column("__vals").to_pylist(), strict=True):
            yield task, Tuple(pickle.loads(vals), streams[stream], spout, stream)
        return
    fields = topology.components[spout].streams["default"]
    columns = [batch.column(name).to_pylist() for name in fields]
    names = batch.schema.names
    errors = batch.column("__error").to_pylist() if "__error" in names else None
    ids = ([batch.column(c).to_pylist() for c in KAFKA_ID_COLUMNS]
           if all(c in names for c in KAFKA_ID_COLUMNS) else None)
    msg_ids = (batch.column("__msgid").to_pylist() if "__msgid" in names else None)
    attempts = (batch.column(ATTEMPT_COLUMN).to_pylist() if ATTEMPT_COLUMN in names else None)
    nows = batch.column(NOW_COLUMN).to_pylist() if attempts is not None else None
    for i, values in enumerate(zip(*columns, strict=True)):
        if errors is not None and errors[i] is not None:
            continue
        if ids is not None:
            message_id = (ids[0][i], ids[1][i], ids[2][i])
        else:
            message_id = msg_ids[i] if msg_ids is not None else None
        tup = Tuple(values, fields, spout, "default", message_id)
        if attempts is not None:  # a tracked spout: which attempt, planned when
            tup._ids = (attempts[i], nows[i])  # type: ignore[index]
        yield tasks[i], tup


def bad_input(batch: pa.RecordBatch, spout: str, policy: str) -> tuple[list[list], int]:
    """Apply ``kstorm.bad.input.policy`` to the rows the spout could not deserialize.

    Returns (dead-letter values to write, rows skipped). ``fail`` raises a
    :class:`SerdeError` naming the first bad record's topic, partition and offset.
    """
    records = list(raw_errors(batch))
    if not records:
        return [], 0
    if policy == "skip-and-count":
        return [], len(records)
    if policy == "fail":
        first = records[0]
        msg = (f"spout {spout!r}: cannot deserialize the record at {first[5]}[{first[6]}]@"
               f"{first[7]}: {first[2]}: {first[3]} (kstorm.bad.input.policy = 'fail')")
        raise SerdeError(msg)
    for values in records:
        values[0] = spout
    return records, 0


def raw_errors(batch: pa.RecordBatch) -> Iterator[list]:
    """Dead-letter values for raw rows that failed to deserialize."""
    names = batch.schema.names
    if "__error" not in names:
        return
    bad = batch.filter(pc.is_valid(batch.column("__error")))
    if bad.num_rows == 0:
        return
    get = {n: bad.column(n).to_pylist() if n in names else [None] * bad.num_rows
           for n in ("__error", "__raw", *KAFKA_ID_COLUMNS)}
    for i in range(bad.num_rows):
        err = get["__error"][i]
        etype, _, message = err.partition(": ")
        yield [None, "default", etype, message or err, None, get["topic"][i],
               get["partition"][i], get["offset"][i], get["__raw"][i]]
