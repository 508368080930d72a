"""Topology configuration: Storm's key names, validated into one frozen model.

Users build a :class:`Config` (a ``dict``, as Storm's ``Config`` is a ``HashMap``) with Storm's
keys, and :func:`kstorm.submit_topology` validates it into :class:`TopologyConfig`. Each
default lives here and only here; ``kstorm/_spark/session.py`` translates it to Spark options.

Example:
    >>> conf = Config({"topology.message.timeout.secs": 60})
    >>> conf.set_max_spout_pending(1000)
    >>> TopologyConfig.from_conf(conf).message_timeout_secs
    60
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kstorm.errors import ConfigError


class Guarantee(StrEnum):
    """Processing guarantee (seed 003)."""

    AT_MOST_ONCE = "at-most-once"
    AT_LEAST_ONCE = "at-least-once"
    EXACTLY_ONCE = "exactly-once"


class TriggerMode(StrEnum):
    """How micro-batches are triggered."""

    CONTINUOUS = "continuous"        # a processing-time trigger, runs until stopped
    AVAILABLE_NOW = "available-now"  # process what is in the topics now, then return


class TopologyConfig(BaseModel):
    """The validated, frozen configuration of a submitted topology."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    guarantee: Guarantee = Field(Guarantee.EXACTLY_ONCE, alias="topology.guarantee")
    acker_executors: int | None = Field(None, ge=0, alias="topology.acker.executors")
    message_timeout_secs: int = Field(30, ge=1, alias="topology.message.timeout.secs")
    max_spout_pending: int | None = Field(None, ge=1, alias="topology.max.spout.pending")
    state_provider: str = Field("spark", alias="topology.state.provider")
    state_provider_config: str | None = Field(None, alias="topology.state.provider.config")
    debug: bool = Field(False, alias="topology.debug")
    bootstrap_servers: str | None = Field(None, alias="kafka.bootstrap.servers")
    master: str = Field("local[*]", alias="kstorm.spark.master")
    checkpoint_dir: Path | None = Field(None, alias="kstorm.checkpoint.dir")
    checkpoint_root: Path = Field(Path(".kstorm/checkpoints"), alias="kstorm.checkpoint.root")
    trigger: TriggerMode = Field(TriggerMode.CONTINUOUS, alias="kstorm.trigger")
    trigger_interval_ms: int = Field(1000, ge=0, alias="kstorm.trigger.interval.ms")
    shuffle_partitions: int | None = Field(None, ge=1, alias="kstorm.shuffle.partitions")
    spark_conf: dict[str, str] = Field(default_factory=dict, alias="kstorm.spark.conf")
    spark_class_cache: bool = Field(True, alias="kstorm.spark.class.cache")
    output_dir: Path | None = Field(None, alias="kstorm.output.dir")
    progress: bool = Field(False, alias="kstorm.progress")
    bolt_error_policy: str = Field("dead-letter", alias="kstorm.bolt.error.policy")
    dead_letter_topic: str | None = Field(None, alias="kstorm.dead.letter.topic")
    bad_input_policy: str = Field("dead-letter", alias="kstorm.bad.input.policy")
    capture_emitted: bool = Field(False, alias="kstorm.capture.emitted")
    # free-form spouts (next_tuple): when a batch of their emits ends (kstorm/_spout_executor.py)
    spout_max_batch_tuples: int = Field(10_000, ge=1, alias="kstorm.spout.max.batch.tuples")
    spout_max_batch_ms: int = Field(1_000, ge=1, alias="kstorm.spout.max.batch.ms")
    spout_idle_calls: int = Field(3, ge=1, alias="kstorm.spout.idle.calls")
    spout_max_failures: int = Field(3, ge=1, alias="kstorm.spout.max.failures")

    @field_validator("bad_input_policy")
    @classmethod
    def _known_bad_input_policy(cls, value: str) -> str:
        if value not in ("dead-letter", "fail", "skip-and-count"):
            msg = f"expected 'dead-letter', 'fail' or 'skip-and-count', got {value!r}"
            raise ValueError(msg)
        return value

    @field_validator("bolt_error_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in ("dead-letter", "fail"):
            msg = f"expected 'dead-letter' or 'fail', got {value!r}"
            raise ValueError(msg)
        return value

    @field_validator("state_provider")
    @classmethod
    def _known_provider(cls, value: str) -> str:
        if value not in ("spark", "memory", "redis"):
            msg = f"expected 'spark', 'memory' or 'redis', got {value!r}"
            raise ValueError(msg)
        return value

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None) -> TopologyConfig:
        """Validate a Storm-style config mapping; unknown keys are an error."""
        data = {k: v for k, v in dict(conf or {}).items() if not k.startswith("user.")}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']} (got {err.get('input')!r})"
                for err in exc.errors()
            )
            msg = f"invalid topology configuration: {problems}"
            raise ConfigError(msg) from exc

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


class Config(dict):
    """A Storm-style configuration dict with setters for the common keys.

    Keys under ``user.`` are free for the topology's own settings.
    """

    def set_debug(self, debug: bool) -> None:
        """``topology.debug``."""
        self["topology.debug"] = debug

    def set_message_timeout_secs(self, secs: int) -> None:
        """``topology.message.timeout.secs``."""
        self["topology.message.timeout.secs"] = secs

    def set_max_spout_pending(self, n: int) -> None:
        """``topology.max.spout.pending``."""
        self["topology.max.spout.pending"] = n

    def set_num_ackers(self, n: int) -> None:
        """``topology.acker.executors`` (0 = at-most-once)."""
        self["topology.acker.executors"] = n

    def set_guarantee(self, guarantee: str | Guarantee) -> None:
        """``topology.guarantee``: at-most-once, at-least-once or exactly-once."""
        self["topology.guarantee"] = Guarantee(guarantee).value

    def set_bootstrap_servers(self, servers: str) -> None:
        """``kafka.bootstrap.servers`` used by spouts and sinks that do not name their own."""
        self["kafka.bootstrap.servers"] = servers
