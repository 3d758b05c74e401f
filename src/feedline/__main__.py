"""``python -m feedline`` is the ``feedline`` command."""

from __future__ import annotations

import sys

from feedline.cli import main

sys.exit(main())
