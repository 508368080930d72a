"""The commit stage: committers and the bolts downstream of them, in the commit phase (seed 002).

Pure (no Spark): the commit phase (``kstorm/_spark/commit.py``) hands it, for one batch,
the tuples the processing phase addressed to the stage's bolts. On the driver, in txid
order (the commit phase runs one batch at a time, in order):

1. Every task of every batch bolt in the stage gets its instance for this batch
   (``prepare(conf, context, collector, TransactionAttempt)``): a committer finishes every
   batch, with or without tuples.
2. The tuples are executed, upstream bolts first; what a bolt emits to another bolt of the
   stage is executed at once (the stage is fused).
3. ``finish_batch`` on each task, upstream first: seed 002's B (a committer) finishes,
   then C (which received B's output) knows it has its whole batch and finishes, then D.
4. What the stage emits for sinks, dead letters and captures leaves as envelope rows.

A ``FailedException`` here fails the batch like one in the processing phase: the whole
transaction is re-run (``kstorm/_runtime/transaction.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kstorm._runtime.envelope import EMPTY, envelope_tuples, to_arrow
from kstorm._runtime.executor import StageExecutor
from kstorm._runtime.plan import COMMIT, Plan, is_batch_bolt
from kstorm.config import TopologyConfig
from kstorm.topology import StormTopology


@dataclass
class CommitOutcome:
    """What the commit stage produced for one batch."""

    rows: pa.Table          # envelope rows for sinks, dead letters, captures
    counters: dict[str, int]


def run_commit_stage(topology: StormTopology, plan: Plan, topology_name: str,
                     conf: dict[str, Any], settings: TopologyConfig, batch_id: int,
                     attempt: Any, inputs: dict[str, pa.Table]) -> CommitOutcome:
    """Steps 1-4 of the module docstring; ``inputs``: envelope rows per bolt of the stage."""
    stage = plan.commit_stage
    if stage is None:
        return CommitOutcome(EMPTY, {})
    executor = StageExecutor(topology, plan, COMMIT, topology_name=topology_name, conf=conf,
                             settings=settings, batch_id=batch_id, partition=0,
                             attempt=attempt)
    # Step 1
    executor.start_tasks(c for c in stage.bolts if is_batch_bolt(topology.components[c]
                                                                 .component))
    # Step 2
    tuples = ((component, task, tup) for component in stage.bolts
              for batch in inputs.get(component, EMPTY).to_batches()
              for task, tup in envelope_tuples(batch, topology))
    rows = list(executor.deliver_rows(tuples))
    # Step 3, 4
    rows += list(executor.finish_rows())
    table = pa.Table.from_batches([to_arrow(rows)]) if rows else EMPTY
    return CommitOutcome(table, dict(executor.counters))
