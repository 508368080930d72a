"""Windowing (seed 004): window shapes, the window manager, watermarks, stateful bookkeeping.

Pure Python: no Spark and no I/O. Users subclass :class:`BaseWindowedBolt` (or
:class:`BaseStatefulWindowedBolt`) and declare windows with :class:`Count` and
:class:`Duration`; :class:`WindowManager` and :class:`WatermarkTracker` are seed 004's pure
logic (its worked example can be checked with them). The runtime's own pieces live in this
package's private modules (``_task``, ``_store``) and in ``message_ids``/``manager``.

Example:
    >>> from kstorm.windowing import Count, WindowConfig, WindowManager
    >>> m = WindowManager(WindowConfig(Count(3), Count(2)))
    >>> [m.add(x, ts) for ts, x in enumerate("abcde")]
    [True, True, True, True, True]
    >>> [w.get() for w in m.on_processing_time(10)]
    [['a', 'b'], ['b', 'c', 'd']]
"""

from kstorm.windowing.bolt import BaseStatefulWindowedBolt, BaseWindowedBolt
from kstorm.windowing.builder import WindowedBoltConfigMixin
from kstorm.windowing.config import (
    LATE_TUPLE_FIELD,
    FieldTimestampExtractor,
    TimestampExtractor,
    WindowConfig,
)
from kstorm.windowing.durations import Count, Duration, TimeUnit
from kstorm.windowing.join import JoinBolt, TableJoinBolt
from kstorm.windowing.manager import WindowManager
from kstorm.windowing.watermark import WatermarkTracker
from kstorm.windowing.window import StaleWindowError, TupleWindow, UnsupportedOperationError

__all__ = [
    "LATE_TUPLE_FIELD",
    "BaseStatefulWindowedBolt",
    "BaseWindowedBolt",
    "Count",
    "Duration",
    "FieldTimestampExtractor",
    "JoinBolt",
    "StaleWindowError",
    "TableJoinBolt",
    "TimeUnit",
    "TimestampExtractor",
    "TupleWindow",
    "UnsupportedOperationError",
    "WatermarkTracker",
    "WindowConfig",
    "WindowManager",
    "WindowedBoltConfigMixin",
]
