"""Errors of feedline.acquire: each message names the URL or file and what to do about it."""

from __future__ import annotations

from feedline.errors import FeedlineError

__all__ = ["AcquireError", "DownloadError"]


class AcquireError(FeedlineError):
    """Root of the downloader's errors: catch it to handle any acquire failure."""


class DownloadError(AcquireError):
    """A shard could not be downloaded and verified (bad status, hash mismatch, changing object)."""
