"""What other parts may use of curate's documents: curate's one face outside its own package.

``feedline tokenize`` reads the same ``documents/`` files the taggers and the mixer read, so it
finds them, opens them and names its outputs exactly as curate does; importing this module
instead of curate's runner and tagger modules keeps the two parts apart (the architecture test
allows no other curate module outside ``feedline.curate``).
"""

from __future__ import annotations

import os
import posixpath

from feedline.curate.errors import CurateError, RetryableFailure
from feedline.curate.files import expand, open_lines
from feedline.io.paths import is_url

__all__ = [
    "DOCUMENTS_SEGMENT", "CurateError", "RetryableFailure", "common_base", "expand", "open_lines",
    "relative_name",
]

DOCUMENTS_SEGMENT = "documents"


def common_base(paths: list[str]) -> str:
    """The deepest folder containing every path (``""`` for a single URL scheme mix)."""
    folders = [posixpath.dirname(p) for p in paths]
    if not folders:
        return ""
    if all(not is_url(f) for f in folders):
        return os.path.commonpath([os.path.abspath(f) for f in folders]) if folders else ""
    prefix = os.path.commonprefix(folders)
    return prefix[: prefix.rfind("/") + 1].rstrip("/") if "/" in prefix else ""


def split_documents(path: str) -> tuple[str, str] | None:
    """``(prefix, rest)`` around the last ``/documents/`` segment of ``path``."""
    marker = f"/{DOCUMENTS_SEGMENT}/"
    at = path.rfind(marker)
    if at < 0:
        if path.startswith(f"{DOCUMENTS_SEGMENT}/"):
            return "", path[len(DOCUMENTS_SEGMENT) + 1 :]
        return None
    return path[:at], path[at + len(marker) :]


def relative_name(doc_path: str, base: str) -> str:
    """The document's path below its ``documents/`` folder, else below the common ``base``.

    A URL's query is no part of the name: it may carry a token, and an output named after it
    would write the token into a file name."""
    if is_url(doc_path):
        doc_path = doc_path.split("?", 1)[0].split("#", 1)[0]
    split = split_documents(doc_path)
    if split is not None:
        return split[1]
    return posixpath.relpath(doc_path, base) if base else posixpath.basename(doc_path)
