"""``RedisSink``: an exactly-once Redis sink (seed 002's transactional and opaque state).

The sink is a picklable declaration. Its Redis client is created on first use and
dropped when pickled. The kstorm runtime calls it on the driver, in the ordered
commit phase of each micro-batch (txid = txid base + Spark batch id)::

    sink = RedisSink(RedisConfig(port=6379), key="counts:{word}", value="n", merge="add")
    sink = sink.bind("wordcount")                     # done by the runtime
    sink.commit_batch(7, [{"word": "storm", "n": 3}], {"words": {0: 120, 1: 98}})
    sink.committed()                  # Committed(txid=7, offsets={'words': {0: 120, 1: 98}})
    sink.read_all("counts:")          # {'counts:storm': 3}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from kstorm.errors import ConfigError, SinkError
from kstorm.failpoints import pause_after_commit, pause_before_commit
from kstorm.sink import BaseSink, CommitRecord, SinkBatch, SinkContext
from kstorm.state.redis import STATES_ONLY, StateCommit

from ._batch import Entry, Row, build_entries, flatten, key_function, value_function
from ._codec import VALUE_CODECS, ValueCodec
from ._columns import combine_values, fold_rows, folded_value, table_chunks
from ._keys import STATE_PREFIX, KeyTemplate, Namespace, check_name, offset_fields, parse_record
from ._lua import commit_script
from ._optimistic import commit_optimistic
from ._read import read_all
from ._rules import MODES, Mode, replays
from .config import RedisConfig
from .merge import LuaMerge, PythonMerge, resolve_merge

if TYPE_CHECKING:
    import redis

    from kstorm.tuple import Fields

_MAX_TXID = 2**53  # the commit script compares txids as Lua numbers (doubles)
_STAGE_TTL_S = 24 * 3600


class Committed(NamedTuple):
    """The batch record: the last committed txid and the source end offsets it read to."""

    txid: int | None
    offsets: dict[str, dict[int, int]]


@dataclass(frozen=True)
class CommitResult:
    """What ``commit_batch`` did.

    ``applied`` is False when the txid was already recorded, which includes the rare
    case of this very call's first attempt committing before its reply was lost.
    """

    txid: int
    applied: bool
    written: int  # keys written
    skipped: int  # keys the transactional rule skipped (already written by this txid)


class RedisSink(BaseSink):
    """Writes each batch's rows to Redis with its txid, exactly once.

    Attach it like a bolt; it runs in the commit phase of each batch::

        builder.set_bolt("store", RedisSink(RedisConfig.from_url(url), key="c:{key}",
                                            value="count", merge="set")
                         ).shuffle_grouping("per_key")

    Args:
        config: Where Redis is.
        key: Key template over row fields (``"counts:{word}:{window_start}"``) or a
            function ``row -> str``.
        value: Row field holding the value, a record ``{name: row field}`` (stored as a
            JSON object, e.g. ``{"count": "count", "sum": "total"}``), or a function
            ``row -> value``. Not used by ``merge="count"``.
        field: ``None`` stores each value at its own key; a template or function
            stores it in the hash at ``key``, under this field.
        merge: ``"set"``, ``"add"``, ``"count"``, ``"max"``, ``"min"``, a
            :class:`~sinks.redis.merge.LuaMerge`, or a Python callable ``(old, new) -> value``.
        mode: ``"opaque"`` (keeps ``prev``: right even if a replayed batch differs)
            or ``"transactional"`` (skips a key already written by the txid).
        topology: Topology name; the kstorm runtime sets it with :meth:`bind`.
        sink_id: Tells two Redis sinks of one topology apart.
        value_codec: ``"json"`` (numbers as plain decimals, records as JSON) or
            ``"string"`` (str values verbatim).
        max_entries_per_call: Batches with more keys are uploaded in chunks first,
            then still applied by one script.
    """

    def __init__(self, config: RedisConfig, *, key: str | Callable[[Row], str],
                 value: str | Mapping[str, str] | Callable[[Row], Any] | None = None,
                 field: str | Callable[[Row], str] | None = None,
                 merge: str | LuaMerge | Callable[[Any, Any], Any] = "set",
                 mode: Mode = "opaque", topology: str | None = None, sink_id: str = "redis",
                 value_codec: ValueCodec = "json", max_entries_per_call: int = 50_000) -> None:
        _require(isinstance(config, RedisConfig), "config", "a RedisConfig", config)
        _require(mode in MODES, "mode", f"one of {MODES}", mode)
        _require(value_codec in VALUE_CODECS, "value_codec", f"one of {VALUE_CODECS}", value_codec)
        _require(type(max_entries_per_call) is int and max_entries_per_call >= 1,
                 "max_entries_per_call", "an int >= 1", max_entries_per_call)
        self.merge = resolve_merge(merge)
        numeric = isinstance(self.merge, LuaMerge) and self.merge.numeric
        _require(not numeric or value_codec == "json", "value_codec",
                 f"'json' for merge {self.merge.name!r}", value_codec)
        _require((merge == "count") == (value is None), "value",
                 "a field name or function (omitted only with merge='count')", value)
        self.config, self.mode, self.value_codec = config, mode, value_codec
        self.max_entries_per_call = max_entries_per_call
        self.key, self.field, self.value = key, field, value
        self._key_of = key_function("key", key)
        self._field_of = None if field is None else key_function("field", field)
        self._value_of = value_function(value)
        self.topology = None if topology is None else check_name("topology", topology)
        self.sink_id = check_name("sink_id", sink_id)
        self._client: redis.Redis | None = None
        self._commit: Any = None  # the registered commit script (redis-py Script)

    def needed_fields(self) -> tuple[str, ...]:
        """The fields the key and field templates and the value name (functions: none)."""
        names: list[str] = []
        for spec in (self.key, self.field):
            if isinstance(spec, str):
                names += KeyTemplate(spec).fields
        if isinstance(self.value, str):
            names.append(self.value)
        elif isinstance(self.value, Mapping):
            names += self.value.values()
        return tuple(dict.fromkeys(names))

    def bind(self, topology: str, sink_id: str | None = None) -> RedisSink:
        """A copy of this sink that records its batches under ``topology`` (and ``sink_id``)."""
        clone = object.__new__(RedisSink)
        clone.__setstate__(self.__getstate__())
        clone.topology = check_name("topology", topology)
        clone.sink_id = self.sink_id if sink_id is None else check_name("sink_id", sink_id)
        return clone

    @property
    def namespace(self) -> Namespace:
        """The bookkeeping keys of this sink (needs the topology name)."""
        if self.topology is None:
            msg = "RedisSink: topology is not set; the kstorm runtime binds it " \
                  "(or call sink.bind('<topology name>'))"
            raise ConfigError(msg)
        return Namespace(self.topology, self.sink_id)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_commit": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (f"RedisSink({self.config.url}, key={self.key!r}, merge={self.merge.name!r}, "
                f"mode={self.mode!r}, topology={self.topology!r}, sink_id={self.sink_id!r})")

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = self.config.client()
            if isinstance(self.merge, LuaMerge):
                self._commit = self._client.register_script(commit_script(self.merge))
        return self._client

    def close(self) -> None:
        """Close the Redis client, if one is open. The sink stays usable."""
        if self._client is not None:
            self._client.close()
        self._client, self._commit = None, None

    records_offsets = True  # stores each batch's offsets and the runtime's state (reconcile)
    accepts_table = True  # closed windows of a built-in windowed aggregate, as columns

    # -- the kstorm sink contract (driver, commit phase) ----------------------------------

    def open(self, context: SinkContext) -> None:
        """Bind to the topology's name and this component's id (the record's namespace)."""
        self.topology = check_name("topology", context.topology_name)
        self.sink_id = check_name("sink_id", context.component_id)
        self._redis()  # the client (redis-py connects on the first command)

    def commit(self, batch: SinkBatch) -> None:
        """Apply one batch with its offsets and state (``commit_batch`` under its txid).

        Every earlier txid of the checkpoint's lineage must be in Redis: a record behind
        ``txid - 1`` means Redis lost acknowledged writes, and writing on would hide the gap.
        """
        if not batch.first_of_lineage:
            recorded = self.committed().txid
            if recorded is None or recorded < batch.txid - 1:
                msg = (f"{self!r}: Redis holds batch record txid {recorded} but txid "
                       f"{batch.txid - 1} was committed before this one: Redis lost "
                       "acknowledged writes (restarted without persistence?). Stopping so "
                       "nothing is written over the gap; restart the topology to resume from "
                       "the sink's record")
                raise SinkError(msg)
        # (a subclass that overrides commit_batch gets its rows through it)
        own = type(self).commit_batch is RedisSink.commit_batch
        if own and batch.table is None and not isinstance(self.merge, PythonMerge):
            # tuples, often many per key (a running count per word): folded per key first
            found = batch.values_by_fields()
            folded = None if found is None else fold_rows(
                found[0], found[1], key=self.key, field=self.field, value=self.value,
                merge=self.merge)
            if folded is not None:
                self._apply(batch.txid, batch.offsets, batch.state, batch.states,
                            rows=folded, value_of=folded_value)
                return
        if batch.table is not None and not batch.tuples:  # closed windows, as columns
            chunks = None if isinstance(self.merge, PythonMerge) or not own else table_chunks(
                batch.table, key=self.key, field=self.field, value=self.value,
                codec=self.value_codec, size=self.max_entries_per_call,
                numeric=self.merge.numeric)
            if chunks is not None:
                self._apply(batch.txid, batch.offsets, batch.state, batch.states, chunks=chunks)
                return
            rows: list[Any] = batch.table.to_pylist()
        else:
            # (a tuple has as many values as fields: emit checks; strict would cost ~25%)
            rows = [dict(zip(t.fields.names, t.values))  # noqa: B905
                    for t in batch.tuples]
        self.commit_batch(batch.txid, rows, batch.offsets, batch.state, states=batch.states)

    def combine(self, fields: Fields, values: list[list[Any]]) -> list[list[Any]] | None:
        """A task's tuples for this sink with each key's folded into one (see BaseSink).

        Only for the sink's own commit and a merge whose fold ignores order (``add``,
        ``max``, ``min``) over an integer value field: ``combine_values``.
        """
        if (type(self).commit is not RedisSink.commit
                or type(self).commit_batch is not RedisSink.commit_batch):
            return None
        return combine_values(fields.names, values, key=self.key, field=self.field,
                              value=self.value, merge=self.merge)

    def accepts_states(self, states: Any) -> bool:
        """Yes for the Redis state provider's states on this sink's server and database.

        They then commit in this sink's commit script (one atomic step); a Python merge's
        optimistic commit cannot carry them.
        """
        server = (self.config.host, self.config.port, self.config.database)
        return (isinstance(states, StateCommit) and isinstance(self.merge, LuaMerge)
                and states.server == server)

    def committed_offsets(self) -> CommitRecord | None:
        """``(txid, {topic: {partition: end}})`` of the last committed batch, or None."""
        record = self.committed()
        return None if record.txid is None else CommitRecord(record.txid, record.offsets)

    def committed_state(self) -> dict[str, bytes]:
        """The runtime state stored with the last committed batch (name -> bytes)."""
        raw = self._redis().hgetall(self.namespace.record)
        out = {}
        for name, value in raw.items():
            key = name.decode() if isinstance(name, bytes) else name
            if key.startswith(STATE_PREFIX):
                out[key[len(STATE_PREFIX):]] = value
        return out

    def commit_batch(self, txid: int, rows: Iterable[Mapping[str, Any]],
                     offsets: Mapping[str, Mapping[int, int]],
                     state: Mapping[str, bytes] | None = None, *,
                     states: StateCommit | None = None) -> CommitResult:
        """Apply batch ``txid``'s rows and record its source end offsets, in one atomic step.

        1. Check the arguments (nothing touches Redis yet).
        2. Turn the rows into one entry per ``(key, field)``; rows sharing one are folded.
        3. A batch of more than ``max_entries_per_call`` keys is uploaded first, in
           numbered chunks, to a staging hash that nothing reads but the commit script.
           A crash here leaves only that hash; the replay deletes and re-uploads it.
        4. Test hook: pause here if ``KSTORM_TEST_PAUSE_IN_COMMIT`` is set.
        5. One script (EVALSHA), atomic in Redis, however large the batch: if the
           record's txid is at or above ``txid``, do nothing (the batch is in); else
           read every key and compute its value by the update rules (an error here
           leaves Redis as it was), write the values with txid (and prev), and write
           the record: ``txid`` and ``topic/partition -> end offset``.

        A Python merge replaces steps 3 and 5 with an optimistic transaction: read,
        merge on the driver, then one script writes everything if no key changed
        meanwhile (``_optimistic.py``). Retrying is always safe: a retry of a commit
        that did happen finds its txid recorded and does nothing.

        ``states`` (see :meth:`accepts_states`) commit in the step-5 script, after the
        values and the record, also when the batch is already in.

        Example:
            >>> sink.commit_batch(3, [{"word": "a", "n": 2}], {"words": {0: 10}})  # doctest: +SKIP
            CommitResult(txid=3, applied=True, written=1, skipped=0)
        """
        return self._apply(txid, offsets, state, states, rows=rows)

    def _apply(self, txid: int, offsets: Mapping[str, Mapping[int, int]],
               state: Mapping[str, bytes] | None, states: StateCommit | None, *,
               rows: Iterable[Mapping[str, Any]] = (), chunks: list[str] | None = None,
               value_of: Callable[[Row], Any] | None = None) -> CommitResult:
        """:meth:`commit_batch`'s steps.

        ``chunks`` (a Lua merge only): step 2 done already; ``value_of``: a row's value, when
        not the sink's (rows folded already, ``fold_rows``).
        """
        # Step 1
        _require(type(txid) is int and 0 <= txid < _MAX_TXID, "txid", "an int in 0..2**53",
                 txid, error=SinkError)
        if states is not None and (not self.accepts_states(states) or states.txid != txid):
            msg = f"{self!r}: cannot carry the state commit {states!r} of txid {txid}"
            raise SinkError(msg)
        state_keys = list(states.keys) if states is not None else []
        ns, offset_args = self.namespace, offset_fields(offsets)
        for name, blob in (state or {}).items():
            offset_args += [STATE_PREFIX + name, blob]
        # Step 2
        entries: list[Entry] = []
        if chunks is None:
            entries = build_entries(rows, key=self._key_of, field=self._field_of,
                                    value=value_of or self._value_of, merge=self.merge)
        client = self._redis()
        try:
            if isinstance(self.merge, PythonMerge):
                if chunks is not None:
                    msg = f"{self!r}: a Python merge reads every key; it takes rows, not chunks"
                    raise SinkError(msg)
                pause_before_commit(f"{ns.prefix} txid {txid}")
                applied, written, skipped = commit_optimistic(
                    client, ns, mode=self.mode, txid=txid, entries=entries, offsets=offset_args,
                    merge=self.merge, codec=self.value_codec)
                return CommitResult(txid, applied, written, skipped)
            # Step 3
            size = self.max_entries_per_call
            if chunks is None:
                chunks = [_chunk(entries[at:at + size], self.value_codec)
                          for at in range(0, len(entries), size)]
            keys, inline = [ns.record], chunks
            if len(chunks) > 1:
                recorded = self.committed().txid
                if recorded is not None and not replays(self.mode, recorded, txid):
                    if state_keys:  # the batch is in; its states may not be (a replay)
                        client.eval(STATES_ONLY, len(state_keys), *state_keys, str(txid))
                    return CommitResult(txid, False, 0, 0)
                keys, inline = [ns.record, ns.stage(txid)], []
                _stage(client, ns.stage(txid), chunks)
            # Step 4
            pause_before_commit(f"{ns.prefix} txid {txid}")
            # Step 5
            args = [str(txid), self.mode, ns.prefix, str(len(offset_args) // 2), *offset_args,
                    str(len(chunks)), *inline, str(len(state_keys) // 4)]
            applied, written, skipped = self._commit(keys=keys + state_keys, args=args,
                                                     client=client)
            pause_after_commit(f"{ns.prefix} txid {txid}")  # test hook
            return CommitResult(txid, bool(applied), written, skipped)
        except SinkError:
            raise
        except Exception as exc:  # redis-py's errors, after its retries
            msg = f"{self!r}: txid {txid} was not committed: {exc}"
            raise SinkError(msg) from exc

    def committed(self) -> Committed:
        """The batch record: last committed txid (None if none) and source end offsets."""
        try:
            raw = self._redis().hgetall(self.namespace.record)
        except SinkError:
            raise
        except Exception as exc:
            msg = f"{self!r}: cannot read the batch record: {exc}"
            raise SinkError(msg) from exc
        return Committed(*parse_record(raw))

    def read_all(self, prefix: str) -> dict[str, Any]:
        """Current values of the keys starting with ``prefix`` (kstorm's own keys left out).

        A plain key maps to its value; a hash key to ``{field: value}``.

        Example:
            >>> sink.read_all("counts:")  # doctest: +SKIP
            {'counts:spark': 5, 'counts:storm': 3}
        """
        try:
            return read_all(self._redis(), prefix, self.value_codec)
        except Exception as exc:
            msg = f"{self!r}: cannot read keys {prefix!r}*: {exc}"
            raise SinkError(msg) from exc


def _chunk(entries: list[Entry], codec: ValueCodec) -> str:
    """A JSON array of the commit script's entry arguments."""
    return json.dumps(flatten(entries, codec), separators=(",", ":"), ensure_ascii=False)


def _stage(client: redis.Redis, stage: str, chunks: list[str]) -> None:
    """Upload ``chunks`` to the hash ``stage`` by number (a retried upload is harmless)."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(stage)
    for number, chunk in enumerate(chunks, 1):
        pipe.hset(stage, str(number), chunk)
    pipe.expire(stage, _STAGE_TTL_S)
    pipe.execute()


def _require(ok: bool, key: str, expected: str, got: Any,
             error: type[Exception] = ConfigError) -> None:
    if not ok:
        msg = f"RedisSink: {key} must be {expected}, got {got!r}"
        raise error(msg)


__all__ = ["CommitResult", "Committed", "RedisSink"]
