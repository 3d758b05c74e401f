"""Errors of the curation toolkit.

The processor decides per exception class: a :class:`RetryableFailure` is retried (``--retries``),
any other error either skips the file (``--skip-on-failure``) or aborts the run. Classes, not
exception *names*, carry that decision so a user's tagger can raise them too.
"""

from __future__ import annotations

from feedline.errors import FeedlineError


class CurateError(FeedlineError):
    """Bad curation input or configuration; the message names the file and the problem."""


class RetryableFailure(CurateError):
    """A transient failure (e.g. a dropped connection mid-read); the file is worth another try."""


class AlignmentError(CurateError):
    """An attribute file does not line up with its document file (short, long, or wrong ids)."""
