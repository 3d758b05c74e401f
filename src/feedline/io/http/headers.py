"""The HTTP headers feedline trusts bytes on: ``Content-Range``, ``ETag`` and ``Last-Modified``.

One parser for both the range client (random reads) and the downloader (resume), so they agree
on what a server's answer means: which bytes a 206 carries, how large the object is, what a 416
says about the size, which ETags identify bytes (strong) rather than meaning (weak), and when
the object last changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

_SATISFIED = re.compile(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_UNSATISFIED = re.compile(r"\s*bytes\s+\*/(\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ContentRange:
    """``Content-Range: bytes first-last/total`` of a 206: ``last`` is inclusive, as on the wire;
    ``total`` is ``None`` for ``/*`` (size unknown to the server)."""

    first: int
    last: int
    total: int | None

    @property
    def end(self) -> int:
        """One past the last byte, as Python slices count."""
        return self.last + 1


def parse_content_range(value: str | None) -> ContentRange | None:
    """The range a 206 answer carries; ``None`` when the header is missing or malformed."""
    match = _SATISFIED.match(value or "")
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    if last < first:
        return None
    total = None if match.group(3) == "*" else int(match.group(3))
    return ContentRange(first, last, total)


def unsatisfied_range_total(value: str | None) -> int | None:
    """The object size a 416 states with ``Content-Range: bytes */size``; ``None`` when absent."""
    match = _UNSATISFIED.match(value or "")
    return int(match.group(1)) if match else None


def strong_etag(etag: str | None) -> str | None:
    """``etag`` when it is strong; ``None`` for a missing or weak (``W/``) one.

    A weak ETag promises equivalent meaning, not identical bytes, so it can neither fingerprint
    an object nor guard a byte-range resume (``If-Range`` requires a strong validator).
    """
    return etag if etag and not etag.startswith("W/") else None

def http_date_to_epoch(value: str | None) -> float | None:
    """Parse a ``Last-Modified`` header; ``None`` when absent or malformed."""
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
