"""``python -m feedline`` is the ``feedline`` command."""

from __future__ import annotations

import sys

from feedline.cli import main

if __name__ == "__main__":
    sys.exit(main())
