"""Start a topology: compile, build the query, attach the commit phase."""

from __future__ import annotations

import copy
import dataclasses
import logging
from types import MappingProxyType
from typing import Any

from kstorm import _reconcile as reconcile
from kstorm._runtime.deadletter import DeadLetterWriter
from kstorm._runtime.plan import acking_plan, compile_plan
from kstorm._runtime.progress import Progress
from kstorm._runtime.reliability import SpoutReliability, lowest_unacked
from kstorm._spark.commit import UNACKED_STATE, CommitPhase
from kstorm._spark.compiler import compile_query
from kstorm._spark.session import get_session
from kstorm._spark.windowed import WindowCommit
from kstorm.component import TopologyContext
from kstorm.config import Guarantee, TopologyConfig, TriggerMode
from kstorm.runtime import TopologyHandle
from kstorm.topology import StormTopology

log = logging.getLogger("kstorm")


def start(name: str, conf: dict[str, Any], topology: StormTopology) -> TopologyHandle:
    """Compile ``topology`` and start it as one Spark streaming query."""
    settings = TopologyConfig.from_conf(conf)
    plan = compile_plan(topology)
    checkpoint = settings.checkpoint_for(name)
    sinks = {sid: copy.deepcopy(topology.components[sid].component) for sid in plan.sinks}
    for sid, sink in sinks.items():
        spec = topology.components[sid]
        sink.open({**conf, **spec.conf}, TopologyContext(name, sid, 0, 1, -1, {}))
    resume = reconcile.decide(checkpoint, sinks)
    reconcile.apply(checkpoint, resume)
    for sink in sinks.values():
        sink.txid_base = resume.txid_base
    if resume.from_sink is not None:
        log.warning("topology %r resumes from sink %r at txid %s", name, resume.from_sink,
                    resume.txid_base)
        offsets = resume.offsets
        if settings.guarantee is Guarantee.AT_LEAST_ONCE and UNACKED_STATE in resume.state:
            offsets = lowest_unacked(offsets, resume.state[UNACKED_STATE])
        topology = _start_spouts_at(topology, offsets)
    spark = get_session(settings)
    state_dir = checkpoint / "kstorm"
    acking = None
    if settings.guarantee is Guarantee.AT_LEAST_ONCE and settings.ackers_enabled:
        acking = acking_plan(topology, plan, n_ackers=settings.acker_executors or 1,
                             timeout_ms=settings.message_timeout_secs * 1000)
    compiled = compile_query(spark, topology, plan, name, conf, settings, state_dir,
                             window_seeds=dict(resume.state), acking=acking)
    dlq_topic = settings.dead_letter_topic or f"{name}.dead-letters"
    windows = {s.head: WindowCommit(s.head, topology.components[s.head].component.spec(),
                                    state_dir)
               for s in plan.stages if s.native_window}
    for component, window in windows.items():
        snapshot = resume.state.get(f"window:{component}")
        if snapshot is not None:
            window.seed(snapshot)
    reliability = (SpoutReliability(topology, acking, state_dir, conf, settings.bootstrap_servers)
                   if acking is not None else None)
    commit = CommitPhase(topology, name, checkpoint, sinks, conf, Progress(),
                         DeadLetterWriter(name, settings.bootstrap_servers, dlq_topic), windows,
                         reliability)
    writer = (compiled.output.writeStream.foreachBatch(commit)
              .option("checkpointLocation", str(checkpoint)).queryName(name))
    if settings.trigger is TriggerMode.AVAILABLE_NOW:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_ms} milliseconds")
    log.info("starting topology %r (%d stages) checkpoint=%s", name, len(plan.stages),
             checkpoint)
    return TopologyHandle(name, writer.start(), commit, settings)


def _start_spouts_at(topology: StormTopology, offsets: Any) -> StormTopology:
    """A copy of ``topology`` whose Kafka spouts start at ``offsets`` ({topic: {p: end}})."""
    from kstorm.kafka_spout import KafkaSpout

    specs = dict(topology.components)
    for cid, spec in specs.items():
        spout = spec.component
        if isinstance(spout, KafkaSpout):
            mine = {t: dict(p) for t, p in offsets.items() if spout.subscribes(t)}
            specs[cid] = dataclasses.replace(
                spec, component=dataclasses.replace(spout, starting_offsets=mine))
    return StormTopology(MappingProxyType(specs), topology.order)
