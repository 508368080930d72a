"""RedisConfig: the Python, URL and Storm JSON forms, TLS flags, and bad values."""

from __future__ import annotations

import json
import pickle

import pytest
import redis

from kstorm.errors import ConfigError
from sinks.redis import RedisConfig

SEED_000 = '{"host": "localhost", "port": 6379, "timeout": 2000, "database": 0, "password": "xyz"}'


def test_storm_jedis_pool_config_reads_timeout_as_milliseconds() -> None:
    config = RedisConfig.from_json(SEED_000)
    assert (config.host, config.port, config.database) == ("localhost", 6379, 0)
    assert config.timeout == 2.0  # 2000 ms, the Jedis unit
    assert config.password is not None and config.password.get_secret_value() == "xyz"


def test_storm_provider_config_wrapped_form_ignores_java_class_names() -> None:
    text = json.dumps({
        "keyClass": "java.lang.String", "valueClass": "java.lang.Long",
        "keySerializerClass": "x.KeySer", "valueSerializerClass": "x.ValSer",
        "jedisPoolConfig": {"host": "redis.internal", "port": 6380, "timeout": 500,
                            "database": 3, "password": "xyz"},
    })
    config = RedisConfig.from_json(text)
    assert (config.host, config.port, config.timeout, config.database) == (
        "redis.internal", 6380, 0.5, 3)


def test_json_form_may_carry_a_url_and_tls_options() -> None:
    config = RedisConfig.from_json('{"url": "rediss://cache:6390/4", "timeout": 250,'
                                   ' "ssl_cert_reqs": "none"}')
    assert (config.host, config.port, config.database, config.ssl) == ("cache", 6390, 4, True)
    assert config.timeout == 0.25 and config.ssl_cert_reqs == "none"


def test_password_never_shows_in_repr_or_url() -> None:
    config = RedisConfig.from_json(SEED_000)
    assert "xyz" not in repr(config) and "xyz" not in config.url
    assert config.url == "redis://localhost:6379/0"


def test_url_form() -> None:
    config = RedisConfig.from_url("redis://alice:p%40ss@db.example:6381/2?timeout=0.5&retries=3")
    assert (config.host, config.port, config.database) == ("db.example", 6381, 2)
    assert config.timeout == 0.5
    assert config.username == "alice" and config.password is not None
    assert config.password.get_secret_value() == "p@ss"
    assert config.retries == 3 and config.ssl is False


def test_rediss_url_turns_on_tls_with_its_options() -> None:
    config = RedisConfig.from_url(
        "rediss://:pw@cache:6380?ssl_ca_certs=/etc/ca.pem&ssl_certfile=/etc/c.pem"
        "&ssl_keyfile=/etc/c.key&ssl_check_hostname=false")
    assert config.ssl and config.ssl_ca_certs == "/etc/ca.pem"
    assert (config.ssl_certfile, config.ssl_keyfile) == ("/etc/c.pem", "/etc/c.key")
    assert config.ssl_check_hostname is False and config.url == "rediss://cache:6380/0"


def test_url_errors_never_show_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        RedisConfig.from_url("redis://bob:hunter2@host:notaport/0")
    assert "hunter2" not in str(info.value) and "bob:***@host" in str(info.value)


def test_url_defaults() -> None:
    assert RedisConfig.from_url("redis://") == RedisConfig()


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"port": 0}, "port"),
    ({"port": 70000}, "port"),
    ({"port": "6379"}, "port"),
    ({"port": True}, "port"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": -1.0}, "timeout"),
    ({"timeout": float("nan")}, "timeout"),
    ({"database": -1}, "database"),
    ({"host": ""}, "host"),
    ({"host": "a b"}, "host"),
    ({"retries": -1}, "retries"),
    ({"retry_backoff_max": 0}, "retry_backoff_max"),
    ({"ssl": "yes"}, "ssl"),
    ({"ssl": True, "ssl_cert_reqs": "maybe"}, "ssl_cert_reqs"),
    ({"ssl_ca_certs": "/etc/ca.pem"}, "ssl_ca_certs"),  # TLS file without ssl=True
])
def test_bad_values_raise_config_error_naming_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=repr(key)) as info:
        RedisConfig(**kwargs)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("text", "key"), [
    ('{"host": "h", "port": 0}', "port"),
    ('{"host": "h", "timeout": "2000"}', "timeout"),
    ('{"host": "h", "hots": "typo"}', "hots"),
    ('{"jedisPoolConfig": {"port": 1}, "extra": 1}', "jedisPoolConfig"),
    ("[1, 2]", "<root>"),
])
def test_bad_json_values_name_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=repr(key)):
        RedisConfig.from_json(text)


def test_malformed_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        RedisConfig.from_json('{"host": ')


@pytest.mark.parametrize(("url", "key"), [
    ("http://localhost:6379", "url"),
    ("redis://localhost:notaport", "url"),
    ("redis://localhost:6379/zero", "database"),
    ("redis://localhost?timeout=soon", "timeout"),
    ("redis://localhost?bogus=1", "bogus"),
    ("redis://localhost?ssl_ca_certs=/ca.pem", "ssl_ca_certs"),
])
def test_bad_urls_name_the_key(url: str, key: str) -> None:
    with pytest.raises(ConfigError, match=repr(key)):
        RedisConfig.from_url(url)


def test_client_carries_timeouts_database_credentials_and_retries() -> None:
    config = RedisConfig(host="h", port=6390, timeout=1.5, database=2, password="pw", retries=5)
    client = config.client()
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 6390, 2)
    assert kwargs["socket_timeout"] == 1.5 and kwargs["socket_connect_timeout"] == 1.5
    assert kwargs["password"] == "pw"
    assert kwargs["retry"].get_retries() == 5
    client.close()


def test_client_refuses_missing_tls_files_naming_the_key(tmp_path) -> None:
    config = RedisConfig(ssl=True, ssl_ca_certs=str(tmp_path / "missing-ca.pem"))
    with pytest.raises(ConfigError, match="'ssl_ca_certs'"):
        config.client()


def test_client_uses_tls_when_asked(tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not parsed until a connection is made")
    client = RedisConfig(ssl=True, ssl_ca_certs=str(ca)).client()
    assert client.connection_pool.connection_class is redis.SSLConnection
    assert client.connection_pool.connection_kwargs["ssl_ca_certs"] == str(ca)
    client.close()


def test_config_is_frozen_and_picklable() -> None:
    config = RedisConfig.from_json(SEED_000)
    with pytest.raises(AttributeError):
        config.port = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(config)) == config
