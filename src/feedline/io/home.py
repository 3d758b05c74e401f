"""Where feedline keeps caches: ``$FEEDLINE_HOME``, default ``~/.cache/feedline``."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_HOME = "~/.cache/feedline"


def feedline_home() -> Path:
    """The cache root; callers key entries below it so two revisions never share one."""
    return Path(os.environ.get("FEEDLINE_HOME") or DEFAULT_HOME).expanduser()
