"""Glob expansion over local paths and store URLs: the one expander curate and dedup use.

It sits above ``io.open`` (a remote pattern is listed through its store; imported on first use,
so a local-only job never loads the HTTP client), while ``io.paths`` (telling a URL from a path)
stays below everything that writes or opens.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterable

from feedline.io.errors import IoError
from feedline.io.paths import is_url, local_path

_GLOB_CHARS = "*?["


def expand_paths(
    patterns: Iterable[str],
    *,
    folder_glob: str = "**/*",
    error: type[Exception] = IoError,
) -> list[str]:
    """Every file matching ``patterns``: in pattern order, sorted within a pattern, each once.

    Local patterns are globs (``**`` spans folders); a plain folder stands for
    ``<folder>/<folder_glob>``; a plain path that does not exist is an error. URL patterns list
    the store below the part before the first glob character and match the rest with the same
    rules (``*`` stays within a folder, ``**/`` spans zero or more, hidden names match only a
    pattern that starts with ``.``); a URL without glob characters is kept as given.

    Args:
        patterns: paths, ``file://`` URLs, globs or store URLs (``s3://bucket/docs/**/*.gz``).
        folder_glob: what a plain local folder expands to.
        error: the caller's error class, raised for a pattern that matches nothing, naming it.
    """
    found: dict[str, str] = {}
    for pattern in patterns:
        matches = _expand_url(pattern) if is_url(pattern) else _expand_local(pattern, folder_glob, error)
        if not matches:
            raise error(f"{pattern}: matches no files")
        for match in matches:
            found.setdefault(match if is_url(match) else os.path.abspath(match), match)
    return list(found.values())


def _has_glob(text: str) -> bool:
    return any(c in text for c in _GLOB_CHARS)


def _expand_local(pattern: str, folder_glob: str, error: type[Exception]) -> list[str]:
    path = local_path(pattern)
    if not _has_glob(path):
        if os.path.isdir(path):
            path = os.path.join(path, folder_glob)
        elif not os.path.exists(path):
            raise error(f"{pattern}: no such file")
    return sorted(m for m in glob.glob(path, recursive=True) if os.path.isfile(m))


def _expand_url(pattern: str) -> list[str]:
    from feedline.io.open import open_store

    cut = min((i for i, c in enumerate(pattern) if c in _GLOB_CHARS), default=len(pattern))
    if cut == len(pattern):
        return [pattern]
    base = pattern[: pattern.rfind("/", 0, cut) + 1]
    wanted = pattern[len(base) :].split("/")
    store = open_store(base.rstrip("/"))
    try:
        return sorted(base + info.path for info in store.list() if _matches(wanted, info.path.split("/")))
    finally:
        store.close()


def _matches(parts: list[str], names: list[str]) -> bool:
    """``names`` (a path's segments) match glob ``parts`` as glob.glob(recursive=True) would."""
    if not parts:
        return not names
    head = parts[0]
    if head == "**":
        return any(_matches(parts[1:], names[i:]) for i in range(len(names) + 1)
                   if not any(n.startswith(".") for n in names[:i]))
    if not names or (names[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(names[0], head) and _matches(parts[1:], names[1:])
