"""``python -m kstorm.cli``: the ``kstorm`` command."""

from __future__ import annotations

import sys

from kstorm.cli import main

sys.exit(main())
