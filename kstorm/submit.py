"""Submitting a topology (Storm's ``StormSubmitter``).

Example:
    >>> handle = submit_topology("word-count", {"kstorm.trigger": "available-now"},
    ...                          builder.create_topology())          # doctest: +SKIP
    >>> handle.await_termination()                                    # doctest: +SKIP
    >>> handle.progress["components"]["count"]["executed"]           # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kstorm.errors import ConfigError
from kstorm.handle import TopologyHandle
from kstorm.topology import StormTopology


def submit_topology(name: str, conf: Mapping[str, Any] | None,
                    topology: StormTopology) -> TopologyHandle:
    """Start ``topology`` on Spark and return its handle (Storm ``StormSubmitter``).

    Args:
        name: the topology's name: its checkpoint directory and sink keys are named after it.
        conf: Storm-style configuration (see :class:`kstorm.config.TopologyConfig`).
        topology: from :meth:`TopologyBuilder.create_topology`.
    """
    if not name or "/" in name:
        msg = f"topology names are non-empty and contain no '/', got {name!r}"
        raise ConfigError(msg)
    if not isinstance(topology, StormTopology):
        msg = (
            "submit_topology needs builder.create_topology(), got "
            f"{type(topology).__name__}"
        )
        raise ConfigError(msg)
    from kstorm._spark.runner import start

    return start(name, dict(conf or {}), topology)


__all__ = ["TopologyHandle", "submit_topology"]
