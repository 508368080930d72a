r"""``topology.state.provider = redis``: Storm's ``RedisKeyValueStateProvider`` (seed 000).

Each task's :class:`RedisKeyValueState` lives in Redis under ``kstorm:state:<namespace>``
(namespace = topology:component:task), in four keys:

- ``<ns>``: the committed state, a hash of encoded key -> encoded value;
- ``<ns>$prepare``: the changes a task prepared for a txid (``\x01`` + value, or ``\x00``
  for a deleted key), written in one MULTI/EXEC by ``prepare_commit``;
- ``<ns>$meta``: ``committed`` (txid), ``prepared`` (txid), ``undo_txid``, ``undo_prev``;
- ``<ns>$undo``: the values the last commit replaced, so kstorm can take that commit back
  when Spark replays its batch (killed between the state's commit and Spark's commit log).

A state that records key groups (``tagging``: a bolt whose inputs are fields groupings from
bolts) keeps beside each key, in the same hashes, the field ``TAG + key`` holding the key
group of the tuple being executed when the key was written (``kstorm/state/rescale.py``),
so a restart with another parallelism can move each key to its new task.

``commit`` and ``rollback_commit`` are Lua scripts: each is one atomic step in Redis, so a
crash leaves the state either before or after it.

Configured by ``topology.state.provider.config`` in seed 000's JSON form::

    {"jedisPoolConfig": {"host": "localhost", "port": 6379, "timeout": 2000,
                         "database": 0, "password": "xyz"},
     "keySerializerClass": "mypkg.serde:KeySerializer",
     "valueSerializerClass": "mypkg.serde:ValueSerializer"}

Keys are pickled canonically and values pickled (types round-trip) unless a serializer class
(a Python class with ``serialize(obj) -> bytes`` and ``deserialize(data) -> obj``) is given.
``keyClass``/``valueClass`` name Java types Storm's default serializers need; kstorm refuses
them with the reason rather than ignore them.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kstorm._config_keys import load_object
from kstorm.errors import ConfigError
from kstorm.state import encode_key
from kstorm.state.rescale import MIXED, TAG

PREFIX = "kstorm:state:"
_PUT, _DEL = b"\x01", b"\x00"
_HSET_CHUNK = 1000

#: Seed 000's commit of one task's state (keys: data, prepare, meta, undo) as a Lua function,
#: shared by the provider's own script and a RedisSink that commits the states of a batch in
#: its own script (one atomic step for the sink's values and the states: ``StateCommit``).
STATE_COMMIT_FUNCTION = """
local function commit_state(data, prepare, meta, undo, txid)
  local committed = redis.call('HGET', meta, 'committed')
  if committed == txid then return 0 end
  redis.call('DEL', undo)
  if redis.call('HGET', meta, 'prepared') == txid then
    local kv = redis.call('HGETALL', prepare)
    for i = 1, #kv, 2 do
      local f, v = kv[i], kv[i + 1]
      local old = redis.call('HGET', data, f)
      if old then redis.call('HSET', undo, f, '\\1' .. old)
      else redis.call('HSET', undo, f, '\\0') end
      if string.byte(v, 1) == 1 then redis.call('HSET', data, f, string.sub(v, 2))
      else redis.call('HDEL', data, f) end
    end
  end
  redis.call('DEL', prepare)
  redis.call('HDEL', meta, 'prepared')
  if committed then redis.call('HSET', meta, 'undo_prev', committed)
  else redis.call('HDEL', meta, 'undo_prev') end
  redis.call('HSET', meta, 'undo_txid', txid, 'committed', txid)
  return 1
end
"""

_COMMIT = STATE_COMMIT_FUNCTION + """
return commit_state(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
"""

#: Commits several tasks' states (KEYS: four per task) at txid ARGV[1], in one step.
STATES_ONLY = STATE_COMMIT_FUNCTION + """
for s = 1, #KEYS, 4 do commit_state(KEYS[s], KEYS[s + 1], KEYS[s + 2], KEYS[s + 3], ARGV[1]) end
return 1
"""


@dataclass(frozen=True)
class StateCommit:
    """Every task state of the Redis provider committing ``txid``: for a sink to carry.

    A sink on the same server and database (``server``) that accepts it applies seed 000's
    commit of each task (``STATE_COMMIT_FUNCTION`` over ``keys``, four per task) in the
    same atomic script as the batch's values and record: one step, nothing to reconcile.

    Example:
        >>> StateCommit(("localhost", 6379, 0), 7, ("a", "a$prepare", "a$meta", "a$undo")).tasks
        1
    """

    server: tuple[str, int, int]
    txid: int
    keys: tuple[str, ...]

    @property
    def tasks(self) -> int:
        """Number of task states."""
        return len(self.keys) // 4


_UNDO = """
if redis.call('HGET', KEYS[2], 'committed') ~= ARGV[1]
   or redis.call('HGET', KEYS[2], 'undo_txid') ~= ARGV[1] then
  return redis.error_reply('no undo record for txid ' .. ARGV[1])
end
local kv = redis.call('HGETALL', KEYS[3])
for i = 1, #kv, 2 do
  local f, v = kv[i], kv[i + 1]
  if string.byte(v, 1) == 1 then redis.call('HSET', KEYS[1], f, string.sub(v, 2))
  else redis.call('HDEL', KEYS[1], f) end
end
redis.call('DEL', KEYS[3])
local prev = redis.call('HGET', KEYS[2], 'undo_prev')
if prev then redis.call('HSET', KEYS[2], 'committed', prev)
else redis.call('HDEL', KEYS[2], 'committed') end
redis.call('HDEL', KEYS[2], 'undo_txid', 'undo_prev')
return 1
"""

_POOL_KEYS = {"host", "port", "timeout", "database", "password"}
_KEYS = {"jedisPoolConfig", "keySerializerClass", "valueSerializerClass", "keyClass",
         "valueClass"}


class PickleSerializer:
    """The default serializer: canonical pickles for keys, pickles for values."""

    def __init__(self, canonical: bool = False) -> None:
        self.canonical = canonical

    def serialize(self, obj: Any) -> bytes:
        """``obj`` as bytes."""
        return encode_key(obj) if self.canonical else pickle.dumps(obj, protocol=5)

    def deserialize(self, data: bytes) -> Any:
        """The object ``data`` holds."""
        return pickle.loads(data)


def _load_class(path: str, key: str) -> Any:
    instance = load_object(path, f"topology.state.provider.config {key}",
                           "give 'package.module:Class' of a class with serialize(obj) -> "
                           "bytes and deserialize(bytes) -> obj")
    if not (callable(getattr(instance, "serialize", None))
            and callable(getattr(instance, "deserialize", None))):
        msg = f"topology.state.provider.config {key} = {path!r} has no serialize/deserialize"
        raise ConfigError(msg, hint="implement serialize(obj) -> bytes and "
                          "deserialize(bytes) -> obj")
    return instance


@dataclass(frozen=True)
class RedisStateConfig:
    """The validated ``topology.state.provider.config`` of the Redis provider."""

    host: str = "localhost"
    port: int = 6379
    timeout_ms: int = 2000
    database: int = 0
    password: str | None = None
    key_serializer: str | None = None
    value_serializer: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | str | None) -> RedisStateConfig:
        """From seed 000's JSON (a string or a mapping); unknown or unusable keys are errors."""
        if raw is None or raw == "":
            raw = {}
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                msg = f"topology.state.provider.config is not valid JSON: {exc}"
                raise ConfigError(msg) from exc
        if not isinstance(raw, Mapping):
            msg = f"topology.state.provider.config must be a JSON object, got {raw!r}"
            raise ConfigError(msg)
        unknown = sorted(set(raw) - _KEYS)
        if unknown:
            msg = f"topology.state.provider.config: unknown key(s) {unknown} for redis"
            raise ConfigError(msg, hint=f"known keys: {sorted(_KEYS)}")
        for key in ("keyClass", "valueClass"):
            if key in raw:
                msg = (f"topology.state.provider.config {key} = {raw[key]!r}: kstorm stores "
                       "keys and values with their Python types (pickled), so a class name "
                       "has nothing to do")
                raise ConfigError(msg, hint=f"remove {key}; use keySerializerClass/"
                                  "valueSerializerClass for another encoding")
        pool = raw.get("jedisPoolConfig", {}) or {}
        if not isinstance(pool, Mapping):
            msg = f"topology.state.provider.config jedisPoolConfig must be an object: {pool!r}"
            raise ConfigError(msg)
        unknown = sorted(set(pool) - _POOL_KEYS)
        if unknown:
            msg = f"topology.state.provider.config jedisPoolConfig: unknown key(s) {unknown}"
            raise ConfigError(msg, hint=f"known keys: {sorted(_POOL_KEYS)}")
        try:
            config = cls(host=str(pool.get("host", "localhost")),
                         port=int(pool.get("port", 6379)),
                         timeout_ms=int(pool.get("timeout", 2000)),
                         database=int(pool.get("database", 0)),
                         password=(str(pool["password"]) if pool.get("password") is not None
                                   else None),
                         key_serializer=raw.get("keySerializerClass"),
                         value_serializer=raw.get("valueSerializerClass"))
        except (TypeError, ValueError) as exc:
            msg = f"topology.state.provider.config jedisPoolConfig: {exc}"
            raise ConfigError(msg) from exc
        for key, path in (("keySerializerClass", config.key_serializer),
                          ("valueSerializerClass", config.value_serializer)):
            if path is not None:
                _load_class(path, key)
        return config

    @property
    def server(self) -> tuple[str, int, int]:
        """``(host, port, database)``: where the states live."""
        return (self.host, self.port, self.database)

    @property
    def where(self) -> str:
        """host:port/db, for messages (never the password)."""
        return f"redis://{self.host}:{self.port}/{self.database}"

    def __repr__(self) -> str:
        return f"RedisStateConfig({self.where}, timeout={self.timeout_ms} ms)"


_CLIENTS: dict[RedisStateConfig, Any] = {}
_LOCK = threading.Lock()


def _client(config: RedisStateConfig) -> Any:
    """One client (connection pool) per configuration and process."""
    import redis

    with _LOCK:
        client = _CLIENTS.get(config)
        if client is None:
            client = redis.Redis(host=config.host, port=config.port, db=config.database,
                                 password=config.password,
                                 socket_timeout=config.timeout_ms / 1000,
                                 socket_connect_timeout=config.timeout_ms / 1000)
            _CLIENTS[config] = client
        return client


class RedisKeyValueState:
    """One task's ``KeyValueState`` in Redis with seed 000's prepare/commit/rollback."""

    _MISSING = object()

    def __init__(self, namespace: str, config: RedisStateConfig) -> None:
        self.namespace = namespace
        self.config = config
        base = PREFIX + namespace
        self.redis_keys = (base, base + "$prepare", base + "$meta", base + "$undo")
        self._redis = _client(config)
        self._k = (_load_class(config.key_serializer, "keySerializerClass")
                   if config.key_serializer else PickleSerializer(canonical=True))
        self._v = (_load_class(config.value_serializer, "valueSerializerClass")
                   if config.value_serializer else PickleSerializer())
        self._pending: dict[bytes, bytes | None] = {}   # None: deleted
        self._read: dict[bytes, Any] = {}
        #: record each written key's key group (the executor sets it for rescalable bolts)
        self.tagging = False
        #: the key group (routing hash) of the tuple being executed; None outside execute
        self.key_group: int | None = None
        self._tags_read: dict[bytes, bytes | None] = {}

    # -- KeyValueState ---------------------------------------------------------------------

    def _value(self, k: bytes) -> Any:
        if k in self._pending:
            raw = self._pending[k]
            return self._MISSING if raw is None else self._v.deserialize(raw)
        value = self._read.get(k, self._MISSING)
        if value is self._MISSING and k not in self._read:
            if self.tagging:  # the key's key group in the same round trip
                raw, self._tags_read[k] = self._redis.hmget(self.redis_keys[0], k, TAG + k)
            else:
                raw = self._redis.hget(self.redis_keys[0], k)
            value = self._MISSING if raw is None else self._v.deserialize(raw)
            self._read[k] = value
        return value

    def _tag(self, k: bytes, deleted: bool = False) -> None:
        """Record the key group ``k`` is written under (``MIXED`` once it had another)."""
        tk = TAG + k
        if deleted:
            self._pending[tk] = None
            return
        group = b"?" if self.key_group is None else str(self.key_group).encode()
        if tk in self._pending:
            prior = self._pending[tk]
        else:
            prior = self._tags_read.get(k)
            if prior == group:
                return  # committed with this key group already: nothing to write
        self._pending[tk] = MIXED if prior is not None and prior != group else group

    def get(self, key: Any, default: Any = None) -> Any:
        """Value of ``key``, or ``default``."""
        value = self._value(self._k.serialize(key))
        return default if value is self._MISSING else value

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` (visible to this instance; durable once committed)."""
        k = self._k.serialize(key)
        self._pending[k] = self._v.serialize(value)
        if self.tagging:
            self._tag(k)

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its old value (or None)."""
        k = self._k.serialize(key)
        old = self._value(k)
        self._pending[k] = None
        if self.tagging:
            self._tag(k, deleted=True)
        return None if old is self._MISSING else old

    def discard(self, key: Any) -> None:
        """Remove ``key`` without reading its old value (no round trip)."""
        k = self._k.serialize(key)
        self._pending[k] = None
        if self.tagging:
            self._tag(k, deleted=True)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        seen = set()
        for k, raw in self._pending.items():
            seen.add(k)
            if raw is not None and not k.startswith(TAG):
                yield self._k.deserialize(k), self._v.deserialize(raw)
        for k, raw in self._redis.hscan_iter(self.redis_keys[0], count=1000):
            if k not in seen and not k.startswith(TAG):
                yield self._k.deserialize(k), self._v.deserialize(raw)

    # -- State -----------------------------------------------------------------------------

    def prepare_commit(self, txid: int) -> None:
        """Save this task's changes aside under ``txid`` (one MULTI/EXEC)."""
        data, prepare, meta, _ = self.redis_keys
        items = [(k, _DEL if v is None else _PUT + v) for k, v in self._pending.items()]
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(prepare)
            for i in range(0, len(items), _HSET_CHUNK):
                pipe.hset(prepare, mapping=dict(items[i:i + _HSET_CHUNK]))
            pipe.hset(meta, "prepared", txid)
            pipe.execute()
        self._pending.clear()
        self._read.clear()
        self._tags_read.clear()

    def commit(self, txid: int) -> None:
        """Apply the changes prepared for ``txid`` (none: an empty commit) in one Lua step."""
        self._redis.eval(_COMMIT, 4, *self.redis_keys, txid)
        self._read.clear()
        self._tags_read.clear()

    def rollback(self) -> None:
        """Discard the prepared changes and this instance's pending ones."""
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.redis_keys[1])
            pipe.hdel(self.redis_keys[2], "prepared")
            pipe.execute()
        self._pending.clear()
        self._read.clear()
        self._tags_read.clear()

    def committed_txid(self) -> int | None:
        """The last txid committed (None: never)."""
        raw = self._redis.hget(self.redis_keys[2], "committed")
        return int(raw) if raw is not None else None

    def prepared_txid(self) -> int | None:
        """The txid whose changes are prepared and not committed (None: none)."""
        raw = self._redis.hget(self.redis_keys[2], "prepared")
        return int(raw) if raw is not None else None

    def rollback_commit(self, txid: int) -> None:
        """Take back the commit of ``txid`` (the last one): the state as before it."""
        self._redis.eval(_UNDO, 3, self.redis_keys[0], self.redis_keys[2], self.redis_keys[3], txid)
        self._read.clear()
        self._tags_read.clear()

    def __len__(self) -> int:
        n = int(self._redis.hlen(self.redis_keys[0]))
        tags = sum(1 for _ in self._redis.hscan_iter(self.redis_keys[0], match=TAG + b"*",
                                                     count=1000)) if n else 0
        return n - tags

    def committed_fields(self) -> dict[bytes, bytes]:
        """The committed hash as stored: encoded keys, values and their key groups."""
        return dict(self._redis.hscan_iter(self.redis_keys[0], count=1000))


class RedisKeyValueStateProvider:
    """``topology.state.provider = redis`` (Storm's ``RedisKeyValueStateProvider``)."""

    def __init__(self, config: RedisStateConfig | Mapping[str, Any] | str | None = None
                 ) -> None:
        self.config = (config if isinstance(config, RedisStateConfig)
                       else RedisStateConfig.parse(config))

    def new_state(self, namespace: str, conf: Any, context: Any) -> RedisKeyValueState:
        """The state of ``namespace`` (one task of one component)."""
        return RedisKeyValueState(namespace, self.config)

    def internal_state(self, namespace: str, conf: Any, context: Any) -> RedisKeyValueState:
        """A state for kstorm's own data (windows): this server, pickle serializers."""
        return RedisKeyValueState(namespace, dataclasses.replace(
            self.config, key_serializer=None, value_serializer=None))

    def check(self) -> None:
        """Raise a ConfigError naming the server when it does not answer."""
        import redis

        try:
            _client(self.config).ping()
        except redis.RedisError as exc:
            msg = (f"state provider redis: {self.config.where} does not answer "
                   f"({type(exc).__name__}: {exc})")
            raise ConfigError(msg, hint="check topology.state.provider.config's "
                              "jedisPoolConfig (host, port, database, password) and that "
                              "the server is up") from exc


def replace_states(old: list[RedisKeyValueState], new: list[RedisKeyValueState],
                   layout: list[dict[bytes, bytes]], txid: int | None) -> None:
    """Replace the tasks ``old`` by ``new`` holding ``layout`` at ``txid``, in one MULTI/EXEC.

    The old and new tasks' keys are deleted and the new data and ``committed`` txid written
    in one transaction: a crash leaves either the old tasks or the new ones, never a mix.
    """
    if not new:
        return
    names = {k for s in old + new for k in s.redis_keys}
    with new[0]._redis.pipeline(transaction=True) as pipe:
        pipe.delete(*sorted(names))
        for state, fields in zip(new, layout, strict=True):
            items = list(fields.items())
            for i in range(0, len(items), _HSET_CHUNK):
                pipe.hset(state.redis_keys[0], mapping=dict(items[i:i + _HSET_CHUNK]))
            if txid is not None:
                pipe.hset(state.redis_keys[2], "committed", txid)
        pipe.execute()
    for state in old + new:
        state._read.clear()
        state._tags_read.clear()
