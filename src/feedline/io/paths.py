"""Paths and URLs, once for every part: telling them apart (globs over both: ``io.globs``).

A path with a scheme other than ``file://`` goes through a store (``feedline.io.open_store``);
anything else is a local path, with an optional ``file://`` prefix.
"""

from __future__ import annotations

import os
import posixpath


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for a URL with a scheme other than ``file://`` (read and written through a store)."""
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def local_path(path: str | os.PathLike[str]) -> str:
    """``path`` without a ``file://`` prefix."""
    return os.fspath(path).removeprefix("file://")


#: Rounds of percent-decoding a path is checked under: a server decodes once, a proxy in front of
#: it may decode again (``%252e`` -> ``%2e`` -> ``.``).
_DECODE_ROUNDS = 3


def root_escape(path: str, root: str = "the root") -> str | None:
    """Why ``path``, taken relative to ``root`` (its name in the message), would leave it, or
    ``None`` when it stays inside.

    The path is judged as written and after each round of percent-decoding, because the server
    that answers decodes it (nginx turns ``%2e%2e/`` into ``../`` and resolves it) while
    ``posixpath.normpath`` on the raw text sees only a folder named ``%2e%2e``.
    """
    from urllib.parse import unquote

    form = path
    for _ in range(_DECODE_ROUNDS + 1):
        if form.startswith("/") or "\\" in form or "\x00" in form:
            return f"is not a relative path inside {root}"
        clean = posixpath.normpath(form)
        if clean == ".." or clean.startswith("../"):
            return f"escapes {root}"
        decoded = unquote(form)
        if decoded == form:
            return None
        form = decoded
    return None
