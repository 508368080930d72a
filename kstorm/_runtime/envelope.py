"""The envelope: the one definition of the rows that carry tuples between stages.

Every stage's output, and everything that reaches the driver, is an *envelope row*. This
module owns that wire contract; everything else imports it:

- the columns (:data:`ENVELOPE_COLUMNS`), from which the Arrow schema and Spark's DDL are
  derived;
- packing many tuples into one row (:class:`Packed`, :func:`pack`, :func:`unpack_values`)
  and single rows (:class:`Outgoing`);
- the destination address space (``__dest``): a bolt or sink id, or one of the reserved
  addresses below (acker messages, metrics, captures, dead letters, window partials,
  windowed bolt snapshots);
- the extra columns spout rows carry besides the spout's fields (:data:`ERROR_COLUMN`, ...);
- the emit order (``__seq``, :func:`emit_seq`): a row's tuples are numbered in the order the
  stage task that sent them emitted them, so the windowed bolt downstream takes them in that
  order whatever order Spark's exchanges deliver the rows in (Storm's arrival order).

Adding a column means adding it to :data:`ENVELOPE_COLUMNS` (and to :class:`Outgoing` /
:class:`Packed`, which are positional); nothing else lists the columns.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from kstorm._ids import ACKER_COMPONENT, DEAD_LETTER_STREAM, SYSTEM_COMPONENT
from kstorm.acking.emits import EmitMsg, SpoutEmit
from kstorm.errors import SerdeError
from kstorm.tuple import TICK_FIELDS, Fields, Tuple

if TYPE_CHECKING:
    from kstorm.topology import StormTopology

# -- columns --------------------------------------------------------------------------------

ENVELOPE_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("__dest", pa.string()),    # a bolt/sink id, or a reserved address (below)
    ("__task", pa.int32()),     # the destination's task
    ("__src", pa.string()),     # the emitting component
    ("__stream", pa.string()),  # its stream
    ("__vals", pa.binary()),    # packed tuple values, or a reserved address's payload
    ("__meta", pa.binary()),    # anchor bookkeeping per tuple (null: none is tracked)
    ("__seq", pa.int64()),      # emit position of the row's first tuple (null: none, below)
)
ENVELOPE_SCHEMA = pa.schema(list(ENVELOPE_COLUMNS))
_DDL_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint",
              pa.binary(): "binary"}
ENVELOPE_DDL = ", ".join(f"{name} {_DDL_TYPES[kind]}" for name, kind in ENVELOPE_COLUMNS)
# (not ENVELOPE_SCHEMA.empty_table(): that imports pandas, ~40 MB in every Python worker)
EMPTY = pa.Table.from_batches([], schema=ENVELOPE_SCHEMA)

# -- reserved destinations -----------------------------------------------------------------

ACKER = ACKER_COMPONENT             # acker messages; __task = the acker task
ACKER_EVENTS = "__acker_events"     # the acker tasks' events, for the driver
METRICS = "__metrics"               # a task's counters (a pickled dict)
CAPTURE = "__capture"               # every emitted tuple (kstorm.capture.emitted, topology.debug)
DEAD_LETTER = DEAD_LETTER_STREAM    # a dead-letter record (DEAD_LETTER_FIELDS, pickled)
WINDOW_PREFIX = "__window:"         # + aggregate id: a task's window partials
STATE_PREFIX = "__wstate:"          # + windowed bolt id: a task's snapshot for the sinks
TXMETA_PREFIX = "__txmeta:"         # + transactional spout id: a partition's replayed meta

DEAD_LETTER_FIELDS = Fields("component", "stream", "error_type", "message", "values",
                            "topic", "partition", "offset", "raw")


def window_dest(component: str) -> str:
    """Destination of windowed aggregate ``component``'s partials (the driver)."""
    return WINDOW_PREFIX + component


def txmeta_dest(spout: str) -> str:
    """Destination of a transactional spout's replayed partition metadata (the driver)."""
    return TXMETA_PREFIX + spout


def state_dest(component: str) -> str:
    """Destination of windowed bolt ``component``'s task snapshots (the driver)."""
    return STATE_PREFIX + component


# -- extra columns of spout rows -------------------------------------------------------------

ERROR_COLUMN = "__error"      # "<ErrorType>: <message>" of a record that failed to decode
RAW_COLUMN = "__raw"          # ... and its original bytes
MSGID_COLUMN = "__msgid"      # a list spout row's message id (a free-form one's: pickled)
OWNER_COLUMN = "__owner"      # a tracked free-form spout row: the instance that emitted it
ROOT_COLUMN = "__root"        # ... and its tree's root id (null: emitted without message id)
CLOCK_COLUMN = "__pmax0"      # the row's stream's latest timestamp before the batch (windows)
ATTEMPT_COLUMN = "__attempt"  # a tracked spout row: 0 for a first emit, n for the n-th retry
PLANNED_COLUMN = "__planned"  # a tracked spout row: when its batch was planned (ms)
NOW_COLUMN = "__now"          # a windowed bolt stage's input: the batch's processing time (ms)
TASK_COLUMN = "__task"        # the task a row goes to (set before an exchange)
TASK_KEY_COLUMN = "__task_key"  # a stateful stage's grouping key for the task (compiler.py)
STREAM_COLUMN = "__stream"    # a free-form spout row's stream ...
VALS_COLUMN = "__vals"        # ... and its pickled values
KAFKA_ID_COLUMNS = ("topic", "partition", "offset")

# -- rows --------------------------------------------------------------------------------------


class Outgoing(NamedTuple):
    """One row leaving a stage: a tuple for ``dest`` (task ``task``), or a reserved payload."""

    dest: str
    task: int
    src: str
    stream: str
    values: bytes
    meta: bytes | None
    seq: int | None = None


class Packed(NamedTuple):
    """Tuples leaving the stage for task ``task`` of bolt/sink ``dest``, packed in one row.

    ``values`` is :func:`pack` of the tuples' values, in emit order; ``meta`` is ``None``
    when no tuple carries anchor bookkeeping, else the pickled list of each tuple's
    :attr:`Outgoing.meta`. One row carries many tuples: Spark moves, shuffles and converts
    rows, so the fewer the cheaper (see :func:`unpack_values`). ``seq`` is the emit position
    of its first tuple (:func:`emit_seq`; the others follow it, one apart).
    """

    dest: str
    task: int
    src: str
    stream: str
    values: bytes
    meta: bytes | None
    seq: int | None = None


SEQ_SHIFT = 40  # __seq = origin << SEQ_SHIFT | the tuple's number within its origin


def emit_seq(origin: int, number: int) -> int:
    """The ``__seq`` of a stage task's ``number``-th emitted tuple (from 0).

    ``origin`` is the task's partition of the stage (the same on every replay of a batch);
    tuples of one origin are numbered in emit order.

    Example:
        >>> seq = emit_seq(3, 7)
        >>> seq_origin(seq), seq & ((1 << SEQ_SHIFT) - 1)
        (3, 7)
    """
    return (origin << SEQ_SHIFT) | number


def seq_origin(seq: int) -> int:
    """The origin (the emitting stage task's partition) of an emit position."""
    return seq >> SEQ_SHIFT


def dumps(values: Sequence[Any]) -> bytes:
    """Serialize one tuple's values (a single-tuple row, or a mutable entry of a packed row)."""
    return pickle.dumps(list(values), protocol=5)


loads = pickle.loads


def pack(entries: list[list[Any] | bytes]) -> bytes:
    """The ``__vals`` of a packed row: tuples' values (lists, or :func:`dumps` bytes).

    Tuples of one stream with no pickled entry among them go as columns (``(n, column 1,
    ..., column n)``): unpickling a column and making each tuple's list from it costs about
    a third of unpickling one list per tuple (~100 against ~330 ns for a one-field tuple),
    and the row is ~25 % smaller. Otherwise (a pickled entry, tuples of no fields, or of
    different lengths) the list of entries itself. :func:`unpack_values` reads both.

    Example:
        >>> unpack_values(pack([["cat", 1], dumps([["a"], 2])]))
        [['cat', 1], [['a'], 2]]
        >>> unpack_values(pack([["cat", 1], ["dog", 2]]))
        [['cat', 1], ['dog', 2]]
    """
    if entries and bytes not in map(type, entries):
        lengths = set(map(len, entries))
        if lengths == {1}:
            return pickle.dumps((1, [e[0] for e in entries]), protocol=5)
        if len(lengths) == 1 and 0 not in lengths:
            return pickle.dumps((len(entries[0]), *zip(*entries, strict=True)), protocol=5)
    return pickle.dumps(entries, protocol=5)


def unpack_values(blob: bytes) -> list[list[Any]]:
    """The values of each tuple of a packed row, in emit order (each a list of its own)."""
    packed = loads(blob)
    if type(packed) is list:
        return [e if type(e) is list else loads(e) for e in packed]
    if packed[0] == 1:
        return [[v] for v in packed[1]]
    if packed[0] == 2:
        return [[a, b] for a, b in zip(packed[1], packed[2], strict=True)]
    return list(map(list, zip(*packed[1:], strict=True)))


def unpack_metas(blob: bytes | None, n: int) -> list[bytes | None]:
    """The meta of each of the ``n`` tuples of a packed row."""
    return [None] * n if blob is None else loads(blob)


def unpacked(rows: Iterable[Outgoing | Packed]) -> Iterator[Outgoing]:
    """Rows with each packed row expanded into one :class:`Outgoing` per tuple."""
    for row in rows:
        if isinstance(row, Packed):
            values = unpack_values(row.values)
            metas = unpack_metas(row.meta, len(values))
            seq = row.seq
            for i, (v, m) in enumerate(zip(values, metas, strict=True)):
                yield Outgoing(row.dest, row.task, row.src, row.stream, dumps(v), m,
                               None if seq is None else seq + i)
        else:
            yield row


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


def split_by_dest(table: pa.Table) -> dict[str, pa.Table]:
    """The rows of ``table`` per destination (the commit phase's step 1)."""
    if table.num_rows == 0:
        return {}
    dests = pc.unique(table.column("__dest")).to_pylist()
    if len(dests) == 1:
        return {dests[0]: table}
    return {dest: table.filter(pc.equal(table.column("__dest"), dest)) for dest in dests}


# -- tuples in ---------------------------------------------------------------------------------


def envelope_tuples(batch: pa.RecordBatch, topology: StormTopology
                    ) -> Iterator[tuple[int, Tuple]]:
    """``(task, Tuple)`` for each tuple of the envelope rows (packed rows, all for one bolt)."""
    tasks = batch.column("__task").to_pylist()
    srcs = batch.column("__src").to_pylist()
    streams = batch.column("__stream").to_pylist()
    vals = batch.column("__vals").to_pylist()
    metas = batch.column("__meta").to_pylist()
    seqs = (batch.column("__seq").to_pylist() if "__seq" in batch.schema.names
            else [None] * batch.num_rows)
    comps = topology.components
    received = Tuple._received
    for task, src, stream, v, meta, seq in zip(tasks, srcs, streams, vals, metas, seqs,
                                               strict=True):
        fields = TICK_FIELDS if src == SYSTEM_COMPONENT else comps[src].streams[stream]
        values = unpack_values(v)
        if meta is None and seq is None:
            for tuple_values in values:
                yield task, received(tuple_values, fields, src, stream)
            continue
        for i, (tuple_values, tuple_meta) in enumerate(
                zip(values, unpack_metas(meta, len(values)), strict=True)):
            tup = received(tuple_values, fields, src, stream)
            tup._ids = tuple_meta
            if seq is not None:
                tup._seq = seq + i
            yield task, tup


def raw_tuples(batch: pa.RecordBatch, spout: str, topology: StormTopology, tasks: list[int]
               ) -> Iterator[tuple[int, Tuple]]:
    """``(task, Tuple)`` for each good raw spout row (rows with an error are skipped).

    A free-form spout's rows carry their stream and pickled values (``__stream``,
    ``__vals``) instead of typed columns.
    """
    names = batch.schema.names
    if VALS_COLUMN in names:
        streams = topology.components[spout].streams
        stream_col = batch.column(STREAM_COLUMN).to_pylist()
        vals_col = batch.column(VALS_COLUMN).to_pylist()
        if ROOT_COLUMN not in names:
            for task, stream, vals in zip(tasks, stream_col, vals_col, strict=True):
                yield task, Tuple(pickle.loads(vals), streams[stream], spout, stream)
            return
        # a tracked free-form spout: each row with a message id starts its own tree
        for task, stream, vals, root, msg_id, owner, planned in zip(
                tasks, stream_col, vals_col, batch.column(ROOT_COLUMN).to_pylist(),
                batch.column(MSGID_COLUMN).to_pylist(),
                batch.column(OWNER_COLUMN).to_pylist(),
                batch.column(PLANNED_COLUMN).to_pylist(), strict=True):
            tup = Tuple(pickle.loads(vals), streams[stream], spout, stream)
            if root is not None:
                tup._ids = SpoutEmit(root, EmitMsg(msg_id, stream, vals, owner or ""), planned)
            yield task, tup
        return
    fields = topology.components[spout].streams["default"]
    columns = [batch.column(name).to_pylist() for name in fields]
    errors = batch.column(ERROR_COLUMN).to_pylist() if ERROR_COLUMN in names else None
    ids = ([batch.column(c).to_pylist() for c in KAFKA_ID_COLUMNS]
           if all(c in names for c in KAFKA_ID_COLUMNS) else None)
    msg_ids = batch.column(MSGID_COLUMN).to_pylist() if MSGID_COLUMN in names else None
    attempts = batch.column(ATTEMPT_COLUMN).to_pylist() if ATTEMPT_COLUMN in names else None
    planned = batch.column(PLANNED_COLUMN).to_pylist() if attempts is not None else None
    for i, values in enumerate(zip(*columns, strict=True)):
        if errors is not None and errors[i] is not None:
            continue
        if ids is not None:
            message_id = (ids[0][i], ids[1][i], ids[2][i])
        else:
            message_id = msg_ids[i] if msg_ids is not None else None
        tup = Tuple(values, fields, spout, "default", message_id)
        if attempts is not None:  # a tracked spout: which attempt, planned when
            tup._ids = (attempts[i], planned[i])  # type: ignore[index]
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
    """Dead-letter values (:data:`DEAD_LETTER_FIELDS`) for raw rows that failed to decode."""
    names = batch.schema.names
    if ERROR_COLUMN not in names:
        return
    bad = batch.filter(pc.is_valid(batch.column(ERROR_COLUMN)))
    if bad.num_rows == 0:
        return
    get = {n: bad.column(n).to_pylist() if n in names else [None] * bad.num_rows
           for n in (ERROR_COLUMN, RAW_COLUMN, *KAFKA_ID_COLUMNS)}
    for i in range(bad.num_rows):
        err = get[ERROR_COLUMN][i]
        etype, _, message = err.partition(": ")
        yield [None, "default", etype, message or err, None, get["topic"][i],
               get["partition"][i], get["offset"][i], get[RAW_COLUMN][i]]
