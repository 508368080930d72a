"""Tick tuples (Storm's ``topology.tick.tuple.freq.secs``): which bolts tick, and when.

A bolt ticks every ``secs`` seconds of batch time: its topology-level setting, or its own
(``add_configuration``, ``get_component_configuration()``), which wins. Every task of the
bolt gets one tuple ``[secs]`` from component ``__system`` on stream ``__tick``
(:func:`kstorm.tuple.TupleUtils.is_tick`), unanchored, at most once a period: tick ``n``
of a bolt is due once the batch's time reaches ``n * secs`` (a batch after a quiet spell
of several periods carries one tick). On Spark a source of its own plans the ticks with
the batch, in Spark's offset log (``kstorm/_spark/tick_source.py``), so a replayed batch
carries the same ticks; the test driver ticks on its clock.

Plain bolts tick (``BaseRichBolt``, ``BaseBasicBolt``, ``BaseStatefulBolt``). A windowed
bolt fires on its own timer, a batch bolt or committer works per transaction and a sink
per batch: a per-component setting on one of them is refused, and the topology-level
one leaves them out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstorm._ids import SYSTEM_COMPONENT, TICK_STREAM
from kstorm._runtime.envelope import Outgoing, pack
from kstorm.errors import TopologyError
from kstorm.topology import StormTopology

KEY = "topology.tick.tuple.freq.secs"


def check_secs(value: Any, where: str) -> float | None:
    """A tick period as set (``None``: no ticks), or a :class:`TopologyError` naming ``where``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        msg = f"{where}: {KEY} must be a number of seconds > 0 (or None), got {value!r}"
        raise TopologyError(msg)
    return float(value)


def _refusal(topology: StormTopology, component: str) -> str | None:
    """Why ``component`` cannot tick, or ``None`` when it can."""
    spec = topology.components[component]
    bolt = spec.component
    if spec.is_spout:
        return "a spout is not a bolt: its next_tuple runs every batch"
    if getattr(bolt, "is_sink", False):
        return "a sink commits once a batch, in the commit phase"
    if getattr(bolt, "is_windowed_bolt", False) or getattr(bolt, "is_native_window", False):
        return ("a windowed bolt fires on its own timer (with_watermark_interval, "
                "processing-time windows)")
    if getattr(bolt, "is_batch_bolt", False) or topology.is_committer(component):
        return "a batch bolt or committer works per transaction (finish_batch)"
    return None


def tick_periods(topology: StormTopology, topology_secs: Any = None) -> dict[str, float]:
    """The bolts that tick and their periods in seconds.

    ``topology_secs`` is the topology-level setting; a bolt's own wins over it.

    Raises:
        TopologyError: a bad period, or a period set on a bolt that cannot tick.
    """
    default = check_secs(topology_secs, "the topology")
    out: dict[str, float] = {}
    for spec in topology.bolts():
        own = spec.conf.get(KEY)
        secs = check_secs(own, f"bolt {spec.id!r}") if KEY in spec.conf else default
        if secs is None:
            continue
        why = _refusal(topology, spec.id)
        if why is not None and KEY in spec.conf:
            msg = f"bolt {spec.id!r} sets {KEY}, but it cannot get tick tuples: {why}"
            raise TopologyError(msg, hint="remove the setting from this bolt")
        if why is None:
            out[spec.id] = secs
    return out


def counts(periods: Mapping[str, float], now_ms: int) -> dict[str, int]:
    """Each ticking bolt's tick number at ``now_ms``: whole periods since the epoch."""
    return {c: int(now_ms // (secs * 1000)) for c, secs in periods.items()}


def due(start: Mapping[str, int], end: Mapping[str, int]) -> list[str]:
    """The bolts with a tick between two tick numbers (a bolt new in ``end`` waits)."""
    return sorted(c for c, n in end.items() if c in start and n > start[c])


def tick_rows(tasks: Mapping[str, int], periods: Mapping[str, float],
              components: Iterable[str]) -> list[Outgoing]:
    """One envelope row per task of each of ``components`` (``tasks``: bolt -> its tasks)."""
    rows = []
    for c in components:
        secs = periods[c]
        vals = pack([[int(secs) if float(secs).is_integer() else secs]])
        rows += [Outgoing(c, task, SYSTEM_COMPONENT, TICK_STREAM, vals, None)
                 for task in range(tasks[c])]
    return rows
