"""One Kafka connection for every client kstorm creates: brokers, security, and roles.

A :class:`KafkaConnection` holds where the brokers are and how to authenticate (SASL, SSL),
with passwords as :class:`pydantic.SecretStr`: never logged, ``***`` in ``repr``. It is the
only place a librdkafka configuration dict is built: :meth:`KafkaConnection.client_config`
returns the settings of one *role* (the spout's consumers, the consumer-group committer, the
dead-letter producer, the Kafka sink's transactional producer and group consumer, the admin
client...), each the connection's settings plus that role's own.

Where a topology's connections come from:

- the topology: ``kafka.bootstrap.servers`` and the ``kafka.security.protocol``,
  ``kafka.sasl.*``, ``kafka.ssl.*`` and ``kafka.client.config`` keys
  (:class:`kstorm.config.TopologyConfig`);
- a component may override them: ``KafkaSpout(bootstrap_servers=..., consumer_config=...)``,
  ``KafkaSink(bootstrap_servers=..., producer_config=...)``; the security settings found in
  those dicts (``security.protocol``, ``sasl.*``, ``ssl.*``) then apply to *every* client of
  that component (a spout's metadata reads, retries' re-reads and group commits; a sink's
  group consumer and admin client), not only the one the dict was named for.

Example:
    >>> conn = KafkaConnection(bootstrap_servers="broker:9093", security_protocol="SASL_SSL",
    ...                        sasl_mechanism="PLAIN", sasl_username="app",
    ...                        sasl_password="s3cret")
    >>> "s3cret" in repr(conn), repr(conn).endswith("sasl_password='***')")
    (False, True)
    >>> conn.client_config("admin")["sasl.password"]
    's3cret'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from kstorm.errors import ConfigError

log = logging.getLogger("kstorm.kafka")

Role = Literal["consumer", "group", "producer", "transactional_producer", "sink_consumer",
               "reader", "admin"]
ROLES: tuple[str, ...] = Role.__args__  # type: ignore[attr-defined]
ASSIGN_ONLY_GROUP = "kstorm-assign-only"  # never joined nor committed; librdkafka wants one
SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "enable.ssl.")
SECRET_WORDS = ("password", "secret", "ssl.key.pem", "ssl_key", "token")

# The settings each role adds to the connection's (``role_config`` overrides come last).
_ROLE_DEFAULTS: dict[str, dict[str, Any]] = {
    # assigned partitions, never joins nor commits: the spout's reads, metadata, tail reads
    "consumer": {"fetch.wait.max.ms": 10, "group.id": ASSIGN_ONLY_GROUP,
                 "enable.auto.commit": False, "enable.auto.offset.store": False,
                 "enable.partition.eof": True, "auto.offset.reset": "error"},
    # commits a consumer group's offsets without joining it (lag monitoring)
    "group": {"fetch.wait.max.ms": 10, "enable.auto.commit": False,
              "enable.auto.offset.store": False, "enable.partition.eof": True,
              "auto.offset.reset": "error"},
    # dead letters: at least once, in order
    "producer": {"enable.idempotence": True, "linger.ms": 5},
    # the Kafka sink: one transaction per batch
    "transactional_producer": {"partitioner": "murmur2_random", "linger.ms": 5,
                               "compression.type": "none", "enable.idempotence": True},
    # the Kafka sink's group member: committed offsets, consumer_group_metadata()
    "sink_consumer": {"enable.auto.commit": False, "isolation.level": "read_committed",
                      "enable.partition.eof": True, "auto.offset.reset": "earliest"},
    # reads a topic to its end, committed records only (the sink's bookkeeping topic)
    "reader": {"enable.auto.commit": False, "isolation.level": "read_committed",
               "enable.partition.eof": True, "auto.offset.reset": "earliest"},
    "admin": {},
}
# Settings a role needs from its caller: role -> the keyword of client_config that sets them.
_ROLE_REQUIRES = {"group": "group_id", "transactional_producer": "transactional_id",
                  "sink_consumer": "group_id", "reader": "group_id"}


def is_security_key(key: str) -> bool:
    """Whether a librdkafka setting is about authentication or encryption."""
    return key.startswith(SECURITY_PREFIXES)


def is_secret_key(key: str) -> bool:
    """Whether a librdkafka setting holds a secret (kept as a ``SecretStr``)."""
    return any(word in key for word in SECRET_WORDS)


class KafkaConnection(BaseModel):
    """Where the brokers are and how to reach them (see the module docstring).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``, ``OAUTHBEARER``...
        sasl_username: the SASL user.
        sasl_password: the SASL password (a secret).
        ssl_ca_location: CA certificate file.
        ssl_certificate_location: client certificate file.
        ssl_key_location: client key file.
        ssl_key_password: the client key's password (a secret).
        settings: more librdkafka client settings for every client of this connection
            (secret-looking values are kept as secrets).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(min_length=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    settings: dict[str, str | SecretStr] = Field(default_factory=dict)

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, value: str) -> str:
        if not value.strip() or any(not part.strip() for part in value.split(",")):
            msg = f"expected 'host:port[,host:port...]', got {value!r}"
            raise ValueError(msg)
        return value.strip()

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, value: dict[str, Any]) -> dict[str, str | SecretStr]:
        out: dict[str, str | SecretStr] = {}
        for key, setting in value.items():
            if key in ("bootstrap.servers", "group.id", "transactional.id"):
                msg = (f"{key!r} cannot be a connection setting (bootstrap_servers is a field; "
                       "group and transactional ids belong to the client that uses them)")
                raise ValueError(msg)
            if isinstance(setting, SecretStr):
                out[key] = setting
            elif is_secret_key(key):
                out[key] = SecretStr(str(setting))
            else:
                out[key] = str(setting)
        return out

    # -- building ------------------------------------------------------------------------

    @classmethod
    def from_client_config(cls, bootstrap_servers: str,
                           config: Mapping[str, Any] | None = None) -> KafkaConnection:
        """A connection from librdkafka-style settings (``security.protocol``, ``sasl.*``...).

        Example:
            >>> KafkaConnection.from_client_config(
            ...     "b:9092", {"security.protocol": "SASL_SSL", "sasl.password": "x"}
            ... ).sasl_password
            SecretStr('**********')
        """
        return cls(bootstrap_servers=bootstrap_servers).with_overrides(None, config)

    def with_overrides(self, bootstrap_servers: str | None,
                       config: Mapping[str, Any] | None) -> KafkaConnection:
        """A copy with a component's own brokers and security settings on top.

        Only the security settings of ``config`` are taken (a consumer's fetch sizes stay
        with the consumer); they then apply to every client of the component.
        """
        fields = self.model_dump()
        fields["settings"] = dict(self.settings)
        if bootstrap_servers:
            fields["bootstrap_servers"] = bootstrap_servers
        for key, value in (config or {}).items():
            if not is_security_key(key):
                continue
            name = _FIELD_OF.get(key)
            if name is not None:
                fields[name] = value
            else:
                fields["settings"][key] = value
        try:
            return KafkaConnection(**fields)
        except ValidationError as exc:
            msg = f"invalid Kafka connection settings: {_problems(exc)}"
            raise ConfigError(msg) from exc

    # -- using ---------------------------------------------------------------------------

    def client_config(self, role: Role, *, group_id: str | None = None,
                      transactional_id: str | None = None,
                      role_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The librdkafka settings of a client in ``role`` (secrets revealed: for the client).

        Args:
            role: ``consumer`` (assigned partitions, never joins or commits), ``group``
                (commits ``group_id``'s offsets without joining), ``producer`` (dead
                letters), ``transactional_producer`` (the Kafka sink, ``transactional_id``),
                ``sink_consumer`` and ``reader`` (read_committed members of ``group_id``),
                ``admin``.
            group_id: the consumer group (roles that need one).
            transactional_id: the producer's transactional id.
            role_config: the component's own settings for this client (e.g. a spout's
                ``consumer_config`` tuning, a sink's ``producer_config``); they win over the
                role's defaults, never over the ids above.
        """
        if role not in _ROLE_DEFAULTS:
            msg = f"unknown Kafka client role {role!r}; expected one of {list(ROLES)}"
            raise ConfigError(msg)
        needed = _ROLE_REQUIRES.get(role)
        given = {"group_id": group_id, "transactional_id": transactional_id}
        if needed is not None and not given[needed]:
            msg = f"a Kafka {role} client needs {needed}"
            raise ConfigError(msg)
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "logger": log}
        config.update(self._security())
        config.update(_ROLE_DEFAULTS[role])
        config.update({k: (v.get_secret_value() if isinstance(v, SecretStr) else v)
                       for k, v in (role_config or {}).items()})
        if role in ("group", "sink_consumer", "reader"):
            config["group.id"] = group_id
        if role == "transactional_producer":
            config["transactional.id"] = transactional_id
            config["enable.idempotence"] = True
        return config

    def _security(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, key in _KEY_OF.items():
            value = getattr(self, name)
            if value is not None:
                out[key] = value.get_secret_value() if isinstance(value, SecretStr) else value
        for key, value in self.settings.items():
            out[key] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return out

    @property
    def is_secured(self) -> bool:
        """Whether any security setting is set."""
        return bool(self._security())

    def cache_key(self) -> tuple[tuple[str, str], ...]:
        """A hashable identity for caching clients per connection (holds secrets: never log)."""
        return tuple(sorted((k, str(v)) for k, v in
                            {"bootstrap.servers": self.bootstrap_servers,
                             **self._security()}.items()))

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if value is None or (name == "settings" and not value):
                continue
            if isinstance(value, SecretStr):
                yield name, "***"
            elif name == "settings":
                yield name, {k: "***" if isinstance(v, SecretStr) else v
                             for k, v in value.items()}
            else:
                yield name, value

    def __str__(self) -> str:
        return repr(self)


_FIELD_OF = {  # librdkafka key -> KafkaConnection field
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.ca.location": "ssl_ca_location",
    "ssl.certificate.location": "ssl_certificate_location",
    "ssl.key.location": "ssl_key_location",
    "ssl.key.password": "ssl_key_password",
}


_KEY_OF = {name: key for key, name in _FIELD_OF.items() if key != "sasl.mechanisms"}


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def as_connection(where: str | KafkaConnection) -> KafkaConnection:
    """``where`` as a connection (a bare ``host:port`` string is a plaintext connection)."""
    if isinstance(where, KafkaConnection):
        return where
    return KafkaConnection(bootstrap_servers=where)
