"""A batch's rows for the driver, read the same way by both orchestrations' commit phases.

The processing phase addresses rows to the driver (``kstorm/_runtime/envelope.py``): tuples
for sinks and for the commit stage's bolts, metrics, dead letters and captured emissions.
On Spark they arrive as one Arrow table (``kstorm/_spark/commit.py``); the test driver
collects the same rows in process (``kstorm/testdriver.py``). Both split them by
destination (:func:`~kstorm._runtime.envelope.split_by_dest`) and read them here, under the
commit phase's step numbers (``CommitPhase``'s docstring):

- step 3: :func:`metrics`, the stage tasks' counters;
- step 5: :func:`run_commit_stage_rows`, the commit stage over its bolts' rows, what it
  emits joining the other rows;
- step 6: :func:`sink_tuples`, a sink's tuples (the processing phase's, then the closed
  windows');
- step 7: :func:`dead_letters`, the dead letters' records;
- step 9: :func:`emitted` and :func:`log_emitted`, captured emissions
  (``kstorm.capture.emitted``, ``topology.debug``).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pyarrow as pa

from kstorm._runtime.batch_loop import ClosedWindows
from kstorm._runtime.committers import run_commit_stage
from kstorm._runtime.deadletter import as_record
from kstorm._runtime.envelope import EMPTY, split_by_dest, unpack_metas, unpack_values
from kstorm._runtime.plan import Plan
from kstorm.config import TopologyConfig
from kstorm.sink import UnmadeTuples
from kstorm.topology import StormTopology
from kstorm.tuple import Fields, Tuple

debug_log = logging.getLogger("kstorm.debug")

Quiet = Callable[[], AbstractContextManager[Any]]  # e.g. the GC paused while tuples are made
_Part = tuple[Fields, str, str, list[list[Any]], bytes | None]


def metrics(rows: pa.Table) -> list[dict[str, Any]]:
    """Step 3: each stage task's counters (``component.metric`` -> n, and its ``stage``)."""
    return [pickle.loads(p) for p in rows.column("__vals").to_pylist()]


def run_commit_stage_rows(topology: StormTopology, plan: Plan, name: str,
                          conf: dict[str, Any], settings: TopologyConfig, batch_id: int,
                          attempt: Any, by_dest: dict[str, pa.Table]) -> dict[str, int]:
    """Step 5: the commit stage over its bolts' rows (taken from ``by_dest``).

    What it emits joins ``by_dest`` after the processing phase's rows; returns its counters.
    """
    if plan.commit_stage is None:
        return {}
    inputs = {c: by_dest.pop(c, EMPTY) for c in plan.commit_stage.bolts}
    outcome = run_commit_stage(topology, plan, name, conf, settings, batch_id, attempt, inputs)
    for dest, rows in split_by_dest(outcome.rows).items():
        by_dest[dest] = pa.concat_tables([by_dest[dest], rows]) if dest in by_dest else rows
    return outcome.counters


def sink_tuples(topology: StormTopology, rows: pa.Table, windows_in: list[ClosedWindows],
                quiet: Quiet = contextlib.nullcontext) -> list[Tuple] | UnmadeTuples:
    """Step 6: a sink's tuples: the processing phase's, then the closed windows'.

    The processing phase's are handed over unmade (:class:`UnmadeTuples`): a sink that
    reads their values only (the Redis sink's fold) costs no :class:`Tuple` per value.
    """
    windowed = [t for closed in windows_in for t in closed.tuples()]
    if windowed or rows.num_rows == 0:
        return _made(_parts(topology, rows, quiet), quiet) + windowed
    parts = _parts(topology, rows, quiet)

    def values_by_fields() -> tuple[tuple[str, ...], list[list[Any]]] | None:
        names = parts[0][0].names
        if any(fields.names != names for fields, *_ in parts):
            return None
        values: list[list[Any]] = []
        for part in parts:
            values += part[3]
        return tuple(names), values

    return UnmadeTuples(sum(len(part[3]) for part in parts),
                        lambda: _made(parts, quiet), values_by_fields)


def _parts(topology: StormTopology, rows: pa.Table, quiet: Quiet) -> list[_Part]:
    """``(fields, source, stream, values, packed metas)`` of each packed row."""
    comps = topology.components
    with quiet():  # many objects, all kept
        return [(comps[src].streams[stream], src, stream, unpack_values(vals), meta)
                for src, stream, vals, meta in zip(rows.column("__src").to_pylist(),
                                                   rows.column("__stream").to_pylist(),
                                                   rows.column("__vals").to_pylist(),
                                                   rows.column("__meta").to_pylist(),
                                                   strict=True)]


def _made(parts: list[_Part], quiet: Quiet) -> list[Tuple]:
    out = []
    received = Tuple._received
    with quiet():
        for fields, src, stream, values, meta in parts:
            if meta is None:
                out += [received(v, fields, src, stream) for v in values]
                continue
            for v, m in zip(values, unpack_metas(meta, len(values)), strict=True):
                t = received(v, fields, src, stream)
                t._ids = m
                out.append(t)
    return out


def dead_letters(rows: pa.Table) -> list[dict[str, Any]]:
    """Step 7: the dead letters' records (undecodable records, tuples whose bolt raised)."""
    return [as_record(pickle.loads(v)) for v in rows.column("__vals").to_pylist()]


def emitted(rows: pa.Table) -> list[tuple[str, str, list[Any]]]:
    """Step 9: captured emissions, ``(component, stream, values)`` in emit order."""
    return [(src, stream, pickle.loads(vals))
            for src, stream, vals in zip(rows.column("__src").to_pylist(),
                                         rows.column("__stream").to_pylist(),
                                         rows.column("__vals").to_pylist(), strict=True)]


def log_emitted(settings: TopologyConfig, batch_id: int,
                captured: list[tuple[str, str, list[Any]]]) -> None:
    """Step 9: with ``topology.debug``, every emitted tuple on ``kstorm.debug``."""
    if not (settings.debug and debug_log.isEnabledFor(logging.INFO)):
        return
    for src, stream, values in captured:
        debug_log.info("batch %s: %s emitted on %s: %r", batch_id, src, stream, values)
