"""Start a topology: compile, build the query, attach the commit phase."""

from __future__ import annotations

import copy
import logging
from typing import Any

from kstorm._deadletter import DeadLetterWriter
from kstorm._plan import compile_plan
from kstorm._progress import Progress
from kstorm._spark.commit import CommitPhase
from kstorm._spark.compiler import compile_query
from kstorm._spark.session import get_session
from kstorm._spark.windowed import WindowCommit
from kstorm.config import TopologyConfig, TriggerMode
from kstorm.runtime import TopologyHandle
from kstorm.topology import StormTopology

log = logging.getLogger("kstorm")


def start(name: str, conf: dict[str, Any], topology: StormTopology) -> TopologyHandle:
    """Compile ``topology`` and start it as one Spark streaming query."""
    settings = TopologyConfig.from_conf(conf)
    plan = compile_plan(topology)
    spark = get_session(settings)
    checkpoint = settings.checkpoint_for(name)
    checkpoint.mkdir(parents=True, exist_ok=True)
    state_dir = checkpoint / "kstorm"
    compiled = compile_query(spark, topology, plan, name, conf, settings, state_dir)
    sinks = {sid: copy.deepcopy(topology.components[sid].component) for sid in plan.sinks}
    dlq_topic = settings.dead_letter_topic or f"{name}.dead-letters"
    windows = {s.head: WindowCommit(s.head, topology.components[s.head].component.spec(),
                                    state_dir)
               for s in plan.stages if s.native_window}
    commit = CommitPhase(topology, name, checkpoint, sinks, conf, Progress(),
                         DeadLetterWriter(name, settings.bootstrap_servers, dlq_topic), windows)
    writer = (compiled.output.writeStream.foreachBatch(commit)
              .option("checkpointLocation", str(checkpoint)).queryName(name))
    if settings.trigger is TriggerMode.AVAILABLE_NOW:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_ms} milliseconds")
    log.info("starting topology %r (%d stages) checkpoint=%s", name, len(plan.stages),
             checkpoint)
    return TopologyHandle(name, writer.start(), commit, settings)
