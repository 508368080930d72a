"""What a topology is and how kstorm runs it: ``kstorm describe pkg.module:attr``.

:func:`describe` prints the components (kind, parallelism, streams and their fields), the
subscriptions (groupings), and the compiled plan: which bolts fuse into one Spark stage, how
each stage's input is partitioned, and what runs on the driver in the commit phase.
:func:`mermaid` renders the same as a Mermaid flowchart (paste it into any Markdown viewer
that draws Mermaid, e.g. GitHub).

Example:
    >>> from kstorm import Fields, TopologyBuilder
    >>> from kstorm.testing import CaptureSink, ListSpout
    >>> b = TopologyBuilder()
    >>> _ = b.set_spout("words", ListSpout([[["a"]]], Fields("word")))
    >>> _ = b.set_bolt("out", CaptureSink()).shuffle_grouping("words")
    >>> print(mermaid(b.create_topology()))
    flowchart LR
      words(["words<br/>ListSpout x1"])
      out[/"out<br/>CaptureSink x1 (driver)"/]
      words -->|"shuffle"| out
"""

from __future__ import annotations

from typing import Any

from kstorm._runtime.plan import COMMIT, DRIVER, PartitionKind, compile_plan
from kstorm.state.rescale import why_not_keyed
from kstorm.topology import StormTopology


def _kind(spec: Any, plan: Any) -> str:
    component = spec.component
    if spec.is_spout:
        return "spout"
    if getattr(component, "is_sink", False):
        return "sink (driver, commit phase)"
    where = plan.stage_of.get(spec.id)
    if where == COMMIT:
        return ("committer (driver, commit phase)" if getattr(component, "is_committer", False)
                else "bolt after a committer (driver, commit phase)")
    stage = plan.stage(spec.id)
    if stage.native_window:
        return "windowed aggregate (partials in executors, windows closed on the driver)"
    if stage.windowed:
        return "windowed bolt (per task, Spark state store)"
    if stage.stateful:
        return "stateful bolt (per task; KeyValueState in topology.state.provider)"
    if stage.batch:
        return "batch bolt"
    return "bolt"


def _key_groups(topology: StormTopology, cid: str) -> str:
    """Where a stateful bolt's keys live, and whether a parallelism change can move them."""
    why = why_not_keyed(topology, cid)
    if why is not None:
        return f"state per task, kept at this parallelism: {why}"
    n = topology.components[cid].parallelism
    groups = ", ".join(f"task {t} holds h mod {n} = {t}" for t in range(min(n, 4)))
    more = ", ..." if n > 4 else ""
    return (f"state by key group h = stable_hash(grouping values): {groups}{more}; "
            "rescalable (topology.state.provider spark or redis)")


def _grouping(g: Any) -> str:
    kind = g.kind.value
    fields = f"({', '.join(g.fields)})" if g.fields else ""
    stream = "" if g.stream == "default" else f" [{g.stream}]"
    return f"{kind}{fields}{stream}"


def describe(topology: StormTopology) -> str:
    """A plain-text description (module docstring)."""
    plan = compile_plan(topology)
    lines = ["components:"]
    for cid in topology.order:
        spec = topology.components[cid]
        lines.append(f"  {cid}: {type(spec.component).__name__} x{spec.parallelism}, "
                     f"{_kind(spec, plan)}")
        for stream, fields in spec.streams.items():
            lines.append(f"    emits {stream}: ({', '.join(fields)})")
        for g in spec.inputs:
            lines.append(f"    <- {g.component}: {_grouping(g)}")
        if plan.stage_of.get(cid) not in (None, COMMIT, DRIVER) and plan.stage(cid).stateful:
            lines.append(f"    {_key_groups(topology, cid)}")
    lines.append("plan (Spark stages, in order):")
    for stage in plan.stages:
        if stage.is_source:
            lines.append(f"  stage {stage.index}: spout {stage.head} (its read tasks)")
            continue
        how = {PartitionKind.KEEP: "where it is (no exchange)",
               PartitionKind.HASH: "hash-partitioned by task",
               PartitionKind.SINGLE: "one partition",
               PartitionKind.BROADCAST: "one copy per task"}[stage.partitioning.kind]
        fused = " + ".join(stage.bolts)
        lines.append(f"  stage {stage.index}: {fused}; input {how}, from stage(s) "
                     f"{sorted({src for _, src in stage.inputs})}")
    on_driver = [c for c in topology.order if plan.stage_of.get(c) in (COMMIT, DRIVER)]
    if plan.commit_stage is not None or on_driver:
        lines.append("commit phase (driver, one batch at a time, in txid order): "
                     + ", ".join(on_driver))
    return "\n".join(lines)


def mermaid(topology: StormTopology) -> str:
    """A Mermaid flowchart of the topology (spouts rounded, driver parts slanted)."""
    plan = compile_plan(topology)
    lines = ["flowchart LR"]
    for cid in topology.order:
        spec = topology.components[cid]
        label = f"{cid}<br/>{type(spec.component).__name__} x{spec.parallelism}"
        if spec.is_spout:
            lines.append(f'  {_id(cid)}(["{label}"])')
        elif plan.stage_of.get(cid) in (COMMIT, DRIVER):
            lines.append(f'  {_id(cid)}[/"{label} (driver)"/]')
        else:
            lines.append(f'  {_id(cid)}["{label}<br/>stage {plan.stage_of[cid]}"]')
    for cid in topology.order:
        for g in topology.components[cid].inputs:
            lines.append(f'  {_id(g.component)} -->|"{_grouping(g)}"| {_id(cid)}')
    return "\n".join(lines)


def _id(component: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in component)
