"""Configuration keys kstorm does not accept: why, and what to use instead.

A ported Storm topology brings Storm's configuration with it. Keys that configure Storm's
daemons (ZooKeeper, Nimbus, supervisors, workers' JVMs) or mechanisms kstorm replaces
(Kryo, the disruptor queues, transactional state in ZooKeeper) have nothing to set here;
:func:`check_keys` refuses them with a :class:`~kstorm.errors.ConfigError` whose hint says
what kstorm does instead, and a key one typo away from an accepted one with "did you mean".
Keys under ``user.`` are the topology's own and never checked.

Example:
    >>> try:
    ...     check_keys({"topology.ackers": 1}, {"topology.acker.executors"})
    ... except ConfigError as exc:
    ...     print(exc.hint)
    set topology.acker.executors (Config.TOPOLOGY_ACKER_EXECUTORS)
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from typing import Any

from kstorm.errors import ConfigError

# exact Storm keys: (why kstorm does not use it, what to use instead)
_STORM_KEYS: dict[str, tuple[str, str]] = {
    "topology.ackers": (
        "Storm's old name (before 0.8) of topology.acker.executors",
        "set topology.acker.executors (Config.TOPOLOGY_ACKER_EXECUTORS)"),
    "topology.tasks": (
        "a component's number of tasks is its parallelism in kstorm",
        "pass it to set_spout/set_bolt (parallelism=n), or call set_num_tasks(n)"),
    "topology.max.task.parallelism": (
        "kstorm caps parallelism per component, not for the whole topology",
        "call set_max_task_parallelism(n) on the component's declarer"),
    "topology.name": (
        "the topology's name is an argument of the submit call",
        "pass it to kstorm.submit_topology(name, conf, topology)"),
    "topology.enable.message.timeouts": (
        "at least once a tuple tree always times out after topology.message.timeout.secs",
        "set topology.message.timeout.secs; exactly once a failed batch is re-run whole"),
    "topology.worker.childopts": (
        "kstorm's workers are Spark executors, whose JVM options Spark sets",
        "put spark.executor.extraJavaOptions in kstorm.spark.conf"),
    "topology.spout.wait.strategy": (
        "a free-form spout that emits nothing ends its micro-batch",
        "set kstorm.spout.idle.calls and kstorm.trigger.interval.ms"),
    "topology.sleep.spout.wait.strategy.time.ms": (
        "a free-form spout that emits nothing ends its micro-batch",
        "set kstorm.spout.idle.calls and kstorm.trigger.interval.ms"),
    "topology.trident.batch.emit.interval.millis": (
        "a micro-batch is kstorm's batch, started by Spark's trigger",
        "set kstorm.trigger.interval.ms"),
    "topology.eventlogger.executors": (
        "there is no event logger; topology.debug logs every emitted tuple",
        "set topology.debug (Config.TOPOLOGY_DEBUG)"),
    "topology.metrics.consumer.register": (
        "kstorm serves its metrics for Prometheus instead of calling metrics consumers",
        "set kstorm.metrics.port"),
    "topology.backpressure.enable": (
        "Spark reads a bounded batch at a time, so there is no queue to back up",
        "bound batches with KafkaSpout(max_offsets_per_batch=...) or "
        "kstorm.spout.max.batch.tuples"),
    "storm.local.dir": (
        "kstorm keeps its local files in the topology's checkpoint directory",
        "set kstorm.checkpoint.root or kstorm.checkpoint.dir"),
}

# key prefixes: (why, instead)
_STORM_PREFIXES: dict[str, tuple[str, str]] = {
    "transactional.zookeeper.": (
        "kstorm keeps a transactional topology's txids and metadata in Spark's checkpoint "
        "and the sinks' commit records, not in ZooKeeper",
        "remove it; set kstorm.checkpoint.dir to place the checkpoint"),
    "storm.zookeeper.": (
        "kstorm runs without ZooKeeper: Spark's checkpoint holds what Storm keeps there",
        "remove it; set kstorm.checkpoint.dir to place the checkpoint"),
    "nimbus.": (
        "there is no Nimbus: Spark's master schedules the topology",
        "set kstorm.spark.master, or start the driver with spark-submit --master"),
    "supervisor.": (
        "there are no supervisors: Spark's cluster manager runs the executors",
        "set Spark options in kstorm.spark.conf"),
    "worker.": (
        "kstorm's workers are Spark executors",
        "set Spark options (spark.executor.*) in kstorm.spark.conf"),
    "drpc.": ("kstorm has no DRPC server", "read results from a sink (Kafka, Redis)"),
    "ui.": ("kstorm has no Storm UI", "see Spark's UI and kstorm.metrics.port"),
    "logviewer.": ("kstorm has no log viewer", "see Spark's UI and the driver's log"),
    "pacemaker.": ("there are no worker heartbeats to keep", "remove it"),
    "topology.bolts.": (
        "a windowed bolt's settings are set on the bolt, not in the configuration",
        "call with_window/with_tumbling_window, with_timestamp_field, with_lag, "
        "with_watermark_interval, with_late_tuple_stream on the bolt"),
    "topology.kryo.": (
        "kstorm pickles tuples between tasks (Arrow for spout rows); there is no Kryo",
        "remove it; values need only be picklable"),
    "topology.fall.back.on.java.serialization": (
        "kstorm pickles tuples between tasks; there is no Java serialization",
        "remove it; values need only be picklable"),
    "topology.skip.missing.kryo.registrations": (
        "kstorm pickles tuples between tasks; there is no Kryo", "remove it"),
    "topology.executor.": (
        "tuples move between tasks in Spark's exchanges, not disruptor queues",
        "remove it; bound batches with kstorm.spout.max.batch.tuples"),
    "topology.transfer.": (
        "tuples move between tasks in Spark's exchanges, not disruptor queues",
        "remove it; bound batches with kstorm.spout.max.batch.tuples"),
}


def not_used(key: str) -> tuple[str, str] | None:
    """``(why, instead)`` for a Storm key kstorm does not use, else None."""
    found = _STORM_KEYS.get(key)
    if found is not None:
        return found
    for prefix, why in _STORM_PREFIXES.items():
        if key.startswith(prefix):
            return why
    return None


def storm_keys_not_used() -> Iterable[str]:
    """The exact keys and the prefixes (ending in ``.``) :func:`not_used` knows."""
    return [*_STORM_KEYS, *_STORM_PREFIXES]


def check_keys(keys: Iterable[str], accepted: Collection[str]) -> None:
    """Refuse, with a hint, a key kstorm does not use or a misspelling of an accepted one.

    Keys in ``accepted`` and under ``user.`` pass.

    Args:
        keys: the keys given.
        accepted: what the typed configuration accepts (its dotted keys are suggested
            for misspellings).

    Raises:
        ConfigError: the first other key: why kstorm does not use it and what to use
            instead, or the accepted key it is a misspelling of, or that it is unknown.
    """
    for key in keys:
        if not isinstance(key, str) or key in accepted or key.startswith("user."):
            continue
        known = not_used(key)
        if known is not None:
            why, instead = known
            msg = f"{key} is not a kstorm key: {why}"
            raise ConfigError(msg, hint=instead)
        keys = [k for k in accepted if "." in k]  # keys, not the model's field names
        close = difflib.get_close_matches(key, keys, n=1, cutoff=0.85)
        if close:
            msg = f"unknown configuration key {key!r}: did you mean {close[0]!r}?"
            raise ConfigError(msg, hint=f"set {close[0]!r}; keys under 'user.' are free for "
                              "the topology's own settings")
        msg = f"unknown configuration key {key!r}"
        raise ConfigError(msg, hint="kstorm.Config's constants name every key kstorm accepts "
                          "(Config.TOPOLOGY_*, Config.KSTORM_*, Config.KAFKA_*); keys under "
                          "'user.' are free for the topology's own settings")


def load_object(path: str, key: str, hint: str) -> Any:
    """The object 'package.module:Class' (or 'package.module.Class') names.

    A class is instantiated; a path that cannot be imported is a :class:`ConfigError`
    naming config ``key``, with ``hint``.
    """
    import importlib

    module, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        found: Any = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        msg = f"{key} = {path!r} cannot be imported: {exc}"
        raise ConfigError(msg, hint=hint) from exc
    return found() if isinstance(found, type) else found
