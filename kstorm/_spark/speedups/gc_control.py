"""Keep Python's garbage collector off kstorm's hot paths.

**Workers.** Keep the garbage collection Spark runs after every task in a Python worker cheap.

A reused Spark Python worker calls ``gc.collect()`` after each task (``pyspark/daemon.py``).
A full collection walks every object the worker holds, mostly the modules it imported
(pyspark, pandas, pyarrow, kstorm: ~90,000 objects, ~40 ms on the project machine), and
the word count runs a dozen Python tasks per micro-batch: that was ~15% of the Python
time of a batch (``bench/results/topology.md``).

:func:`freeze_imports` runs at the start of kstorm's tasks; when modules were imported
since its last run in the process (the first task, or a task of a new kind: a TWS stage
imports pandas), it collects and moves the surviving objects (imports, mostly) to the
permanent generation (``gc.freeze``), so each later collection only walks what tasks
created since. Objects frozen are never freed; what a task leaves behind is collected as
usual.

**Building many objects at once** (the driver turning a batch's rows into tuples for the
sinks): each 700 new container objects start a collection, and the older generations'
collections walk the whole heap, which the objects being built keep growing; that cost
~4x the building itself. :func:`paused` turns collection off while they are built (they
all stay alive: there is no garbage to find), and back on after.

Example:
    >>> freeze_imports()   # in a Spark worker, on its first kstorm task  # doctest: +SKIP
    >>> with paused():
    ...     rows = [[i] for i in range(3)]
    >>> gc.isenabled()
    True
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_modules_frozen = 0  # len(sys.modules) at the last freeze


def freeze_imports() -> None:
    """Collect, then exempt what survives from later collections, if modules came since."""
    global _modules_frozen
    if len(sys.modules) == _modules_frozen:
        return
    gc.collect()
    gc.freeze()
    _modules_frozen = len(sys.modules)


@contextmanager
def paused() -> Iterator[None]:
    """No automatic garbage collection inside the block (unless it was off already)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
