"""Windowing (seed 004): window shapes, the window manager, watermarks, stateful bookkeeping.

Pure Python: no Spark and no I/O. Users subclass :class:`BaseWindowedBolt` (or
:class:`BaseStatefulWindowedBolt`); the Spark layer feeds a :class:`WindowManager` per bolt task
and snapshots it between micro-batches.

Example:
    >>> from kstorm.windowing import Count, WindowConfig, WindowManager
    >>> m = WindowManager(WindowConfig(Count(3), Count(2)))
    >>> [m.add(x, ts) for ts, x in enumerate("abcde")]
    [True, True, True, True, True]
    >>> [w.get() for w in m.on_processing_time(10)]
    [['a', 'b'], ['b', 'c', 'd']]
"""

from kstorm.windowing.bolt import (
    BaseStatefulWindowedBolt,
    BaseWindowedBolt,
    WindowedOutputCollector,
)
from kstorm.windowing.builder import WindowedBoltConfigMixin
from kstorm.windowing.config import (
    LATE_TUPLE_FIELD,
    FieldTimestampExtractor,
    WindowConfig,
    field_value,
)
from kstorm.windowing.durations import Count, Duration
from kstorm.windowing.manager import WindowManager, default_source
from kstorm.windowing.message_ids import MessageIdLedger, Replay
from kstorm.windowing.watermark import WatermarkTracker
from kstorm.windowing.window import StaleWindowError, TupleWindow, UnsupportedOperationError

__all__ = [
    "LATE_TUPLE_FIELD",
    "BaseStatefulWindowedBolt",
    "BaseWindowedBolt",
    "Count",
    "Duration",
    "FieldTimestampExtractor",
    "MessageIdLedger",
    "Replay",
    "StaleWindowError",
    "TupleWindow",
    "UnsupportedOperationError",
    "WatermarkTracker",
    "WindowConfig",
    "WindowManager",
    "WindowedBoltConfigMixin",
    "WindowedOutputCollector",
    "default_source",
    "field_value",
]
