"""The Spark side of kstorm: a topology compiled to Structured Streaming and run there.

Importing it checks the installed pyspark first (:func:`check_pyspark`).
"""

from __future__ import annotations

MINIMUM_PYSPARK = (4, 2)
MAXIMUM_PYSPARK = (5, 0)  # exclusive


def check_pyspark(version: str | None = None) -> str:
    """The installed pyspark's version; a :class:`MissingDependencyError` outside 4.2-4.x.

    pyspark 4.1 and older lack ``pyspark.sql.streaming.datasource`` (``ReadLimit``,
    ``ReadMaxRows``, ``SupportsTriggerAvailableNow``): admission control for Python streaming
    sources, with which a spout bounds each batch to ``topology.max.spout.pending`` and an
    available-now run reads its backlog in bounded batches. Without it a restarted topology
    would read its whole backlog as one batch: not a guarantee kstorm can keep.

    Example:
        >>> check_pyspark("4.3.0")
        '4.3.0'
        >>> check_pyspark("4.1.4")
        Traceback (most recent call last):
        ...
        kstorm.errors.MissingDependencyError: kstorm needs pyspark 4.2 or newer 4.x; ...
    """
    if version is None:
        version = _installed_pyspark_version()
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if MINIMUM_PYSPARK <= parts < MAXIMUM_PYSPARK:
        return version
    from kstorm.errors import MissingDependencyError

    missing = ("which lacks pyspark.sql.streaming.datasource (ReadLimit, "
               "SupportsTriggerAvailableNow: admission control for Python streaming sources)"
               if parts < MINIMUM_PYSPARK else "a major release kstorm was not built for")
    msg = f"kstorm needs pyspark 4.2 or newer 4.x; found {version}, {missing}"
    raise MissingDependencyError(msg, hint="pip install 'pyspark>=4.2,<5'")


def _installed_pyspark_version() -> str:
    """The pyspark version, without importing pyspark where its metadata says it.

    Spark's worker daemon (``speedups/daemon.py``) imports this package before it puts the
    installed pyspark ahead of Spark's ``pyspark.zip``, so this must not import pyspark: an
    imported one would be the zip's. A pyspark already imported, or one without metadata
    (a Spark distribution on ``PYTHONPATH``), is asked directly.
    """
    import sys

    module = sys.modules.get("pyspark")
    if module is None:
        from importlib import metadata

        try:
            return metadata.version("pyspark")
        except metadata.PackageNotFoundError:
            import pyspark as module
    return str(module.__version__)


check_pyspark()
