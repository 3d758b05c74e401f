"""Where feedline keeps caches: ``$FEEDLINE_HOME``, default ``~/.cache/feedline``.

The home is checked (and created) when it is asked for, not when a cache below it is first
written: a home below a regular file, or in a folder feedline may not write, is one
:class:`HomeError` naming the setting and the fix, instead of a ``PermissionError`` from deep
inside a sidecar build.
"""

from __future__ import annotations

import os
from pathlib import Path

from feedline.io.errors import HomeError

DEFAULT_HOME = "~/.cache/feedline"
_usable: set[Path] = set()  # homes already found usable by this process (checked once each)


def feedline_home() -> Path:
    """The cache root, created if missing; callers key entries below it so two revisions never
    share one. A home feedline cannot use is a :class:`HomeError` saying which and why."""
    setting = os.environ.get("FEEDLINE_HOME")
    home = Path(setting or DEFAULT_HOME).expanduser()
    if home not in _usable:
        problem = _problem(home)
        if problem:
            named = f"FEEDLINE_HOME={setting}" if setting else f"the cache folder {home} (FEEDLINE_HOME unset)"
            raise HomeError(
                f"{named}: {problem}; set FEEDLINE_HOME to a folder feedline can write (it keeps "
                "MP4 sidecars, streaming indexes and the demo dataset there)"
            )
        _usable.add(home)
    return home


def _problem(home: Path) -> str:
    """Why ``home`` cannot hold feedline's caches (``""``: it can, and now exists)."""
    probe = home
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        probe = probe.parent  # the nearest existing folder above: the one to blame
    if probe.exists() and not probe.is_dir():
        return f"{probe} is a file, not a folder" if probe == home else f"{probe} (above it) is a file, not a folder"
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create {home} ({exc.strerror or exc})"
    if not os.access(home, os.W_OK | os.X_OK):
        return f"{home} is not writable"
    return ""
