"""Errors of feedline.acquire: each message names the URL or file and what to do about it."""

from __future__ import annotations

from feedline.errors import FeedlineError


class DownloadError(FeedlineError):
    """A shard could not be downloaded and verified (bad status, hash mismatch, changing source)."""


class CorpusFormatError(FeedlineError):
    """A corpus file is malformed: a bad JSON line (with its number) or a truncated gzip/zstd stream."""
