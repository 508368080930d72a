"""Reserved component and stream ids: one prefix, checked when a topology is built.

As in Storm (``Acker.ACKER_COMPONENT_ID``, ``TopologyBuilder.validateUnusedId``), ids that
start with ``__`` belong to kstorm's implicit components and streams.
"""

RESERVED_PREFIX = "__"

ACKER_COMPONENT = "__acker"
SYSTEM_COMPONENT = "__system"
CHECKPOINT_STREAM = "__checkpoint"
TICK_STREAM = "__tick"  # from SYSTEM_COMPONENT: tick tuples (topology.tick.tuple.freq.secs)
ACK_STREAM = "__ack"
DEAD_LETTER_STREAM = "__dead_letter"
LATE_TUPLE_FIELD = "late_tuple"


def is_reserved(name: str) -> bool:
    """Whether ``name`` is reserved for kstorm's own components and streams."""
    return name.startswith(RESERVED_PREFIX)
