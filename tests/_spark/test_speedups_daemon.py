"""The worker daemon prefers the installed pyspark only when Spark's zip is that same package."""

import os

import pyspark

from kstorm._spark.speedups.daemon import prefer_installed_pyspark

HOME = os.path.dirname(pyspark.__file__)
ZIP = os.path.join(HOME, "python", "lib", "pyspark.zip")


def test_zip_of_the_installed_pyspark_moves_last():
    site = os.path.dirname(HOME)
    assert prefer_installed_pyspark([ZIP, "/somewhere", site]) == ["/somewhere", site, ZIP]


def test_zip_of_another_spark_distribution_stays_first(tmp_path):
    other = str(tmp_path / "spark" / "python" / "lib" / "pyspark.zip")
    site = os.path.dirname(HOME)
    assert prefer_installed_pyspark([other, site]) == [other, site]


def test_no_zip_no_change():
    assert prefer_installed_pyspark(["/a", "/b"]) == ["/a", "/b"]


def test_spark_runs_the_daemon_with_no_thread_and_no_pyspark_before_its_path_is_fixed():
    """Spark forks workers from the daemon: it must not start threads before (pyspark/daemon.py),
    nor import pyspark before it puts the installed package ahead of Spark's zip."""
    import subprocess
    import sys
    from pathlib import Path

    from kstorm._spark.spark_options import spark_options
    from kstorm.config import TopologyConfig

    module = spark_options(TopologyConfig())["spark.python.daemon.module"]
    assert module == "kstorm._spark.speedups.daemon"
    probe = (f"import sys, threading, {module}\n"
             "print(threading.active_count(), sorted(m for m in sys.modules\n"
             "      if m.split('.')[0] in ('pyspark', 'py4j', 'pyarrow', 'pandas')))")
    repo = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": repo}).stdout
    assert out.split(maxsplit=1) == ["1", "[]\n"]
