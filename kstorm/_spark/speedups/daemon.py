"""kstorm's Python worker daemon for Spark (``spark.python.daemon.module``).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path. Python
cannot cache bytecode for modules imported from a zip, so every new worker compiles pyspark
again (about 1 s each for ``pyspark.worker`` on a 2-core machine, against 0.1 s from the
installed package). When that zip belongs to the installed pyspark (a pip install: the same
files), this daemon moves the zips behind the installed package, then runs Spark's own daemon,
so every worker it forks imports compiled pyspark.

The daemon must not start threads before it forks workers (see ``pyspark/daemon.py``), nor
import pyspark before it reorders the path: ``python -m`` of this module imports ``kstorm``,
``kstorm._spark`` and ``kstorm._spark.speedups`` first, and none of them imports anything but
the standard library (``kstorm`` resolves its public names on first use; ``kstorm._spark``
reads pyspark's version from its metadata). ``tests/_spark/test_speedups_daemon.py`` checks it.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

DAEMON_MODULE = "kstorm._spark.speedups.daemon"  # Spark's spark.python.daemon.module


def spark_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are Spark's ``pyspark*.zip`` / ``py4j*.zip``."""
    return [p for p in path if p.endswith(".zip")
            and os.path.basename(p).startswith(("pyspark", "py4j"))]


def foreign_zips(zips: list[str], home: str) -> list[str]:
    """The ``zips`` that are not inside the installed pyspark at ``home`` (another Spark's).

    The one rule kstorm keeps for Spark's zips, here and in the zygote (``zygote.py``): a zip
    inside the installed pyspark is a copy of it and may give way to the compiled package;
    any other is a separate Spark distribution, whose own pyspark is kept.

    Example:
        >>> foreign_zips(["/site/pyspark/python/lib/pyspark.zip", "/opt/spark/py4j.zip"],
        ...              "/site/pyspark")
        ['/opt/spark/py4j.zip']
    """
    inside = os.path.realpath(home) + os.sep
    return [z for z in zips if not os.path.realpath(z).startswith(inside)]


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` with Spark's pyspark/py4j zips last, if they belong to the installed pyspark."""
    zips = spark_zips(path)
    if not zips:
        return path
    rest = [p for p in path if p not in zips]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", rest)
    if spec is None or spec.origin is None:
        return path
    if foreign_zips(zips, os.path.dirname(spec.origin)):
        return path  # a separate Spark distribution: keep its own pyspark
    return rest + zips


if __name__ == "__main__":
    sys.path[:] = prefer_installed_pyspark(sys.path)
    from pyspark import daemon

    daemon.manager()
