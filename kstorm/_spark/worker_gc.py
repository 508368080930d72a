"""Keep the garbage collection Spark runs after every task in a Python worker cheap.

A reused Spark Python worker calls ``gc.collect()`` after each task (``pyspark/daemon.py``).
A full collection walks every object the worker holds, mostly the modules it imported
(pyspark, pandas, pyarrow, kstorm: ~90,000 objects, ~40 ms on the project machine), and
the word count runs a dozen Python tasks per micro-batch: that was ~15% of the Python
time of a batch (``bench/results/topology.md``).

:func:`freeze_imports` runs once per process, from kstorm's first task in it: it collects
once and moves the surviving objects (imports, mostly) to the permanent generation
(``gc.freeze``), so each later collection only walks what tasks created since. Objects
frozen are never freed; what a task leaves behind after that is collected as usual.

Example:
    >>> freeze_imports()   # in a Spark worker, on its first kstorm task  # doctest: +SKIP
"""

from __future__ import annotations

import gc

_done = False


def freeze_imports() -> None:
    """Collect once, then exempt what survives from later collections (once per process)."""
    global _done
    if _done:
        return
    _done = True
    gc.collect()
    gc.freeze()
