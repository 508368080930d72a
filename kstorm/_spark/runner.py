"""Start a topology on Spark: the steps from a validated topology to a running query.

:func:`start` takes them top to bottom (lock, recover, check, plan, launch), one function
each; its docstring numbers them. Everything a step opens is entered in one
:class:`contextlib.ExitStack`, so a step that raises leaves nothing open behind it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from kstorm._runtime import reconcile
from kstorm._runtime.checkpoint import CheckpointLayout
from kstorm._runtime.checkpoint_lock import CheckpointLock
from kstorm._runtime.deadletter import DeadLetterWriter
from kstorm._runtime.plan import compile_plan, reliability_plan, source_kind
from kstorm._runtime.progress import Progress
from kstorm._runtime.reliability import SpoutReliability, lowest_unacked
from kstorm._runtime.state_book import StateBook
from kstorm._runtime.ticks import tick_periods
from kstorm._spark import overlap, speedups, state_rescale
from kstorm._spark.batch_rows import foreach_batch
from kstorm._spark.commit import UNACKED_STATE, CommitPhase, window_state_key
from kstorm._spark.compiler import compile_query
from kstorm._spark.offset_log import (
    checkpoint_sql_conf,
    last_committed_batch,
    next_batch_id,
    replay_last_batch,
)
from kstorm._spark.session import lost_jvm, session_for, spark_stopped, start_zygote
from kstorm._spark.speedups import planners
from kstorm._spark.stage import release_instances
from kstorm._spark.windowed import WindowCommit
from kstorm.config import Guarantee, TopologyConfig, TriggerMode
from kstorm.errors import ConfigError, StateError, TopologyError
from kstorm.handle import TopologyHandle
from kstorm.sink import BaseSink, SinkContext
from kstorm.topology import StormTopology

log = logging.getLogger("kstorm")


def start(name: str, conf: dict[str, Any], topology: StormTopology) -> TopologyHandle:
    """Compile ``topology`` and start it as one Spark streaming query.

    1. Lock: validate the configuration, compile the topology into stages
       (``kstorm/_runtime/plan.py``) and take the checkpoint's lock (:func:`_lock`).
    2. Recover: open the sinks and reconcile the checkpoint with their records
       (``kstorm/_runtime/reconcile.py``): maybe move a stale checkpoint aside or run its last
       batch again, settle the state providers at the same txid, record the txid base, and
       start the spouts where the sink stopped (:func:`_recover`).
    3. Check: refuse Spark settings the checkpoint would override, and an acking timeout a
       window cannot meet (:func:`_check`).
    4. Plan: build the streaming DataFrames (``compiler.py``), the commit phase
       (``commit.py``) and the query's ``foreachBatch`` writer (:func:`_plan`).
    5. Launch: start the query, and hand it and what the start opened to a
       :class:`TopologyHandle` (:func:`_launch`).

    One :class:`contextlib.ExitStack` holds everything the steps open: the lock, the sinks,
    the session's settings, the planners' registration, the dead-letter producer, the
    metrics server, the read planner started ahead. If a step raises, the stack closes what was
    opened so far, once each and latest first, and lets the lock go (a refused start leaves
    no checkpoint behind). Once the query runs, the stack goes with the handle: the commit
    phase closes the sinks, the handle the metrics server, and stopping releases the lock.
    """
    with contextlib.ExitStack() as opened:
        # Step 1
        run = _lock(name, conf, topology, opened)
        # Step 2
        recovered = _recover(run, opened)
        # Step 3
        acking = _check(run, recovered.topology)
        # Step 4
        ready = _plan(run, recovered, acking, opened)
        # Step 5
        return _launch(run, recovered, ready, opened)


@dataclasses.dataclass(frozen=True)
class _Locked:
    """Step 1's result: the validated start and its locked checkpoint."""

    name: str
    conf: dict[str, Any]
    settings: TopologyConfig
    topology: StormTopology  # its Kafka spouts carry their connection
    plan: Any  # the stages (kstorm/_runtime/plan.py)
    checkpoint: Path
    layout: CheckpointLayout
    lock: CheckpointLock
    existed: bool  # whether the checkpoint directory existed before the lock was taken


@dataclasses.dataclass(frozen=True)
class _Recovered:
    """Step 2's result: the open sinks, and where the topology resumes."""

    topology: StormTopology  # its Kafka spouts start where the resumed sink stopped
    sinks: dict[str, BaseSink]
    missing_topics: dict[str, list[str]]  # spout id -> topics that do not exist yet
    refused: list[str]  # why the sinks may not commit while the next batch runs
    resume: reconcile.Resume
    states: StateBook | None
    resumed_state: dict[str, Any]  # the resumed sink's stored state ({} without one)
    #: a rescaling start: its stateful bolts' state per new task (``state_rescale.py``)
    initial_state: dict[str, list[dict[bytes, bytes]]] | None = None


@dataclasses.dataclass(frozen=True)
class _Ready:
    """Step 4's result: the query's writer, ready to start, and what it runs with."""

    spark: Any
    compiled: Any
    commit: CommitPhase
    metrics: Any
    writer: Any
    overlapped: bool  # kstorm.commit.overlap: the sinks commit while the next batch runs
    end_planning: Callable[[], None]  # ends the planners' registration (planners.planning)
    session: contextlib.ExitStack  # puts the session's settings back once the query started


def _lock(name: str, conf: dict[str, Any], topology: StormTopology,
          opened: contextlib.ExitStack) -> _Locked:
    """Step 1: validate the configuration, compile the stages and lock the checkpoint.

    Every Kafka spout gets its connection (the topology's ``kafka.*`` settings under the
    spout's own). ``opened`` lets the lock go when the topology stops, or if a later step
    raises; then a checkpoint directory the lock created is removed too.
    """
    settings = TopologyConfig.from_conf(conf)
    if settings.debug:
        _show_debug_log()
    start_zygote(settings)  # imports pyspark for Spark's Python processes meanwhile
    topology = with_connections(topology, settings)
    _check_transactional(topology, settings)
    plan = compile_plan(topology, tick_periods(topology, settings.tick_tuple_freq_secs))
    checkpoint = settings.checkpoint_for(topology.transactional_id or name)
    _check_checkpoint_writable(checkpoint, settings)
    existed = checkpoint.exists()  # before the lock's file makes the directory
    lock = CheckpointLock.acquire(checkpoint, name)
    opened.push(_lock_release(lock, existed=existed))
    return _Locked(name, conf, settings, topology, plan, checkpoint,
                   CheckpointLayout(checkpoint), lock, existed)


def _lock_release(lock: CheckpointLock, *, existed: bool) -> Callable[..., bool]:
    """An exit callback letting ``lock`` go: a refused start leaves no checkpoint behind."""

    def release(exc_type: type[BaseException] | None, *_: object) -> bool:
        lock.release(discard=exc_type is not None and not existed)
        return False

    return release


def _on_failure(opened: contextlib.ExitStack, undo: Callable[[], object]) -> None:
    """Have ``opened`` call ``undo`` only when it unwinds on an exception (a failed start).

    What a started topology keeps open is closed by its handle instead (:func:`start`).
    """

    def undo_on_failure(exc_type: type[BaseException] | None, *_: object) -> bool:
        if exc_type is not None:
            undo()
        return False

    opened.push(undo_on_failure)


def _recover(run: _Locked, opened: contextlib.ExitStack) -> _Recovered:
    """Step 2: open the sinks and settle where the topology resumes.

    The spouts' brokers must answer first (:func:`_check_kafka_spouts`). The checkpoint is
    reconciled with the sinks' records (:func:`_reconcile`); a resume from a sink that would
    reset state held only in the checkpoint is refused, and so is a change to the tick
    source. The state providers' state is settled at the txid the topology resumes after, a
    checkpoint it does not continue is moved aside, and the txid base recorded.
    """
    missing_topics = _check_kafka_spouts(run.topology, run.settings.topics_must_exist)
    sinks = open_sinks(run.name, run.conf, run.settings, run.topology, run.plan.sinks, opened)
    rescaling = _rescale_spark_state(run, sinks)
    resume, last_batch, refused = _reconcile(run, sinks)
    if rescaling is not None:
        if resume.txid_base != rescaling.txid + 1:
            msg = (f"topology {run.name!r}: its stateful bolts' state moved at txid "
                   f"{rescaling.txid}, but it resumes at txid {resume.txid_base}")
            raise StateError(msg, hint="start it again: the move is made again from "
                             f"{state_rescale.record_path(run.checkpoint)}")
        resume = dataclasses.replace(resume, reset_checkpoint=False)  # moved already
    elif resume.from_sink is not None:
        _check_state_survives(run.name, run.topology, run.plan, run.checkpoint, resume,
                              run.settings, existed=run.existed)
    _check_tick_source(run.name, run.plan, run.checkpoint, run.layout)
    states = _recover_states(run.name, run.conf, run.settings, run.topology, run.plan, resume,
                             last_batch, run.layout.txid_base())
    resumed_state = sinks[resume.from_sink].committed_state() if resume.from_sink else {}
    if resume.reset_checkpoint and run.layout.move_aside() is not None:
        run.lock.follow(run.name)
    run.layout.set_txid_base(resume.txid_base)
    topology = _resume_spouts(run, resume, resumed_state)
    return _Recovered(topology, sinks, missing_topics, refused, resume, states, resumed_state,
                      rescaling.initial_state if rescaling is not None else None)


def _rescale_spark_state(run: _Locked, sinks: dict[str, BaseSink]
                         ) -> state_rescale.Rescaling | None:
    """Stateful bolts whose parallelism changed: their Spark state moved to a new checkpoint.

    Only with ``topology.state.provider = spark`` (another provider moves its own state:
    ``kstorm/_runtime/state_book.py``); ``kstorm/_spark/state_rescale.py`` says how.
    """
    if run.settings.state_provider != "spark":
        return None
    records = {sid: sink.committed_offsets() for sid, sink in sinks.items()
               if sink.records_offsets}
    with contextlib.ExitStack() as session_settings:
        def session() -> Any:
            spark, restore = session_for(run.settings, app_name=run.name)
            session_settings.callback(restore)
            return spark

        return state_rescale.rescale(
            run.name, run.checkpoint, run.topology, run.plan,
            run.settings.guarantee is Guarantee.AT_LEAST_ONCE and run.settings.ackers_enabled,
            records, session, lambda: run.lock.follow(run.name))


def _reconcile(run: _Locked, sinks: dict[str, BaseSink]
               ) -> tuple[reconcile.Resume, int | None, list[str]]:
    """Where the topology starts, from the checkpoint and the sinks' records.

    Whether the sinks' commit may overlap the next batch is decided here (``overlap.py``):
    it says whether the checkpoint's last batch may run again. A batch Spark recorded and
    the sinks did not commit runs again from its logged offsets; a first batch that never
    committed is planned again (:func:`_plan_first_batch_again`).

    Returns:
        The resume, the checkpoint's last committed batch id, and the overlap's refusals.
    """
    name, checkpoint, layout = run.name, run.checkpoint, run.layout
    records = {sid: sink.committed_offsets() for sid, sink in sinks.items()
               if sink.records_offsets}
    last_batch = last_committed_batch(checkpoint)
    refused = overlap.refusals(run.topology, run.plan, run.settings, sinks)
    overlap.check(name, run.settings, refused)
    resume = reconcile.decide(last_batch, layout.txid_base(), run.existed, records,
                              replayable=not refused)
    resume = reconcile.numbered_from_one(
        resume, transactional=run.topology.transactional_id is not None,
        last_batch=last_batch, base_recorded=layout.txid_base_path.exists())
    if resume.replay_last is not None:
        removed = replay_last_batch(checkpoint, resume.replay_last)
        log.warning("topology %r: batch %s (txid %s) runs again from its logged offsets: Spark "
                    "had recorded it, its sinks had not committed it (removed %s)", name,
                    resume.replay_last, resume.txid_base + resume.replay_last, removed)
    if (last_batch is None and resume.from_sink is None and not resume.reset_checkpoint
            and next_batch_id(checkpoint) > 0 and _keeps_spark_state(run.plan, run.settings)):
        _plan_first_batch_again(run)
    return resume, last_batch, refused


def _plan_first_batch_again(run: _Locked) -> None:
    """A topology stopped during its very first batch: plan it again.

    Spark refuses to run batch 0 again for a query with state operators (its offsets log
    must then be empty). Nothing of it was committed anywhere, so it is planned again from
    the spouts' starting offsets; a free-form spout's logged batches move back: they are
    replayed as logged (its spout emitted them once, and may not emit them again).
    """
    log.warning("topology %r: its first batch never committed (stopped during it); "
                "planning it again from the spouts' starting offsets", run.name)
    stale = run.layout.move_aside()
    if stale is not None:
        run.lock.follow(run.name)
        _keep_spout_logs(CheckpointLayout(stale), run.layout)


def _resume_spouts(run: _Locked, resume: reconcile.Resume,
                   resumed_state: dict[str, Any]) -> StormTopology:
    """The topology, its Kafka spouts starting where the sink it resumes from stopped.

    At least once, a spout starts at its lowest un-acked offset the sink recorded instead.
    """
    if resume.from_sink is None:
        return run.topology
    log.warning("topology %r resumes from sink %r at txid %s", run.name, resume.from_sink,
                resume.txid_base)
    offsets = resume.offsets
    if run.settings.guarantee is Guarantee.AT_LEAST_ONCE and UNACKED_STATE in resumed_state:
        offsets = lowest_unacked(offsets, resumed_state[UNACKED_STATE])
    return _start_spouts_at(run.topology, offsets)


def _check(run: _Locked, topology: StormTopology) -> Any:
    """Step 3: refuse what the query could not keep to, before Spark starts it.

    A Spark setting the checkpoint would override (:func:`check_checkpoint_conf`); at least
    once with ackers, a window that outlives a tuple's timeout
    (``kstorm/_runtime/plan.py``).

    Returns:
        The acking plan (at least once with ackers), else None.
    """
    settings = run.settings
    check_checkpoint_conf(run.checkpoint, settings)
    return reliability_plan(topology, run.plan, settings)


def _plan(run: _Locked, recovered: _Recovered, acking: Any,
          opened: contextlib.ExitStack) -> _Ready:
    """Step 4: the streaming DataFrames, the commit phase and the query's writer.

    The session takes the topology's settings until the query has started (``session``
    puts them back), and Spark's planner processes are kept until it has planned
    (``end_planning``: :func:`_release_planners_when_planned`).
    """
    spark, restore = session_for(run.settings, app_name=run.name)
    session = opened.enter_context(contextlib.ExitStack())
    session.callback(restore)  # closed once the query started (Step 5), or the start failed
    end_planning = planners.planning()  # no planner is stopped until this query has planned
    _on_failure(opened, end_planning)
    overlapped = overlap.enabled(run.name, run.settings, recovered.refused,
                                 spark.sparkContext.master)
    compiled = compile_query(spark, recovered.topology, run.plan, run.name, run.conf,
                             run.settings, run.layout,
                             window_seeds=dict(recovered.resumed_state), acking=acking,
                             txid_base=recovered.resume.txid_base,
                             initial_state=recovered.initial_state)
    commit = _commit_phase(run, recovered, acking, overlapped, opened)
    metrics = _metrics_server(run.name, commit, run.settings)
    if metrics is not None:
        _on_failure(opened, metrics.close)
    writer = _writer(run, spark, compiled, commit)
    return _Ready(spark, compiled, commit, metrics, writer, overlapped, end_planning, session)


def _commit_phase(run: _Locked, recovered: _Recovered, acking: Any, overlapped: bool,
                  opened: contextlib.ExitStack) -> CommitPhase:
    """The batch's commit phase, its native windows seeded from the resumed sink's state."""
    topology = recovered.topology
    windows = {s.head: WindowCommit(s.head, topology.components[s.head].component.spec(),
                                    run.layout)
               for s in run.plan.stages if s.native_window}
    for component, window in windows.items():
        snapshot = recovered.resumed_state.get(window_state_key(component))
        if snapshot is not None:
            window.seed(snapshot)
    reliability = (SpoutReliability(topology, acking, run.layout) if acking is not None
                   else None)
    dead_letters = DeadLetterWriter(run.name, _dead_letter_connection(topology, run.settings),
                                    run.settings.dead_letter_topic or f"{run.name}.dead-letters",
                                    max_bytes=run.settings.dead_letter_max_bytes)
    _on_failure(opened, dead_letters.close)
    return CommitPhase(topology, run.name, run.checkpoint, run.settings, recovered.sinks,
                       recovered.resume.txid_base, Progress(), dead_letters, windows,
                       reliability, run.plan, run.conf, recovered.states, overlap=overlapped)


def _writer(run: _Locked, spark: Any, compiled: Any, commit: CommitPhase) -> Any:
    """The query's ``foreachBatch`` writer, with the checkpoint and the trigger."""
    writer = foreach_batch(compiled.output.writeStream, spark, commit)
    writer = writer.option("checkpointLocation", str(run.checkpoint)).queryName(run.name)
    if run.settings.trigger is TriggerMode.AVAILABLE_NOW:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{run.settings.trigger_interval_ms} milliseconds")


def _launch(run: _Locked, recovered: _Recovered, ready: _Ready,
            opened: contextlib.ExitStack) -> TopologyHandle:
    """Step 5: start the query, and hand it with what the start opened to its handle.

    Spark's read planner starts ahead meanwhile (cancelled if the query does not start).
    Once the query runs, ``opened`` goes to the handle's stop (:func:`_on_stop`).
    """
    name, settings = run.name, run.settings
    if ready.overlapped:
        log.info("topology %r: each batch's sinks commit while the next batch runs "
                 "(kstorm.commit.overlap)", name)
    workers_note = settings.workers_note()
    if workers_note is not None:
        log.info("topology %r: %s", name, workers_note)
    log.info("starting topology %r (%d stages) checkpoint=%s", name, len(run.plan.stages),
             run.checkpoint)
    query_failed = threading.Event()
    _on_failure(opened, query_failed.set)
    read_planner = planners.start_read_planner(ready.spark, cancel=query_failed)
    query = ready.writer.start()
    _on_failure(opened, query.stop)
    ready.session.close()  # the query copied the session's settings when it started
    ready.commit.on_failure = query.stop  # a sink commit that failed after its batch returned
    if recovered.missing_topics:
        _watch_missing_topics(name, recovered.topology, recovered.missing_topics, query)
    _release_planners_when_planned(name, ready.spark, query, settings.release_planners
                                   and speedups.enabled("planners"),
                                   after=read_planner, planned=ready.end_planning)
    run.lock.running = lambda: bool(query.isActive)
    on_stop = _on_stop(name, ready, opened.pop_all())
    return TopologyHandle(name, query, ready.commit, settings, ready.metrics,
                          on_stop=on_stop)


def _on_stop(name: str, ready: _Ready, owned: contextlib.ExitStack) -> Callable[[], None]:
    """What the handle calls once the query stopped: the bolts' cleanup, then ``owned``.

    ``owned`` is what the start opened (:func:`start`); closing it releases the lock.
    """

    def on_stop() -> None:
        try:
            release_instances(ready.spark, ready.compiled.run)
        except Exception as exc:
            if not (lost_jvm(exc) or spark_stopped(ready.spark)):
                raise
            log.info("topology %r: its bolts' cleanup did not run: Spark had stopped already "
                     "(a signal sent to the whole process group stops Spark's JVM too)", name)
        finally:
            owned.close()

    return on_stop


def _check_tick_source(name: str, plan: Any, checkpoint: Path, layout: CheckpointLayout
                       ) -> None:
    """Refuse to turn tick tuples on or off over a checkpoint Spark has planned batches in.

    Tick tuples are a Spark source of their own (``tick_source.py``); Spark cannot continue
    a query whose number of sources changed. Changing which bolts tick, or their periods,
    keeps the one source and is fine.
    """
    ticking = sorted(s.head for s in plan.stages if s.tick_secs is not None)
    recorded = layout.ticks()
    if next_batch_id(checkpoint) > 0 and bool(recorded) != bool(ticking):
        was = f"with tick tuples (bolts {recorded})" if recorded else "without tick tuples"
        now = f"bolts {ticking} tick" if ticking else "no bolt ticks"
        msg = (f"topology {name!r}: its checkpoint {checkpoint} was started {was}, and now "
               f"{now} (topology.tick.tuple.freq.secs): Spark cannot add or remove the "
               "source that delivers them in a running query")
        raise TopologyError(msg, hint="put the setting back, or start the topology from a "
                            "new kstorm.checkpoint.dir")
    layout.set_ticks(ticking)


def _keep_spout_logs(stale: CheckpointLayout, layout: CheckpointLayout) -> None:
    """Move free-form spouts' batch logs from a checkpoint moved aside into the new one."""
    logs = stale.spout_logs_dir
    if logs.is_dir():
        layout.root.mkdir(parents=True, exist_ok=True)
        logs.rename(layout.spout_logs_dir)
        log.warning("kept the free-form spouts' batch logs (%s): their batches are replayed "
                    "as logged", ", ".join(sorted(p.name for p in layout.spout_logs_dir
                                                  .iterdir())))


def _metrics_server(name: str, commit: CommitPhase, settings: TopologyConfig) -> Any:
    """The Prometheus endpoint (``kstorm.metrics.port``), or None."""
    if settings.metrics_port is None:
        return None
    from kstorm._runtime.metrics import MetricsServer

    try:
        server = MetricsServer(name, commit.progress, lambda: commit.dead_letters.count,
                               settings.metrics_port, highs=_high_watermarks(commit.topology))
    except OSError as exc:
        msg = (f"topology {name!r}: cannot serve metrics on port {settings.metrics_port}: "
               f"{exc.strerror or exc}")
        raise ConfigError(msg, hint="set kstorm.metrics.port to a free port (0 picks one)"
                          ) from exc
    log.info("topology %r serves Prometheus metrics on port %d", name, server.port)
    return server


def _high_watermarks(topology: StormTopology) -> Any:
    """For the lag metric: a Kafka spout's partitions' high watermarks, asked at scrape time."""
    from kstorm._kafka.client import driver_consumer, watermarks

    spouts = {s.id: s.component for s in topology.spouts() if source_kind(s.component) == "kafka"}

    def highs(spout: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if spout not in spouts:
            return {}
        consumer = driver_consumer(spouts[spout].client_config("consumer"))
        return {tp: hi for tp, (_, hi) in watermarks(consumer, partitions, timeout=5.0).items()}

    return highs


def _check_checkpoint_writable(checkpoint: Path, settings: TopologyConfig) -> None:
    """The checkpoint directory (or the folder it will be created in) must be writable."""
    key = "kstorm.checkpoint.dir" if settings.checkpoint_dir else "kstorm.checkpoint.root"
    at = checkpoint
    while not at.exists() and at != at.parent:
        at = at.parent
    problem = None
    if not at.is_dir():
        problem = f"{str(at)!r} is not a directory"
    elif not os.access(at, os.W_OK | os.X_OK):
        problem = f"{str(at)!r} is not writable by this user"
    if problem is not None:
        msg = f"checkpoint {str(checkpoint)!r} cannot be created or written: {problem}"
        raise ConfigError(msg, hint=f"set {key} to a directory this process can write")


def check_checkpoint_conf(checkpoint: Path, settings: TopologyConfig) -> None:
    """Settings the user chose that the checkpoint overrides are a :class:`ConfigError`.

    Spark runs a restarted query with the SQL settings its checkpoint recorded
    (:func:`checkpoint_sql_conf`: the shuffle partitions, the state store's provider and
    formats) and only logs that it ignored the session's. A value set with
    ``kstorm.shuffle.partitions`` or ``kstorm.spark.conf`` that differs would be accepted and
    ignored; one left to its default takes the checkpoint's quietly.
    """
    recorded = checkpoint_sql_conf(checkpoint)
    if not recorded:
        return
    for key, (setting, value) in sorted(settings.chosen_spark_settings().items()):
        kept = recorded.get(key)
        if kept is None or kept.strip() == value.strip():
            continue
        msg = (f"{setting} = {value!r}, but the checkpoint {checkpoint} ran with {key} = "
               f"{kept!r}, and Spark runs a checkpoint with the value it started with "
               "(yours would be ignored)")
        raise ConfigError(msg, hint=f"set {setting} to {kept!r} or leave it unset, or start "
                                    "over with a new checkpoint directory")


def _check_kafka_spouts(topology: StormTopology, must_exist: bool, timeout_s: float = 10.0
                        ) -> dict[str, list[str]]:
    """Every Kafka spout's brokers answer; returns the topics each names that do not exist.

    A missing topic is an error with ``kstorm.topics.must.exist``, else a warning naming it
    now and every minute until it exists (:func:`_watch_missing_topics`): never a silent wait.
    """
    from confluent_kafka import KafkaException

    from kstorm._kafka.client import driver_consumer
    from kstorm.errors import SourceError

    absent: dict[str, list[str]] = {}
    for spec in topology.spouts():
        spout: Any = spec.component
        if source_kind(spout) != "kafka":
            continue
        where = spout.resolved_connection().bootstrap_servers
        try:
            metadata = driver_consumer(spout.client_config("consumer")).list_topics(
                timeout=timeout_s)
        except KafkaException as exc:
            msg = (f"spout {spec.id!r}: no Kafka broker answered at {where} within "
                   f"{timeout_s:.0f} s ({exc.args[0] if exc.args else exc})")
            raise SourceError(msg, hint="check kafka.bootstrap.servers (or the spout's "
                              "bootstrap_servers), the security settings, and that the "
                              "brokers are up") from exc
        known = {t for t, md in metadata.topics.items() if md.error is None}
        missing = sorted(set(spout.topics or ()) - known)
        if missing:
            close = sorted(t for t in known if not t.startswith("__") and any(
                m.lower() in t.lower() or t.lower() in m.lower() for m in missing))
            msg = (f"spout {spec.id!r}: topic(s) {missing} do not exist at {where}"
                   + (f" (similar: {close[:5]})" if close else ""))
            hint = ("create the topic first, check its name, or use KafkaSpout(pattern=...) "
                    "to pick topics up as they appear")
            if must_exist:
                raise SourceError(msg, hint=hint)
            log.warning("%s: the spout waits for them (kstorm.topics.must.exist = true makes "
                        "this an error); %s", msg, hint)
            absent[spec.id] = missing
    return absent


MISSING_TOPIC_WARNING_S = 60.0


def _release_planners_when_planned(name: str, spark: Any, query: Any, all_planners: bool,
                                   poll_s: float = 0.1, settle_s: float = 5.0,
                                   after: Any = None, planned: Any = None) -> None:
    """Stop Spark's Python planner processes once the query has planned.

    The lookup planner always, where it ran (once per JVM; a session kstorm started skips
    it: :func:`kstorm._spark.speedups.planners.lookup_skipped`); with
    ``kstorm.spark.release.planners`` (``all_planners``) also the query's own planners,
    which Spark uses until its first batch is planned
    (:func:`kstorm._spark.speedups.planners.release_planners`). Nothing is stopped before
    the first batch has finished (or the query ended): a query plans its Python data
    sources one after the other, and a planner idle between two of them is about to be
    used again. Then ``planned`` is called (the start registered with
    :func:`kstorm._spark.speedups.planners.planning`), and a planner whose worker is not
    back in Spark's idle pool yet is tried again for ``settle_s``. The planners belong to
    the session, not to one query: within those seconds this thread may also stop planners
    another topology of the process planned with and kept
    (``kstorm.spark.release.planners: false``); that topology's next start then pays ~1 s
    to start them again, and nothing else changes. ``after``: the thread starting the read
    planner ahead (:func:`kstorm._spark.speedups.planners.start_read_planner`), waited for
    first.
    """

    def has_planned() -> bool:
        try:
            return not query.isActive or query.lastProgress is not None  # or ended
        except Exception:  # noqa: BLE001 - the JVM is gone: nothing plans any more
            return True

    def release() -> None:
        try:
            if after is not None:
                after.join()
            while not has_planned():
                time.sleep(poll_s)
        finally:
            if planned is not None:
                planned()
        left = planners.QUERY_PLANNERS if all_planners else ()
        if not planners.lookup_skipped():  # it runs in a session the user started
            left = (planners.LOOKUP_PLANNER, *left)
        stopped: list[str] = []
        settled = time.monotonic() + settle_s
        failure: Exception | None = None
        while left:
            try:
                done = planners.release_planners(spark, left, query)
            except Exception as exc:  # noqa: BLE001 - e.g. the JVM's map changed meanwhile
                done, failure = [], exc
            stopped += done
            left = tuple(m for m in left if m not in done)
            if time.monotonic() >= settled:
                break
            time.sleep(poll_s)
        if left and failure is not None:
            log.info("topology %r: Spark's idle Python planner processes were not stopped "
                     "(%s: %s)", name, type(failure).__name__, failure)
        if stopped:
            log.info("topology %r: stopped Spark's idle Python planner processes (%s)", name,
                     ", ".join(m.rsplit(".", 1)[-1] for m in stopped))

    threading.Thread(target=release, name=f"kstorm-planners-{name}", daemon=True).start()


def _watch_missing_topics(name: str, topology: StormTopology, missing: dict[str, list[str]],
                          query: Any) -> None:
    """Warn every minute while a spout's topics are missing and the topology runs."""
    from kstorm._kafka.client import driver_consumer

    def watch() -> None:
        waiting = dict(missing)
        while waiting:
            time.sleep(MISSING_TOPIC_WARNING_S)
            if not query.isActive:
                return
            for spout_id, topics in list(waiting.items()):
                spout: Any = topology.components[spout_id].component
                try:
                    metadata = driver_consumer(spout.client_config("consumer")).list_topics(
                        timeout=10.0)
                except Exception:  # noqa: BLE001 - the next round tries again
                    continue
                left = [t for t in topics if t not in metadata.topics
                        or metadata.topics[t].error is not None]
                if left:
                    log.warning("topology %r: spout %r still waits for topic(s) %s", name,
                                spout_id, left)
                    waiting[spout_id] = left
                else:
                    log.info("topology %r: spout %r's topics exist now", name, spout_id)
                    del waiting[spout_id]

    threading.Thread(target=watch, name=f"kstorm-topics-{name}", daemon=True).start()


def _keeps_spark_state(plan: Any, settings: TopologyConfig) -> bool:
    """Whether the query has state operators (transformWithState: state, windows, ackers)."""
    tracked = settings.guarantee is Guarantee.AT_LEAST_ONCE and settings.ackers_enabled
    return tracked or any(stage.stateful or (stage.windowed and not stage.native_window)
                          for stage in plan.stages)


def _recover_states(name: str, conf: dict[str, Any], settings: TopologyConfig,
                    topology: StormTopology, plan: Any, resume: reconcile.Resume,
                    last_batch: int | None, txid_base: int) -> StateBook | None:
    """Stateful bolts' state in a provider: settled at the txid the topology resumes after.

    The last committed txid is the sink's when resuming from it, none when starting over,
    else the checkpoint's (seed 000's recovery: ``kstorm/_runtime/state_book.py``).
    """
    stateful = [stage.head for stage in plan.stages if stage.stateful]
    windowed = provider_windows(plan)
    _check_init_empty(name, settings, stateful + windowed)
    if settings.state_provider == "spark" or not (stateful or windowed):
        return None
    if settings.state_provider == "memory":
        msg = (f"topology {name!r}: topology.state.provider = memory keeps state in one "
               f"process, but Spark runs the stateful and windowed bolts "
               f"{stateful + windowed} in Python workers apart from the driver, which "
               "commits it: nothing would be kept")
        raise ConfigError(msg, hint="use topology.state.provider = redis (durable) or "
                          "spark; the memory provider is for in-process tests")
    provider = settings.state_provider_instance()
    check = getattr(provider, "check", None)
    if callable(check):
        check()
    book = StateBook(topology, name, conf, provider, stateful, settings.state_provider,
                     windowed)
    if resume.from_sink is not None:
        last, where = resume.txid_base - 1, f"sink {resume.from_sink!r}'s record"
    elif resume.reset_checkpoint:
        last, where = None, "a start over from the spouts' starting offsets"
    elif last_batch is not None:
        last, where = txid_base + last_batch, "the checkpoint"
    else:
        last, where = (txid_base - 1 if txid_base > 0 else None), "the checkpoint"
    book.recover(last, init_empty=settings.state_init_empty, where=where)
    return book


def _check_init_empty(name: str, settings: TopologyConfig, held: list[str]) -> None:
    """``kstorm.state.init.empty`` names components whose provider state may start empty."""
    listed = list(settings.state_init_empty)
    if not listed:
        return
    if settings.state_provider == "spark":
        msg = (f"topology {name!r}: kstorm.state.init.empty = {listed} does nothing with "
               "topology.state.provider = spark (Spark's state store starts with its "
               "checkpoint)")
        raise ConfigError(msg, hint="remove it, or use a provider (redis) that holds state "
                          "outside the checkpoint")
    unknown = sorted(set(listed) - set(held))
    if unknown:
        msg = (f"topology {name!r}: kstorm.state.init.empty names {unknown}, which hold no "
               f"provider state (stateful and windowed bolts here: {sorted(held)})")
        raise ConfigError(msg, hint="list stateful bolts or user windowed bolts by their id")


def provider_windows(plan: Any) -> list[str]:
    """User windowed bolts, whose windows a state provider other than spark holds."""
    return [stage.head for stage in plan.stages if stage.windowed and not stage.native_window]


def state_only_in_checkpoint(topology: StormTopology, plan: Any,
                             settings: TopologyConfig | None = None) -> dict[str, str]:
    """Each component whose state lives only in Spark's checkpoint, and what that state is."""
    lost: dict[str, str] = {}
    external = settings is not None and settings.state_provider != "spark"
    for stage in plan.stages:
        if stage.stateful and external:
            continue
        if stage.stateful:
            lost[stage.head] = ("a stateful bolt: its KeyValueState lives in Spark's state "
                                "store (topology.state.provider = spark)")
        elif stage.windowed and not stage.native_window and not external:
            config = topology.components[stage.head].component.window_config
            if config.persistent:
                lost[stage.head] = ("a windowed bolt with a persistent window: its tuples live "
                                    "in Spark's state store")
            elif config.message_id_field is None:
                lost[stage.head] = ("a windowed bolt without with_message_id_field: its "
                                    "windows live in Spark's state store")
    return lost


def _check_state_survives(name: str, topology: StormTopology, plan: Any, checkpoint: Any,
                          resume: reconcile.Resume, settings: TopologyConfig | None = None, *,
                          existed: bool = True) -> None:
    """Refuse to resume from a sink when state held only in the checkpoint would be reset.

    ``existed``: whether the checkpoint directory existed when the topology started.
    """
    lost = state_only_in_checkpoint(topology, plan, settings)
    if not lost:
        return
    why = "is missing" if not existed else "is behind the sink"
    listed = "; ".join(f"{c!r} ({what})" for c, what in sorted(lost.items()))
    msg = (f"topology {name!r} cannot resume from sink {resume.from_sink!r} at txid "
           f"{resume.txid_base}: the checkpoint {str(checkpoint)!r} {why}, and state that "
           f"lived only there would restart empty: {listed}")
    raise StateError(msg, hint=(
        "restore the checkpoint directory; or start over by deleting the sinks' values and "
        "their records (kstorm:<topology>:<sink>:* in Redis) so everything is recomputed "
        "from the spouts' starting offsets"))


def with_connections(topology: StormTopology, settings: TopologyConfig) -> StormTopology:
    """A copy of ``topology`` whose Kafka spouts carry their resolved connection.

    A spout's connection is its own (``connection=``) or the topology's, with its
    ``bootstrap_servers`` and its ``consumer_config``'s security settings on top; every
    client the runtime creates for the spout uses it.
    """
    specs = dict(topology.components)
    for cid, spec in specs.items():
        spout: Any = spec.component
        if not spec.is_spout or source_kind(spout) != "kafka":
            continue
        if spout.connection is not None:
            connection = spout.connection.with_overrides(spout.bootstrap_servers,
                                                         spout.consumer_config)
        else:
            connection = settings.kafka_connection(spout.bootstrap_servers,
                                                   spout.consumer_config,
                                                   where=f"spout {cid!r}")
        specs[cid] = dataclasses.replace(spec, component=spout.with_connection(connection))
    return dataclasses.replace(topology, components=MappingProxyType(specs))


def _check_transactional(topology: StormTopology, settings: TopologyConfig) -> None:
    """A transactional topology is exactly once: the batch is the unit, not the tuple."""
    if topology.transactional_id is not None and settings.guarantee is not Guarantee.EXACTLY_ONCE:
        msg = (f"transactional topology {topology.transactional_id!r} runs exactly once "
               f"(Storm's Transactional topologies guide: batches, not tuples, are tracked), "
               f"got topology.guarantee = "
               f"{settings.guarantee.value!r}")
        raise ConfigError(msg, hint="remove topology.guarantee from the configuration")
    pending = settings.max_spout_pending
    if topology.transactional_id is not None and pending is not None and pending > 1:
        msg = (f"transactional topology {topology.transactional_id!r}: topology.max.spout."
               f"pending = {pending} asks for {pending} transactions in flight, but a Spark "
               "streaming query runs one micro-batch (one transaction) at a time: batch "
               "N + 1 is planned only after batch N's commit phase returned (README: "
               "Transactional topologies, pipelining)")
        raise ConfigError(msg, hint="remove topology.max.spout.pending or set it to 1")
    opaque = [s.id for s in topology.spouts() if topology.transactional_id is not None
              and getattr(s.component, "transactional_kind", "") == "opaque"]
    skipping = [b.id for b in topology.bolts() if getattr(b.component, "mode", None)
                == "transactional" and getattr(b.component, "is_sink", False)]
    if opaque and skipping:
        msg = (f"sink(s) {skipping} run in transactional mode behind the opaque spout "
               f"{opaque[0]!r}: a replayed txid may carry a different batch, which a "
               "transactional sink would skip (Storm's Transactional topologies guide)")
        raise ConfigError(msg, hint="use mode='opaque' for these sinks")


def open_sinks(name: str, conf: dict[str, Any], settings: TopologyConfig,
               topology: StormTopology, sink_ids: list[str],
               opened: contextlib.ExitStack) -> dict[str, BaseSink]:
    """Driver-side copies of the topology's sinks, opened (their clients built).

    If the start fails (``opened`` unwinds on an exception), the sinks opened so far are
    closed, in the order they opened; once the topology runs, its commit phase closes them
    (:meth:`CommitPhase.close`).
    """
    sinks: dict[str, BaseSink] = {}
    _on_failure(opened, lambda: _close_sinks(sinks))
    for sid in sink_ids:
        spec = topology.components[sid]
        sink = cast(BaseSink, copy.deepcopy(spec.component))
        context = SinkContext(name, sid, settings, MappingProxyType({**conf, **spec.conf}),
                              settings.kafka)
        sink.open(context)
        sinks[sid] = sink
    return sinks


def _close_sinks(sinks: dict[str, BaseSink]) -> None:
    """Close the sinks of a failed start, in the order they opened, every one of them.

    A sink that cannot close is logged with its id: the error the user must see is the one
    that made the start fail, which goes on unchanged.
    """
    for sid, sink in sinks.items():
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - logged; the start's own error is raised
            log.exception("sink %r could not close after the start failed", sid)


def _dead_letter_connection(topology: StormTopology, settings: TopologyConfig) -> Any:
    """Where dead letters go: the topology's Kafka, else the first Kafka spout's cluster."""
    if settings.kafka is not None:
        return settings.kafka
    for spec in topology.spouts():
        spout: Any = spec.component
        if source_kind(spout) == "kafka":
            return spout.connection
    return None


def _start_spouts_at(topology: StormTopology, offsets: Any) -> StormTopology:
    """A copy of ``topology`` whose Kafka spouts start at ``offsets`` ({topic: {p: end}})."""
    specs = dict(topology.components)
    for cid, spec in specs.items():
        spout: Any = spec.component
        if spec.is_spout and source_kind(spout) == "kafka":
            mine = {t: dict(p) for t, p in offsets.items() if spout.subscribes(t)}
            specs[cid] = dataclasses.replace(
                spec, component=dataclasses.replace(spout, starting_offsets=mine))
    return dataclasses.replace(topology, components=MappingProxyType(specs))


def _show_debug_log() -> None:
    """``topology.debug``: the ``kstorm.debug`` logger shows at INFO, on stderr if unset."""
    debug = logging.getLogger("kstorm.debug")
    debug.setLevel(logging.INFO)
    if not debug.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        debug.addHandler(handler)
