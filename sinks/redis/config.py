"""Where the Redis sink connects: :class:`RedisConfig`.

Three ways to build one, all validated on construction (a bad value raises
:class:`~kstorm.errors.ConfigError` naming the key)::

    RedisConfig(host="redis.internal", port=6380, timeout=2.0, password="s3cret")
    RedisConfig.from_url("rediss://:s3cret@redis.internal:6380/2?ssl_ca_certs=/etc/ca.pem")
    RedisConfig.from_json('{"host": "localhost", "port": 6379, "timeout": 2000,'
                          ' "database": 0, "password": "xyz"}')

``from_json`` reads Storm's ``topology.state.provider.config`` form (seed 000): the
``jedisPoolConfig`` object, bare or wrapped, where ``timeout`` is in **milliseconds**
as in Jedis. Everywhere else ``timeout`` is in seconds.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, NoReturn
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import SecretStr

from kstorm.errors import ConfigError, MissingDependencyError

if TYPE_CHECKING:
    import redis

CertReqs = Literal["required", "optional", "none"]
_CERT_REQS = ("required", "optional", "none")
_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
# Storm's provider config carries Java class names kstorm has no use for.
_STORM_JAVA_KEYS = frozenset({"keyClass", "valueClass", "keySerializerClass",
                              "valueSerializerClass"})
_BACKOFF_BASE_S = 0.05


@dataclass(frozen=True)
class RedisConfig:
    """Connection settings for one Redis server (standalone, or one shard).

    Attributes:
        host: Server host name or address.
        port: TCP port, 1..65535.
        timeout: Connect and read timeout per command, in seconds.
        database: Logical database number (``SELECT``), >= 0.
        password: ``AUTH`` password (a ``str`` is wrapped), kept as a secret (never printed).
        username: ACL user name (Redis 6+); ``None`` for the default user.
        ssl: Use TLS (``rediss://``).
        ssl_ca_certs: CA bundle that signs the server certificate.
        ssl_certfile: Client certificate for mutual TLS.
        ssl_keyfile: Key of the client certificate.
        ssl_cert_reqs: Whether the server certificate must verify.
        ssl_check_hostname: Whether the certificate must match ``host``.
        retries: Retries of a command after a connection error or timeout.
        retry_backoff_max: Cap of the exponential backoff between retries, in seconds.
    """

    host: str = "localhost"
    port: int = 6379
    timeout: float = 2.0
    database: int = 0
    password: SecretStr | None = None
    username: str | None = None
    ssl: bool = False
    ssl_ca_certs: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cert_reqs: CertReqs = "required"
    ssl_check_hostname: bool = True
    retries: int = 8
    retry_backoff_max: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.password, str):
            secret = SecretStr(self.password) if self.password else None
            object.__setattr__(self, "password", secret)
        if not isinstance(self.host, str) or not self.host or any(c.isspace() for c in self.host):
            _bad("host", "a non-empty host name without spaces", self.host)
        _check_int("port", self.port, 1, 65535)
        _check_int("database", self.database, 0, None)
        _check_int("retries", self.retries, 0, None)
        _check_positive("timeout", self.timeout)
        _check_positive("retry_backoff_max", self.retry_backoff_max)
        if self.password is not None and not isinstance(self.password, SecretStr):
            _bad("password", "a string", type(self.password).__name__)
        if self.username is not None and not (isinstance(self.username, str) and self.username):
            _bad("username", "a non-empty string", self.username)
        for key in ("ssl", "ssl_check_hostname"):
            if not isinstance(getattr(self, key), bool):
                _bad(key, "true or false", getattr(self, key))
        if self.ssl_cert_reqs not in _CERT_REQS:
            _bad("ssl_cert_reqs", f"one of {_CERT_REQS}", self.ssl_cert_reqs)
        for key in _TLS_FILES:
            value = getattr(self, key)
            if value is not None and not (isinstance(value, str) and value):
                _bad(key, "a file path", value)
            if value is not None and not self.ssl:
                msg = f"redis config: {key!r} is set but 'ssl' is false; use rediss:// or ssl=true"
                raise ConfigError(msg)

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> RedisConfig:
        """Parse ``redis://[[user]:password@]host[:port][/db][?option=value&...]``.

        ``rediss://`` turns on TLS. Query options are this class's field names
        (``timeout`` in seconds, ``ssl_ca_certs``, ``ssl_cert_reqs``, ...).

        Example:
            >>> RedisConfig.from_url("rediss://:pw@cache:6380/1?timeout=0.5").database
            1
        """
        if not isinstance(url, str):
            _bad("url", "a redis:// or rediss:// URL", type(url).__name__)
        parts = urlsplit(url)
        shown = _redacted(url)
        if parts.scheme not in ("redis", "rediss"):
            _bad("url", "a redis:// or rediss:// URL", shown)
        try:
            port = parts.port
        except ValueError as exc:
            msg = f"redis config: 'url' has a bad port: {shown!r}"
            raise ConfigError(msg) from exc
        values: dict[str, Any] = {"host": parts.hostname or "localhost",
                                  "ssl": parts.scheme == "rediss"}
        if port is not None:
            values["port"] = port
        if parts.username:
            values["username"] = unquote(parts.username)
        if parts.password:
            values["password"] = unquote(parts.password)
        db = parts.path.strip("/")
        if db:
            if not db.isdigit():
                _bad("database", "a number in the URL path (redis://host:port/<db>)", db)
            values["database"] = int(db)
        for key, raw in parse_qsl(parts.query, keep_blank_values=True):
            values[key] = _parse_option(key, raw)
        values.update(overrides)
        return cls._build(values)

    @classmethod
    def from_json(cls, text: str) -> RedisConfig:
        """Parse Storm's Redis state provider config (``timeout`` in milliseconds).

        Accepts the ``jedisPoolConfig`` object bare or wrapped in the provider config,
        plus this class's TLS/retry keys and an optional ``url``.

        Example:
            >>> RedisConfig.from_json('{"host": "h", "port": 6379, "timeout": 2000}').timeout
            2.0
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"redis config: not valid JSON ({exc})"
            raise ConfigError(msg) from exc
        if not isinstance(data, dict):
            _bad("<root>", "a JSON object", type(data).__name__)
        data = {k: v for k, v in data.items() if k not in _STORM_JAVA_KEYS}
        if "jedisPoolConfig" in data:
            if len(data) != 1 or not isinstance(data["jedisPoolConfig"], dict):
                _bad("jedisPoolConfig", "the only other key, holding an object", sorted(data))
            data = dict(data["jedisPoolConfig"])
        if "timeout" in data:
            ms = data.pop("timeout")
            if isinstance(ms, bool) or not isinstance(ms, int | float):
                _bad("timeout", "milliseconds as a number", ms)
            data["timeout"] = ms / 1000
        url = data.pop("url", None)
        if url is not None:
            return cls.from_url(url, **data)
        return cls._build(data)

    @classmethod
    def _build(cls, values: dict[str, Any]) -> RedisConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            _bad(unknown[0], f"one of {sorted(known)}", "an unknown key")
        return cls(**values)

    @property
    def url(self) -> str:
        """The server's URL without credentials, for logs and error messages."""
        scheme = "rediss" if self.ssl else "redis"
        return f"{scheme}://{self.host}:{self.port}/{self.database}"

    def client(self) -> redis.Redis:
        """A new ``redis.Redis`` that retries with exponential backoff on brief outages.

        Connection errors and timeouts are retried ``retries`` times, sleeping
        0.1 s, 0.2 s, ... up to ``retry_backoff_max`` between attempts.
        """
        try:
            import redis
            from redis.backoff import ExponentialBackoff
            from redis.retry import Retry
        except ImportError as exc:  # pragma: no cover - redis is a core dependency
            msg = "the Redis sink needs redis-py: pip install 'kstorm[redis]'"
            raise MissingDependencyError(msg) from exc
        for key in _TLS_FILES:
            path = getattr(self, key)
            if path is not None and not os.path.isfile(path):
                _bad(key, "an existing file", path)
        retry = Retry(ExponentialBackoff(cap=self.retry_backoff_max, base=_BACKOFF_BASE_S),
                      self.retries, supported_errors=(redis.ConnectionError, redis.TimeoutError))
        tls: dict[str, Any] = {}
        if self.ssl:
            tls = {"ssl": True, "ssl_cert_reqs": self.ssl_cert_reqs,
                   "ssl_check_hostname": self.ssl_check_hostname,
                   **{key: getattr(self, key) for key in _TLS_FILES}}
        return redis.Redis(
            host=self.host, port=self.port, db=self.database, username=self.username,
            password=self.password.get_secret_value() if self.password else None,
            socket_timeout=self.timeout, socket_connect_timeout=self.timeout,
            retry=retry, retry_on_error=[redis.ConnectionError, redis.TimeoutError], **tls,
        )


def _redacted(url: str) -> str:
    """``url`` with its password replaced by ``***``, for error messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


def _parse_option(key: str, raw: str) -> Any:
    """A URL query value, typed by the field it sets."""
    if key in ("timeout", "retry_backoff_max"):
        try:
            return float(raw)
        except ValueError:
            _bad(key, "a number", raw)
    if key == "retries":
        return int(raw) if raw.isdigit() else _bad(key, "a whole number", raw)
    if key in ("ssl", "ssl_check_hostname"):
        lowered = raw.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        _bad(key, "true or false", raw)
    return raw


def _check_int(key: str, value: Any, low: int, high: int | None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        _bad(key, f"an integer {span}", value)


def _check_positive(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        math.isfinite(value) and value > 0
    ):
        _bad(key, "a number of seconds > 0", value)


def _bad(key: str, expected: str, got: Any) -> NoReturn:
    msg = f"redis config: {key!r} must be {expected}, got {got!r}"
    raise ConfigError(msg)


__all__ = ["RedisConfig"]
