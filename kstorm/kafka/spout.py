"""The Kafka spout: a transactional spout over Kafka topics (seed 002).

A :class:`KafkaSpout` is a picklable *declaration*: which topics, how values (and keys)
become fields, where to start, and how much to read per batch. It opens no connection; the
Spark runtime (``kstorm/_spark/kafka_source.py``) reads the records. The message id of a
spout tuple is ``(topic, partition, offset)``.

A record whose value cannot be deserialized is not dropped: it becomes a row whose serde
fields are null, with ``__error`` (``"<ErrorType>: <message>"``) and ``__raw`` (the value
bytes) set, so the runtime can route it to the dead-letter stream.

Example:
    >>> spout = KafkaSpout("clicks", max_offsets_per_batch=10_000)  # doctest: +SKIP
    >>> spout.output_fields()  # doctest: +SKIP
    ['value', 'topic', 'partition', 'offset', 'kafka_key', 'kafka_timestamp', 'kafka_headers']
"""

from __future__ import annotations

import base64
import dataclasses
import pickle
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, cast

import pyarrow as pa

from kstorm._runtime.envelope import ERROR_COLUMN, RAW_COLUMN
from kstorm.acking.retry import RetryPolicy
from kstorm.component import OutputFieldsDeclarer
from kstorm.errors import ConfigError, MissingDependencyError
from kstorm.kafka.connection import KafkaConnection, is_secret_key
from kstorm.spout import BaseRichSpout
from kstorm.tuple import Fields
from serdes.base import Serde

METADATA_FIELDS = ("topic", "partition", "offset", "kafka_key", "kafka_timestamp", "kafka_headers")
ERROR_FIELD = ERROR_COLUMN  # a record that failed to deserialize: its error ...
RAW_FIELD = RAW_COLUMN      # ... and its bytes
HEADERS_TYPE = pa.list_(
    pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))
)
METADATA_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_key", pa.binary()),
        ("kafka_timestamp", pa.int64()),  # milliseconds since the epoch, as Kafka keeps it
        ("kafka_headers", HEADERS_TYPE),
    ]
)
NAMED_STARTS = ("earliest", "latest", "group")
EARLIEST, LATEST = -2, -1  # sentinels allowed in an explicit starting-offsets map (as Spark)
_RESERVED_CONSUMER_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "group.id": "group_id",
    "enable.auto.commit": "nothing (the spout commits offsets itself)",
}


def _default_value_serde() -> Serde:
    try:
        from serdes.string import StringSerde
    except ImportError as exc:  # pragma: no cover - depends on the serdes package
        msg = (
            "KafkaSpout: the default value serde serdes.string.StringSerde is not available; "
            "pass value_serde=... explicitly"
        )
        raise MissingDependencyError(msg) from exc
    return StringSerde()


@dataclass(frozen=True, repr=False)
class KafkaSpout(BaseRichSpout):
    """Declares a Kafka source of tuples.

    Args:
        topics: one topic or a list of topics (or use ``pattern``).
        pattern: a regular expression that whole topic names match; new matching topics
            are picked up while the topology runs.
        bootstrap_servers: ``host:port,...``; ``None``: the topology's
            ``kafka.bootstrap.servers``.
        value_serde: turns a record value into fields (default: one string field ``value``).
        key_serde: turns the key into fields too; ``None`` keeps only the raw ``kafka_key``.
        starting_offsets: ``"earliest"``, ``"latest"``, ``"group"`` (the consumer group's
            committed offsets, earliest where none) or ``{topic: {partition: offset}}``
            (``-2`` earliest, ``-1`` latest; unlisted partitions start at earliest). Where
            a new checkpoint starts: a checkpoint that ran resumes where it left off, and
            partitions found later start at their earliest offset.
        group_id: consumer group whose committed offsets follow the spout's progress.
        max_offsets_per_batch: at most this many records per batch, shared fairly.
        first_batch_max_offsets: a smaller cap for the first batch after a (re)start, so
            the first results come out soon even when the steady batches are large
            (default: 50,000; ``None`` turns the ramp-up off).
        max_offsets_per_task: split a partition's range into read tasks of this size
            (without it, a range is one task and short ranges share one, 10,000 offsets or
            more a task).
        consumer_config: extra librdkafka settings (fetch sizes...); security settings in it
            (``security.protocol``, ``sasl.*``, ``ssl.*``) apply to every client of the spout.
        connection: a :class:`kstorm.KafkaConnection` to use instead of the topology's
            (``bootstrap_servers`` and ``consumer_config``'s security settings still apply
            on top). The runtime fills it in from the topology's ``kafka.*`` settings.
        poll_timeout: seconds one ``consume`` call waits for records.
        read_timeout: seconds a read task waits without progress before failing.
        metadata_refresh_secs: how often new partitions and topics are looked for.
        retry: at-least-once (``topology.guarantee``): when to re-emit a record whose tuple
            tree failed or timed out, and after how many retries it goes to the dead-letter
            topic (default: storm-kafka-client's backoff, unlimited retries).
        opaque: seed 002's opaque partitioned transactional spout: a batch whose offset range
            can no longer be read in full when it is replayed (retention deleted records,
            the partition is gone) emits what is left instead of failing, with a warning
            naming the range. Sinks in opaque mode then recompute that batch from their
            stored previous values. Default: such a replay fails the batch
            (``SourceError``), as a (non-opaque) transactional spout must.

    Example:
        >>> KafkaSpout(pattern="events-.*", group_id="app", starting_offsets="group",
        ...            value_serde=my_serde)  # doctest: +SKIP
    """

    topics: str | Sequence[str] | None = None
    _: KW_ONLY
    pattern: str | None = None
    bootstrap_servers: str | None = None
    value_serde: Serde | None = None
    key_serde: Serde | None = None
    starting_offsets: str | Mapping[str, Mapping[int, int]] = "earliest"
    group_id: str | None = None
    max_offsets_per_batch: int | None = None
    first_batch_max_offsets: int | None = 50_000
    max_offsets_per_task: int | None = None
    consumer_config: Mapping[str, str] | None = None
    poll_timeout: float = 0.2
    read_timeout: float = 60.0
    metadata_refresh_secs: float = 10.0
    retry: RetryPolicy | None = None
    connection: KafkaConnection | None = None
    opaque: bool = False

    source_kind: ClassVar[str] = "kafka"  # the runtime reads it with its own Spark source

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalize once, here
        set_(self, "topics", _check_topics(self.topics, self.pattern))
        if self.value_serde is None:
            set_(self, "value_serde", _default_value_serde())
        for name in ("value_serde", "key_serde"):
            serde = getattr(self, name)
            if serde is not None and not isinstance(serde, Serde):
                msg = (
                    f"KafkaSpout {name}: expected a serde (fields, arrow_schema, "
                    f"deserialize_batch...), got {type(serde).__name__}"
                )
                raise ConfigError(msg)
        _check_optional_str("bootstrap_servers", self.bootstrap_servers)
        _check_optional_str("group_id", self.group_id)
        set_(self, "starting_offsets", self._check_starting_offsets())
        for name in ("max_offsets_per_batch", "first_batch_max_offsets",
                     "max_offsets_per_task"):
            _check_positive_int(name, getattr(self, name))
        for name in ("poll_timeout", "read_timeout", "metadata_refresh_secs"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or value < 0
                or (value == 0 and name != "metadata_refresh_secs")
            ):
                msg = f"KafkaSpout {name}: expected a positive number, got {value!r}"
                raise ConfigError(msg)
        set_(self, "consumer_config", _check_consumer_config(self.consumer_config))
        if self.connection is not None and not isinstance(self.connection, KafkaConnection):
            msg = ("KafkaSpout connection: expected a kstorm.KafkaConnection, got "
                   f"{self.connection!r}")
            raise ConfigError(msg)
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            msg = f"KafkaSpout retry: expected a kstorm.acking.RetryPolicy, got {self.retry!r}"
            raise ConfigError(msg)
        if not isinstance(self.opaque, bool):
            msg = f"KafkaSpout opaque: expected True or False, got {self.opaque!r}"
            raise ConfigError(msg)
        self.output_fields()  # fail early on a field-name collision

    @property
    def transactional_kind(self) -> str:
        """As a transactional spout (seed 002): ``"opaque"`` or ``"partitioned"``."""
        return "opaque" if self.opaque else "partitioned"

    def __repr__(self) -> str:
        where = f"pattern={self.pattern!r}" if self.pattern else f"{list(self.topics or ())!r}"
        shown = {k: ("***" if is_secret_key(k) else v)
                 for k, v in (self.consumer_config or {}).items()}
        return (f"KafkaSpout({where}, bootstrap_servers={self.bootstrap_servers!r}, "
                f"group_id={self.group_id!r}, consumer_config={shown!r})")

    # -- declaration -------------------------------------------------------------------

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The default stream carries :meth:`output_fields`."""
        declarer.declare(Fields(self.output_fields()))

    def serde_fields(self) -> list[str]:
        """Fields the serdes produce (value serde, then key serde)."""
        fields = list(self._value_serde.fields())
        if self.key_serde is not None:
            fields += list(self.key_serde.fields())
        return fields

    def output_fields(self) -> list[str]:
        """The tuple fields: serde fields, then the Kafka metadata fields."""
        names = self.serde_fields() + list(METADATA_FIELDS)
        reserved = {ERROR_FIELD, RAW_FIELD}
        clashes = sorted({n for n in names if names.count(n) > 1 or n in reserved})
        if clashes:
            msg = (
                f"KafkaSpout: field name(s) {clashes} are produced twice or reserved (the "
                f"metadata fields are {list(METADATA_FIELDS)}); rename the serde's field(s)"
            )
            raise ConfigError(msg)
        return names

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of the rows the source produces: output fields + error columns."""
        serde_schemas = [self._value_serde.arrow_schema()]
        if self.key_serde is not None:
            serde_schemas.append(self.key_serde.arrow_schema())
        fields = [f for schema in serde_schemas for f in schema]
        fields += list(METADATA_SCHEMA)
        fields += [pa.field(ERROR_FIELD, pa.string()), pa.field(RAW_FIELD, pa.binary())]
        return pa.schema(fields)

    def subscribes(self, topic: str) -> bool:
        """Whether ``topic`` is one of this spout's topics."""
        if self.pattern is None:
            return topic in (self.topics or ())
        return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None

    def with_connection(self, connection: KafkaConnection) -> KafkaSpout:
        """A copy whose clients all use ``connection`` (the runtime resolves it at submit)."""
        return dataclasses.replace(self, connection=connection)

    def with_bootstrap(self, servers: str) -> KafkaSpout:
        """A copy reading from ``servers`` with this spout's own security settings."""
        base = self.connection or KafkaConnection(bootstrap_servers=servers)
        return dataclasses.replace(self, bootstrap_servers=servers, connection=base.with_overrides(
            servers, self.consumer_config))

    def client_config(self, role: str = "consumer", *, tuning: Mapping[str, Any] | None = None,
                      **ids: Any) -> dict[str, Any]:
        """Librdkafka settings of one of this spout's clients.

        Consumer roles get ``tuning`` (kstorm's defaults for that client) with the spout's
        ``consumer_config`` over it.

        Raises:
            ConfigError: the runtime has not resolved the spout's connection yet.
        """
        own = ({**(tuning or {}), **(self.consumer_config or {})}
               if role in ("consumer", "group") else None)
        return self.resolved_connection().client_config(role, role_config=own, **ids)  # type: ignore[arg-type]

    def resolved_connection(self) -> KafkaConnection:
        """The connection every client of this spout uses.

        ``connection`` when the runtime (or you) set it, else one from ``bootstrap_servers``
        and the security settings of ``consumer_config``.

        Raises:
            ConfigError: neither is set.
        """
        if self.connection is not None:
            return self.connection
        if self.bootstrap_servers:
            return KafkaConnection.from_client_config(self.bootstrap_servers,
                                                      self.consumer_config)
        msg = (f"KafkaSpout({self.topics or self.pattern!r}): no brokers: pass "
               "bootstrap_servers=... or set 'kafka.bootstrap.servers' in the topology conf")
        raise ConfigError(msg)

    # -- transport to the Spark source -------------------------------------------------

    def to_options(self, dumps: Callable[[Any], bytes] = pickle.dumps) -> dict[str, str]:
        """Data source options: ``{"spec": <base64 of the pickled spout>}``.

        Pickled rather than spelled out: Spark may show a source's options, and the spout's
        connection holds secrets.
        """
        return {"spec": base64.b64encode(dumps(self)).decode()}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSpout:
        """Rebuild the spout from :meth:`to_options` output."""
        if "spec" not in options:
            msg = "kstorm_kafka source: missing option 'spec' (use read_stream())"
            raise ConfigError(msg)
        spout = pickle.loads(base64.b64decode(options["spec"]))
        if not isinstance(spout, cls):
            msg = f"kstorm_kafka source: option 'spec' holds a {type(spout).__name__}"
            raise ConfigError(msg)
        return spout

    # -- validation helpers ------------------------------------------------------------

    @property
    def _value_serde(self) -> Serde:
        return cast(Serde, self.value_serde)  # never None after __post_init__

    def _check_starting_offsets(self) -> str | dict[str, dict[int, int]]:
        start = self.starting_offsets
        if isinstance(start, str):
            if start not in NAMED_STARTS:
                msg = (
                    f"KafkaSpout starting_offsets: expected one of {list(NAMED_STARTS)} or "
                    f"{{topic: {{partition: offset}}}}, got {start!r}"
                )
                raise ConfigError(msg)
            if start == "group" and self.group_id is None:
                msg = "KafkaSpout starting_offsets='group' needs group_id=..."
                raise ConfigError(msg)
            return start
        if not isinstance(start, Mapping):
            msg = f"KafkaSpout starting_offsets: expected a str or a mapping, got {start!r}"
            raise ConfigError(msg)
        result: dict[str, dict[int, int]] = {}
        for topic, parts in start.items():
            if not isinstance(topic, str) or not self.subscribes(topic):
                msg = (
                    f"KafkaSpout starting_offsets: topic {topic!r} is not one of the spout's "
                    f"topics ({self.pattern or list(self.topics or ())})"
                )
                raise ConfigError(msg)
            try:
                result[topic] = {int(p): int(o) for p, o in dict(parts).items()}
            except (TypeError, ValueError) as exc:
                msg = (
                    f"KafkaSpout starting_offsets[{topic!r}]: expected {{partition: offset}} "
                    f"integers, got {parts!r}"
                )
                raise ConfigError(msg) from exc
            bad = {p: o for p, o in result[topic].items() if p < 0 or o < EARLIEST}
            if bad:
                msg = (
                    f"KafkaSpout starting_offsets[{topic!r}]: partitions and offsets must be "
                    f">= 0 (or -2 earliest, -1 latest), got {bad}"
                )
                raise ConfigError(msg)
        return result


def _check_topics(
    topics: str | Sequence[str] | None, pattern: str | None
) -> tuple[str, ...] | None:
    if (topics is None) == (pattern is None):
        msg = (
            f"KafkaSpout: give exactly one of topics or pattern, got topics={topics!r}, "
            f"pattern={pattern!r}"
        )
        raise ConfigError(msg)
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            msg = f"KafkaSpout pattern: not a valid regex: {pattern!r}"
            raise ConfigError(msg) from exc
        return None
    names = (topics,) if isinstance(topics, str) else tuple(topics or ())
    if not names or not all(isinstance(t, str) and t for t in names):
        msg = f"KafkaSpout topics: expected non-empty topic names, got {topics!r}"
        raise ConfigError(msg)
    if len(set(names)) != len(names):
        msg = f"KafkaSpout topics: duplicate topic in {list(names)}"
        raise ConfigError(msg)
    return names


def _check_optional_str(name: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        msg = f"KafkaSpout {name}: expected a non-empty string, got {value!r}"
        raise ConfigError(msg)


def _check_positive_int(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        msg = f"KafkaSpout {name}: expected a positive int or None, got {value!r}"
        raise ConfigError(msg)


def _check_consumer_config(config: Mapping[str, str] | None) -> dict[str, str]:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        msg = f"KafkaSpout consumer_config: expected a mapping, got {config!r}"
        raise ConfigError(msg)
    for key, use in _RESERVED_CONSUMER_KEYS.items():
        if key in config:
            msg = f"KafkaSpout consumer_config: do not set {key!r}; use {use}"
            raise ConfigError(msg)
    return {str(k): str(v) for k, v in config.items()}
