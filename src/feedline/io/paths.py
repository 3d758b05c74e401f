"""Paths and URLs, once for every part: telling them apart (globs over both: ``io.globs``).

A path with a scheme other than ``file://`` goes through a store (``feedline.io.open_store``);
anything else is a local path, with an optional ``file://`` prefix.
"""

from __future__ import annotations

import os


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for a URL with a scheme other than ``file://`` (read and written through a store)."""
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def local_path(path: str | os.PathLike[str]) -> str:
    """``path`` without a ``file://`` prefix."""
    return os.fspath(path).removeprefix("file://")
