"""The application file ``kstorm submit`` hands to ``spark-submit``: ``kstorm run`` in the driver.

``spark-submit <this file> TARGET [kstorm run options]`` runs the topology in the driver that
spark-submit started, with the master spark-submit was given (kstorm does not set one unless
``kstorm.spark.master`` is configured).
"""

from __future__ import annotations

import sys

from kstorm.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
