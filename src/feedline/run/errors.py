"""Errors of the shared run machinery: what a pool or a cluster, not a file, did wrong."""

from __future__ import annotations

from feedline.errors import FeedlineError


class RunError(FeedlineError):
    """A worker pool or a Ray cluster failed the run; the message says which and what to do."""
