"""Topology configuration: Storm's key names, validated into one frozen model.

Users build a :class:`Config` (a ``dict``, as Storm's ``Config`` is a ``HashMap``) with Storm's
keys, and :func:`kstorm.submit_topology` validates it into :class:`TopologyConfig`, which is
what flows through kstorm from then on (nothing re-reads the dict). Each default lives here
and only here; ``kstorm/_spark/spark_options.py`` translates the model to Spark options and
:class:`kstorm.KafkaConnection` to librdkafka settings.

Example:
    >>> conf = Config({"topology.message.timeout.secs": 60, "topology.guarantee": "at-least-once"})
    >>> conf.set_max_spout_pending(1000)
    >>> TopologyConfig.from_conf(conf).message_timeout_secs
    60
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)

from kstorm._config_keys import check_keys, load_object
from kstorm.errors import ConfigError
from kstorm.kafka.connection import KafkaConnection


class Guarantee(StrEnum):
    """Processing guarantee (seed 003)."""

    AT_MOST_ONCE = "at-most-once"
    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"


class TriggerMode(StrEnum):
    """How micro-batches are triggered."""

    CONTINUOUS = "continuous"        # a processing-time trigger, runs until stopped
    AVAILABLE_NOW = "available-now"  # process what is in the topics now, then return


class BoltErrorPolicy(StrEnum):
    """What happens when a bolt's ``execute`` raises (``kstorm.bolt.error.policy``)."""

    DEAD_LETTER = "dead-letter"  # the tuple becomes a dead letter with the error; go on
    FAIL = "fail"                # the topology stops with the error


class BadInputPolicy(StrEnum):
    """What happens to a record the spout cannot deserialize (``kstorm.bad.input.policy``)."""

    DEAD_LETTER = "dead-letter"
    FAIL = "fail"
    SKIP_AND_COUNT = "skip-and-count"


# Keys that name the same setting: Storm's checkpoint interval is kstorm's trigger interval
# (one micro-batch is one checkpoint, seed 000).
_ALIASES = {"kstorm.trigger.interval.ms": ("topology.state.checkpoint.interval.ms",)}


class TopologyConfig(BaseModel):
    """The validated, frozen configuration of a submitted topology."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    guarantee: Guarantee = Field(Guarantee.EXACTLY_ONCE, alias="topology.guarantee")
    acker_executors: int | None = Field(None, ge=0, alias="topology.acker.executors")
    # topology.workers: Spark executors on a cluster (kstorm/_spark/spark_options.py)
    workers: int | None = Field(None, ge=1, alias="topology.workers")
    message_timeout_secs: int = Field(30, ge=1, alias="topology.message.timeout.secs")
    max_spout_pending: int | None = Field(None, ge=1, alias="topology.max.spout.pending")
    # tick tuples to every plain bolt every so many seconds of batch time (_runtime/ticks.py)
    tick_tuple_freq_secs: float | None = Field(None, gt=0,
                                               alias="topology.tick.tuple.freq.secs")
    # where KeyValueState lives (seed 000): spark (Spark's state store), redis, memory, or a
    # StateProvider class ("package.module:Class"); Storm's provider class names work too
    state_provider: str = Field("spark", alias="topology.state.provider")
    state_provider_config: dict[str, Any] | str | None = Field(
        None, alias="topology.state.provider.config")
    # stateful bolts allowed to start with empty state in a topology that committed before
    state_init_empty: list[str] = Field(default_factory=list, alias="kstorm.state.init.empty")
    # topology.debug: log every emitted tuple on the driver (logger ``kstorm.debug``)
    debug: bool = Field(False, alias="topology.debug")
    # Kafka: the topology's connection (components may override, see KafkaConnection)
    bootstrap_servers: str | None = Field(None, alias="kafka.bootstrap.servers")
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = (
        Field(None, alias="kafka.security.protocol"))
    kafka_sasl_mechanism: str | None = Field(None, alias="kafka.sasl.mechanism")
    kafka_sasl_username: str | None = Field(None, alias="kafka.sasl.username")
    kafka_sasl_password: SecretStr | None = Field(None, alias="kafka.sasl.password")
    kafka_ssl_ca_location: str | None = Field(None, alias="kafka.ssl.ca.location")
    kafka_ssl_certificate_location: str | None = Field(
        None, alias="kafka.ssl.certificate.location")
    kafka_ssl_key_location: str | None = Field(None, alias="kafka.ssl.key.location")
    kafka_ssl_key_password: SecretStr | None = Field(None, alias="kafka.ssl.key.password")
    kafka_client_config: dict[str, Any] = Field(default_factory=dict,
                                                alias="kafka.client.config")
    # Spark
    master: str | None = Field(None, alias="kstorm.spark.master")  # None: see spark_master
    checkpoint_dir: Path | None = Field(None, alias="kstorm.checkpoint.dir")
    checkpoint_root: Path = Field(Path(".kstorm/checkpoints"), alias="kstorm.checkpoint.root")
    trigger: TriggerMode = Field(TriggerMode.CONTINUOUS, alias="kstorm.trigger")
    trigger_interval_ms: int = Field(
        1000, ge=0, alias="kstorm.trigger.interval.ms",
        validation_alias=AliasChoices("kstorm.trigger.interval.ms",
                                      "topology.state.checkpoint.interval.ms",
                                      "trigger_interval_ms"))
    shuffle_partitions: int | None = Field(None, ge=1, alias="kstorm.shuffle.partitions")
    spark_conf: dict[str, str] = Field(default_factory=dict, alias="kstorm.spark.conf")
    spark_class_cache: bool = Field(True, alias="kstorm.spark.class.cache")
    release_planners: bool = Field(True, alias="kstorm.spark.release.planners")
    python_zygote: bool = Field(True, alias="kstorm.spark.python.zygote")
    # errors and bad input
    bolt_error_policy: BoltErrorPolicy = Field(BoltErrorPolicy.DEAD_LETTER,
                                               alias="kstorm.bolt.error.policy")
    dead_letter_topic: str | None = Field(None, alias="kstorm.dead.letter.topic")
    bad_input_policy: BadInputPolicy = Field(BadInputPolicy.DEAD_LETTER,
                                             alias="kstorm.bad.input.policy")
    dead_letter_max_bytes: int = Field(900_000, ge=1024, alias="kstorm.dead.letter.max.bytes")
    metrics_port: int | None = Field(None, ge=0, le=65_535, alias="kstorm.metrics.port")
    topics_must_exist: bool = Field(False, alias="kstorm.topics.must.exist")
    # failing a transaction (seed 002): re-run the batch in place, then the policy
    transaction_max_attempts: int = Field(5, ge=1, alias="kstorm.transaction.max.attempts")
    transaction_backoff_ms: int = Field(200, ge=0, alias="kstorm.transaction.backoff.ms")
    transaction_failure_policy: Literal["fail", "dead-letter"] = Field(
        "fail", alias="kstorm.transaction.failure.policy")
    # the sinks' commit of batch N runs while Spark plans and reads batch N + 1 ("auto":
    # where every output and all state live with sinks that record offsets; see
    # kstorm/_spark/overlap.py)
    commit_overlap: Literal["auto"] | bool = Field("auto", alias="kstorm.commit.overlap")
    # testing: every emitted tuple reaches the driver (kstorm.testing.run_to_completion)
    capture_emitted: bool = Field(False, alias="kstorm.capture.emitted")
    # free-form spouts (next_tuple): when a batch of their emits ends
    spout_max_batch_tuples: int = Field(10_000, ge=1, alias="kstorm.spout.max.batch.tuples")
    spout_max_batch_ms: int = Field(1_000, ge=1, alias="kstorm.spout.max.batch.ms")
    spout_idle_calls: int = Field(3, ge=1, alias="kstorm.spout.idle.calls")
    spout_max_failures: int = Field(3, ge=1, alias="kstorm.spout.max.failures")

    @field_validator("checkpoint_dir", "checkpoint_root", mode="before")
    @classmethod
    def _local_checkpoint(cls, value: Any) -> Any:
        """A path or a ``file:`` URI; other schemes are refused, never mapped to a folder."""
        if not isinstance(value, str):
            return value
        scheme, sep, rest = value.partition(":")
        if not sep or len(scheme) < 2 or not scheme.replace("+", "").replace(
                ".", "").replace("-", "").isalnum():
            return value  # a plain path (a Windows drive letter is not a scheme)
        if scheme.lower() == "file":
            return "/" + rest.lstrip("/") if rest.startswith("/") else rest
        msg = (f"{scheme}: checkpoints are not supported: kstorm keeps its own files (txid "
               "base, windows, books) next to Spark's with local file I/O, so the checkpoint "
               "must be a local path, or a file: path on a filesystem every machine mounts")
        raise ValueError(msg)

    @field_validator("state_provider", mode="before")
    @classmethod
    def _state_provider(cls, value: Any) -> Any:
        """spark, redis, memory, Storm's class names for them, or 'package.module:Class'."""
        if not isinstance(value, str):
            return value
        named = _STORM_PROVIDERS.get(value, value)
        if named in ("spark", "redis", "memory") or ":" in named or "." in named:
            return named
        msg = (f"unknown state provider {value!r}: use spark, redis, memory or a "
               "StateProvider class as 'package.module:Class'")
        raise ValueError(msg)

    def _with_ackers_guarantee(self) -> TopologyConfig:
        """``topology.acker.executors`` where it means something (seed 003), else refused.

        0 without a ``topology.guarantee`` is Storm's at-most-once. Exactly once no acker
        runs (a batch is the unit of replay) and at most once nothing is tracked: a count of
        ackers there would be accepted and ignored, so it is refused.
        """
        ackers = self.acker_executors
        if ackers is None or self.guarantee is Guarantee.AT_LEAST_ONCE:
            return self
        if ackers == 0 and "guarantee" not in self.model_fields_set:
            return self.model_copy(update={"guarantee": Guarantee.AT_MOST_ONCE})
        if ackers == 0 and self.guarantee is Guarantee.AT_MOST_ONCE:
            return self
        if self.guarantee is Guarantee.EXACTLY_ONCE and ackers == 0:
            msg = ("topology.acker.executors = 0 asks for Storm's at-most-once, but "
                   "topology.guarantee = exactly-once")
            hint = "set one of them: topology.guarantee = at-most-once, or remove the ackers key"
        elif self.guarantee is Guarantee.EXACTLY_ONCE:
            said = "" if "guarantee" in self.model_fields_set else " (the default)"
            msg = (f"topology.acker.executors = {ackers} has no effect with topology.guarantee "
                   f"= exactly-once{said}: a failed batch is re-run as a whole, no acker "
                   "tracks tuple trees")
            hint = ("remove topology.acker.executors, or set topology.guarantee = "
                    "at-least-once to track tuples with ackers (0 ackers: at-most-once)")
        else:
            msg = (f"topology.acker.executors = {ackers} asks for ackers, but "
                   "topology.guarantee = at-most-once tracks nothing")
            hint = "remove it (or set 0), or set topology.guarantee = at-least-once"
        raise ConfigError(msg, hint=hint)

    def _check_max_spout_pending(self) -> None:
        """``topology.max.spout.pending`` bounds something in every mode it is accepted in."""
        pending = self.max_spout_pending
        if pending is None or (self.guarantee is Guarantee.AT_LEAST_ONCE
                               and self.ackers_enabled):
            return  # at least once: the bound on un-acked spout tuples per spout task
        if self.acks_on_emit:
            msg = (f"topology.max.spout.pending = {pending} has no effect at most once: no "
                   "tuple is tracked, so none is ever pending (Storm applies it only to "
                   "tuples tracked by ackers)")
            raise ConfigError(msg, hint="remove it, or set topology.guarantee = "
                              "at-least-once with ackers to bound un-acked tuples")
        if pending > 1:
            msg = (f"topology.max.spout.pending = {pending} asks for {pending} pending "
                   "batches, but exactly once a spout's tuples are pending one micro-batch at "
                   "a time: Spark plans batch N + 1 only after batch N committed")
            raise ConfigError(msg, hint="remove it (or set 1); bound a batch's size with "
                              "KafkaSpout(max_offsets_per_batch=...) or "
                              "kstorm.spout.max.batch.tuples")

    def _check_spark_conf_agrees(self) -> None:
        """A kstorm key and the Spark key it sets, both given and different, are refused.

        ``kstorm.spark.conf`` wins over kstorm's own options, so the kstorm key would be
        accepted and ignored.
        """
        pairs = {"spark.master": ("kstorm.spark.master", self.master),
                 "spark.sql.shuffle.partitions": ("kstorm.shuffle.partitions",
                                                  self.shuffle_partitions)}
        for spark_key, (key, value) in pairs.items():
            theirs = self.spark_conf.get(spark_key)
            if value is None or theirs is None or str(theirs).strip() == str(value):
                continue
            msg = (f"{key} = {value!r}, but kstorm.spark.conf sets {spark_key} = {theirs!r}, "
                   "which would win")
            raise ConfigError(msg, hint=f"keep one of them: {key}, or {spark_key} in "
                                        "kstorm.spark.conf")

    def chosen_spark_settings(self) -> dict[str, tuple[str, str]]:
        """The Spark settings given explicitly: ``{spark key: (the key you set, value)}``.

        ``kstorm.spark.conf`` entries, and ``kstorm.spark.master`` and
        ``kstorm.shuffle.partitions`` when set; what you left unset is not here.

        Example:
            >>> TopologyConfig.from_conf({"kstorm.shuffle.partitions": 3}).chosen_spark_settings()
            {'spark.sql.shuffle.partitions': ('kstorm.shuffle.partitions', '3')}
        """
        chosen = {key: (f"kstorm.spark.conf {key}", str(value))
                  for key, value in self.spark_conf.items()}
        if self.master is not None:
            chosen["spark.master"] = ("kstorm.spark.master", self.master)
        if self.shuffle_partitions is not None:
            chosen["spark.sql.shuffle.partitions"] = ("kstorm.shuffle.partitions",
                                                      str(self.shuffle_partitions))
        return chosen

    def _check_state_provider_config(self) -> None:
        if self.state_provider == "redis":
            from kstorm.state.redis import RedisStateConfig

            RedisStateConfig.parse(self.state_provider_config)  # refuses unusable keys
        elif self.state_provider in ("spark", "memory") and self.state_provider_config:
            msg = (f"topology.state.provider.config is set but topology.state.provider = "
                   f"{self.state_provider!r} takes no configuration")
            raise ConfigError(msg, hint="remove topology.state.provider.config, or set "
                              "topology.state.provider = redis")

    def state_provider_instance(self) -> Any:
        """The :class:`kstorm.state.StateProvider` of ``topology.state.provider`` (not spark)."""
        from kstorm.state import InMemoryKeyValueStateProvider

        if self.state_provider == "redis":
            from kstorm.state.redis import RedisKeyValueStateProvider

            return RedisKeyValueStateProvider(self.state_provider_config)
        if self.state_provider == "memory":
            return InMemoryKeyValueStateProvider()
        if self.state_provider == "spark":
            msg = "topology.state.provider = spark has no provider object: Spark holds state"
            raise ConfigError(msg)
        return _custom_provider(self.state_provider)

    @classmethod
    def accepted_keys(cls) -> frozenset[str]:
        """Every configuration key the model accepts (its aliases; field names work too).

        Example:
            >>> "topology.max.spout.pending" in TopologyConfig.accepted_keys()
            True
        """
        keys: set[str] = set()
        for info in cls.model_fields.values():
            if info.alias:
                keys.add(info.alias)
            if isinstance(info.validation_alias, AliasChoices):
                keys.update(c for c in info.validation_alias.choices if isinstance(c, str)
                            and "." in c)
        return frozenset(keys)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None) -> TopologyConfig:
        """Validate a Storm-style config mapping; unknown keys are an error."""
        data = {k: v for k, v in dict(conf or {}).items() if not k.startswith("user.")}
        for key, others in _ALIASES.items():
            given = {k: data[k] for k in (key, *others) if k in data}
            if len({str(v) for v in given.values()}) > 1:
                msg = (f"invalid topology configuration: {sorted(given)} name the same "
                       f"setting and disagree: {given}")
                raise ConfigError(msg)
        check_keys(data, cls.accepted_keys() | set(cls.model_fields))
        try:
            settings = cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']} "
                f"(got {_shown(err['loc'], err.get('input'))})"
                for err in exc.errors()
            )
            msg = f"invalid topology configuration: {problems}"
            raise ConfigError(msg) from exc
        settings = settings._with_ackers_guarantee()
        settings._check_state_provider_config()
        settings._check_max_spout_pending()
        settings._check_spark_conf_agrees()
        return settings

    def storm_conf(self) -> dict[str, Any]:
        """Storm's keys with this topology's values, defaults included.

        Storm's conf shows every key (``topology.message.timeout.secs`` is 30 unless set).

        Example:
            >>> TopologyConfig.from_conf({}).storm_conf()["topology.message.timeout.secs"]
            30
        """
        provider_config = self.state_provider_config
        return {
            "topology.acker.executors": self.acker_executors,
            "topology.debug": self.debug,
            "topology.guarantee": self.guarantee.value,
            "topology.max.spout.pending": self.max_spout_pending,
            "topology.message.timeout.secs": self.message_timeout_secs,
            "topology.state.checkpoint.interval.ms": self.trigger_interval_ms,
            "topology.state.provider": self.state_provider,
            "topology.state.provider.config": (dict(provider_config)
                                               if isinstance(provider_config, dict)
                                               else provider_config),
            "topology.tick.tuple.freq.secs": self.tick_tuple_freq_secs,
            "topology.workers": self.workers,
        }

    def spout_max_pending(self, component_conf: Mapping[str, Any]) -> int | None:
        """``topology.max.spout.pending`` of one spout.

        Its own (``set_max_spout_pending``, ``add_configuration``) if it set one, else the
        topology's.
        """
        key = "topology.max.spout.pending"
        return component_conf[key] if key in component_conf else self.max_spout_pending

    def component_conf(self, conf: Mapping[str, Any],
                       component: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The ``conf`` a component's ``prepare``/``open`` gets, as Storm builds it.

        Storm's defaults (:meth:`storm_conf`), then the topology's ``conf``, then the
        component's own configuration (``add_configuration``) over both.
        """
        return {**self.storm_conf(), **conf, **(component or {})}

    def workers_note(self) -> str | None:
        """What ``topology.workers`` > 1 means under a local master (logged at start), or None.

        Storm's LocalCluster runs a topology's workers inside one JVM; a ``local[...]``
        master runs every task in this one process the same way. On a cluster the key sets
        the application's executors (``kstorm/_spark/spark_options.py: worker_options``).
        """
        master = self.spark_master
        if self.workers is None or self.workers == 1 or master is None or \
                not master.startswith("local"):
            return None
        return (f"topology.workers = {self.workers}: kstorm.spark.master = {master!r} runs "
                "every task of the topology in this one process, as Storm's LocalCluster runs "
                "its workers in one JVM; on a cluster master it sets the application's "
                "executors (spark.executor.instances)")

    @property
    def spark_master(self) -> str | None:
        """The master kstorm sets (None: leave it to ``spark-submit --master``).

        ``kstorm.spark.master`` when set, else ``spark.master`` in ``kstorm.spark.conf``
        (they may not disagree); else ``local[*]``, except in a driver that ``spark-submit``
        started, whose ``--master`` then decides.
        """
        if self.master is not None:
            return self.master
        if self.spark_conf.get("spark.master"):
            return self.spark_conf["spark.master"].strip()
        return None if os.environ.get("PYSPARK_GATEWAY_PORT") else "local[*]"

    def checkpoint_for(self, topology_name: str) -> Path:
        """The checkpoint directory of ``topology_name`` (one per topology by default)."""
        return (self.checkpoint_dir or self.checkpoint_root / topology_name).resolve()

    @property
    def acks_on_emit(self) -> bool:
        """At most once: a spout tuple counts as acked once emitted (no ackers)."""
        return self.guarantee is Guarantee.AT_MOST_ONCE or (
            self.guarantee is Guarantee.AT_LEAST_ONCE and self.acker_executors == 0)

    @property
    def ackers_enabled(self) -> bool:
        """Whether tuples are tracked (``topology.acker.executors`` is not 0)."""
        return self.acker_executors != 0 and self.guarantee is not Guarantee.AT_MOST_ONCE

    @property
    def captures(self) -> bool:
        """Whether every emitted tuple goes to the driver (testing, or ``topology.debug``)."""
        return self.capture_emitted or self.debug

    # -- Kafka ---------------------------------------------------------------------------

    @property
    def kafka(self) -> KafkaConnection | None:
        """The topology's Kafka connection, if ``kafka.bootstrap.servers`` is set."""
        if not self.bootstrap_servers:
            return None
        return self.kafka_connection(None, None, where="the topology")

    def kafka_connection(self, bootstrap_servers: str | None,
                         client_config: Mapping[str, Any] | None, *,
                         where: str) -> KafkaConnection:
        """The connection of a component: the topology's, with the component's overrides.

        Raises:
            ConfigError: no brokers anywhere (names ``where`` and both ways to set them).
        """
        servers = bootstrap_servers or self.bootstrap_servers
        if not servers:
            msg = (f"{where}: no Kafka brokers: pass bootstrap_servers=... to it or set "
                   "'kafka.bootstrap.servers' in the topology configuration")
            raise ConfigError(msg)
        base = KafkaConnection(
            bootstrap_servers=servers,
            security_protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=self.kafka_sasl_password,
            ssl_ca_location=self.kafka_ssl_ca_location,
            ssl_certificate_location=self.kafka_ssl_certificate_location,
            ssl_key_location=self.kafka_ssl_key_location,
            ssl_key_password=self.kafka_ssl_key_password,
            settings=self.kafka_client_config,
        )
        return base.with_overrides(bootstrap_servers, client_config)


_STORM_PROVIDERS = {
    "org.apache.storm.redis.state.RedisKeyValueStateProvider": "redis",
    "org.apache.storm.state.InMemoryKeyValueStateProvider": "memory",
}


def _custom_provider(path: str) -> Any:
    """A user's StateProvider from 'package.module:Class' (or 'package.module.Class')."""
    provider = load_object(path, "topology.state.provider", "give 'package.module:Class' of "
                           "a StateProvider importable on the driver and the executors")
    if not callable(getattr(provider, "new_state", None)):
        msg = f"topology.state.provider = {path!r} has no new_state(namespace, conf, context)"
        raise ConfigError(msg, hint="implement kstorm.state.StateProvider")
    return provider


def _shown(loc: tuple[Any, ...], value: Any) -> str:
    """A rejected value as an error message shows it (secrets never)."""
    if loc and isinstance(loc[0], str) and ("password" in loc[0] or "secret" in loc[0]):
        return "***"
    return repr(value)


class Config(dict):
    """A Storm-style configuration dict: Storm's key constants and setters.

    One constant per key :class:`TopologyConfig` accepts, named as Storm names it
    (``Config.TOPOLOGY_MAX_SPOUT_PENDING``); kstorm's own keys are ``KSTORM_*`` and
    ``KAFKA_*``. Keys under ``user.`` are free for the topology's own settings. A Storm key
    kstorm does not use is refused at submit with what to use instead.

    Example:
        >>> conf = Config()
        >>> conf.put(Config.TOPOLOGY_MAX_SPOUT_PENDING, 5000)
        >>> conf.set_num_workers(2)
        >>> conf
        {'topology.max.spout.pending': 5000, 'topology.workers': 2}
    """

    # Storm's keys (org.apache.storm.Config) kstorm accepts, and kstorm's topology.guarantee
    TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
    # the seeds' (and Storm before 0.8's) name for the same setting; the raw key
    # "topology.ackers" is refused with a hint, the constant ports as written
    TOPOLOGY_ACKERS = "topology.acker.executors"
    TOPOLOGY_DEBUG = "topology.debug"
    TOPOLOGY_GUARANTEE = "topology.guarantee"
    TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
    TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL = "topology.state.checkpoint.interval.ms"
    TOPOLOGY_STATE_PROVIDER = "topology.state.provider"
    TOPOLOGY_STATE_PROVIDER_CONFIG = "topology.state.provider.config"
    TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
    TOPOLOGY_WORKERS = "topology.workers"
    # Kafka: the topology's connection
    KAFKA_BOOTSTRAP_SERVERS = "kafka.bootstrap.servers"
    KAFKA_CLIENT_CONFIG = "kafka.client.config"
    KAFKA_SASL_MECHANISM = "kafka.sasl.mechanism"
    KAFKA_SASL_PASSWORD = "kafka.sasl.password"
    KAFKA_SASL_USERNAME = "kafka.sasl.username"
    KAFKA_SECURITY_PROTOCOL = "kafka.security.protocol"
    KAFKA_SSL_CA_LOCATION = "kafka.ssl.ca.location"
    KAFKA_SSL_CERTIFICATE_LOCATION = "kafka.ssl.certificate.location"
    KAFKA_SSL_KEY_LOCATION = "kafka.ssl.key.location"
    KAFKA_SSL_KEY_PASSWORD = "kafka.ssl.key.password"
    # kstorm's own keys
    KSTORM_BAD_INPUT_POLICY = "kstorm.bad.input.policy"
    KSTORM_BOLT_ERROR_POLICY = "kstorm.bolt.error.policy"
    KSTORM_CAPTURE_EMITTED = "kstorm.capture.emitted"
    KSTORM_CHECKPOINT_DIR = "kstorm.checkpoint.dir"
    KSTORM_CHECKPOINT_ROOT = "kstorm.checkpoint.root"
    KSTORM_COMMIT_OVERLAP = "kstorm.commit.overlap"
    KSTORM_DEAD_LETTER_MAX_BYTES = "kstorm.dead.letter.max.bytes"
    KSTORM_DEAD_LETTER_TOPIC = "kstorm.dead.letter.topic"
    KSTORM_METRICS_PORT = "kstorm.metrics.port"
    KSTORM_SHUFFLE_PARTITIONS = "kstorm.shuffle.partitions"
    KSTORM_SPARK_CLASS_CACHE = "kstorm.spark.class.cache"
    KSTORM_SPARK_CONF = "kstorm.spark.conf"
    KSTORM_SPARK_MASTER = "kstorm.spark.master"
    KSTORM_SPARK_PYTHON_ZYGOTE = "kstorm.spark.python.zygote"
    KSTORM_SPARK_RELEASE_PLANNERS = "kstorm.spark.release.planners"
    KSTORM_SPOUT_IDLE_CALLS = "kstorm.spout.idle.calls"
    KSTORM_SPOUT_MAX_BATCH_MS = "kstorm.spout.max.batch.ms"
    KSTORM_SPOUT_MAX_BATCH_TUPLES = "kstorm.spout.max.batch.tuples"
    KSTORM_SPOUT_MAX_FAILURES = "kstorm.spout.max.failures"
    KSTORM_STATE_INIT_EMPTY = "kstorm.state.init.empty"
    KSTORM_TOPICS_MUST_EXIST = "kstorm.topics.must.exist"
    KSTORM_TRANSACTION_BACKOFF_MS = "kstorm.transaction.backoff.ms"
    KSTORM_TRANSACTION_FAILURE_POLICY = "kstorm.transaction.failure.policy"
    KSTORM_TRANSACTION_MAX_ATTEMPTS = "kstorm.transaction.max.attempts"
    KSTORM_TRIGGER = "kstorm.trigger"
    KSTORM_TRIGGER_INTERVAL_MS = "kstorm.trigger.interval.ms"

    def put(self, key: str, value: Any) -> None:
        """Set ``key`` (Storm's ``conf.put(Config.TOPOLOGY_DEBUG, true)``)."""
        self[key] = value

    def put_all(self, conf: Mapping[str, Any]) -> None:
        """Set every key of ``conf`` (Storm's ``putAll``)."""
        self.update(conf)

    def set_debug(self, debug: bool) -> None:
        """``topology.debug``: log every emitted tuple (logger ``kstorm.debug``)."""
        self["topology.debug"] = debug

    def set_message_timeout_secs(self, secs: int) -> None:
        """``topology.message.timeout.secs``."""
        self["topology.message.timeout.secs"] = secs

    def set_max_spout_pending(self, n: int) -> None:
        """``topology.max.spout.pending``."""
        self["topology.max.spout.pending"] = n

    def set_num_workers(self, n: int) -> None:
        """``topology.workers``: Spark executors on a cluster (one process locally)."""
        self["topology.workers"] = n

    def set_num_ackers(self, n: int) -> None:
        """``topology.acker.executors`` (0 = at-most-once)."""
        self["topology.acker.executors"] = n

    def set_guarantee(self, guarantee: str | Guarantee) -> None:
        """``topology.guarantee``: at-most-once, at-least-once or exactly-once."""
        self["topology.guarantee"] = Guarantee(guarantee).value

    def set_bootstrap_servers(self, servers: str) -> None:
        """``kafka.bootstrap.servers`` used by spouts and sinks that do not name their own."""
        self["kafka.bootstrap.servers"] = servers
