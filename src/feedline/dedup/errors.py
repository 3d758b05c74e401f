"""Errors of the MinHash/LSH dedup engine (shared by acquire and curate)."""

from __future__ import annotations

from feedline.errors import FeedlineError

__all__ = ["DedupError"]


class DedupError(FeedlineError):
    """Bad dedup parameters or input; the message names the parameter or file."""
