"""Overlap a batch's sink commit with the next batch (issue 14's commit pipelining).

Spark runs micro-batches one at a time: batch N + 1 is planned only after batch N's
``foreachBatch`` returned. With ``kstorm.commit.overlap`` (default ``auto``) the commit phase
of batch N does everything the next batch is planned or computed from -- the windows folded
in, their state and stream clocks persisted, dead letters published -- and returns; its
sinks then commit on one background thread while Spark writes its commit log and plans and
reads batch N + 1. Batch N + 1's commit phase first waits for batch N's sinks (strict txid
order), so the sinks are never more than one batch behind Spark's commit log.

Exactness after a crash in that window rests on the sinks' records (``kstorm/sink.py``,
point 4): the checkpoint says batch N committed, a sink's record says txid N - 1. At start
``offset_log.replay_last_batch`` then takes batch N out of Spark's commit log (and any batch planned
after it out of the offset log), so Spark runs batch N again from its logged offsets with
its txid: the sinks that have it skip it, the others commit it. That only holds where all
state lives with the sinks, so the overlap runs only for such topologies
(:func:`refusals`): exactly once, Kafka spouts only, no state in Spark's state store or a
state provider, no committers, every sink recording offsets, the ``fail`` failure policy (a
``dead-letter`` policy re-runs the batch's Spark job, gone once ``foreachBatch`` returned).
``auto`` (the default) overlaps such topologies when the driver has cores of its own: not
under a ``local`` master whose task threads take every core of the machine, where the
commit thread would only compete with the batch's tasks (:func:`shares_cores`).
``kstorm.commit.overlap = true`` overlaps any such topology and is a ConfigError for
another, naming why; ``false`` commits inside ``foreachBatch``.

Example:
    >>> refusals_text(["a stateful bolt 'count'"])
    "a stateful bolt 'count'"
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from kstorm._runtime.plan import source_kind
from kstorm.config import Guarantee, TopologyConfig
from kstorm.errors import ConfigError
from kstorm.sink import BaseSink
from kstorm.topology import StormTopology

log = logging.getLogger("kstorm.commit")


def refusals(topology: StormTopology, plan: Any, settings: TopologyConfig,
             sinks: Mapping[str, BaseSink]) -> list[str]:
    """Why this topology's sinks may not commit after ``foreachBatch`` returns ([]: they may)."""
    why: list[str] = []
    if settings.guarantee is not Guarantee.EXACTLY_ONCE:
        why.append(f"topology.guarantee is {settings.guarantee.value} (exactly-once only)")
    others = [s.id for s in topology.spouts() if source_kind(s.component) != "kafka"]
    if others:
        why.append(f"spouts {others} are not Kafka spouts (a batch is replayed from its "
                   "logged Kafka offsets)")
    for stage in plan.stages:
        if stage.stateful:
            why.append(f"{stage.head!r} is a stateful bolt (its state is not kept with the "
                       "sinks)")
        elif stage.windowed and not stage.native_window:
            why.append(f"{stage.head!r} is a windowed bolt (its windows are not kept with "
                       "the sinks)")
    if plan.commit_stage is not None:
        why.append(f"committers {list(plan.commit_stage.bolts)} run in the commit phase")
    if not sinks:
        why.append("the topology has no sink")
    plain = sorted(sid for sid, sink in sinks.items() if not sink.records_offsets)
    if plain:
        why.append(f"sinks {plain} do not record offsets with their values")
    if settings.transaction_failure_policy != "fail":
        why.append("kstorm.transaction.failure.policy is dead-letter (a given-up batch runs "
                   "its Spark job again)")
    return why


def refusals_text(why: list[str]) -> str:
    """The reasons as one clause."""
    return "; ".join(why)


def check(name: str, settings: TopologyConfig, why: list[str]) -> None:
    """Refuse ``kstorm.commit.overlap = true`` for a topology that cannot overlap (``why``)."""
    if settings.commit_overlap is True and why:
        msg = (f"topology {name!r}: kstorm.commit.overlap = true, but its sinks must commit "
               f"inside the batch: {refusals_text(why)}")
        raise ConfigError(msg, hint="remove the key (auto: overlap where it is exact and the "
                          "driver has cores of its own) or set it to false")


def enabled(name: str, settings: TopologyConfig, why: list[str], master: str) -> bool:
    """Whether batch N's sinks commit while batch N + 1 runs (``kstorm.commit.overlap``).

    ``why``: :func:`refusals` of the topology (:func:`check` refused ``true`` with reasons
    already); ``master``: the Spark master the topology runs on. ``auto`` overlaps where it
    is exact and the driver's commit thread does not take cores from the batch's tasks.
    """
    setting = settings.commit_overlap
    if setting is False or why:
        if why and setting == "auto":
            log.debug("topology %r commits inside each batch: %s", name, refusals_text(why))
        return False
    if setting is True:
        return True
    if shares_cores(master):
        log.debug("topology %r commits inside each batch: master %s runs its tasks on every "
                  "core of this machine", name, master)
        return False
    return True


def shares_cores(master: str, cores: int | None = None) -> bool:
    """Whether a ``local`` master's task threads take every core the driver has.

    Then a commit overlapping the next batch only competes with its tasks: measured on 2
    cores with ``local[2]`` it gained nothing at 20,000-offset batches and doubled the
    stateless p99 latency (README "Pipelining"). Cluster masters: False.

    Example:
        >>> shares_cores("local[*]"), shares_cores("local[1]", cores=2)
        (True, False)
        >>> shares_cores("local", cores=1), shares_cores("spark://10.0.0.1:7077")
        (True, False)
    """
    cores = cores or os.cpu_count() or 1
    found = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if found is None:
        return master.startswith("local")  # local-cluster[...]: on this machine too
    threads = found.group(1)
    return threads == "*" or int(threads or 1) >= cores
