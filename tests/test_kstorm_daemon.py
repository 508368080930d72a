"""The worker daemon prefers the installed pyspark only when Spark's zip is that same package."""

import os

import pyspark

from _kstorm_daemon import prefer_installed_pyspark

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
