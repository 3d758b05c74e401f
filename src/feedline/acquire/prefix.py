"""The read-back before a resume: samples of the kept prefix compared with the source's bytes.

An ETag such as nginx's (mtime seconds + size) or a Last-Modified date survives a same-size
replacement within one second, so ``If-Range`` alone could join the old prefix to the new file's
tail. When the source's validators are that coarse and the prefix was fetched close to the
object's date, the last ``PREFIX_SAMPLE_BYTES`` before the offset and a few blocks spread over
the prefix are read back (one ranged request each) before resuming.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.sources import Source
from feedline.errors import FeedlineError

#: A prefix fetched less than this long after the object's Last-Modified may belong to a
#: version replaced within the same second (same date, same nginx ETag): it is read back first.
SAME_SECOND_MARGIN_S = 2.0
PREFIX_SAMPLE_BYTES = 64 << 10  # read back before a resume: the tail of the kept prefix ...
PREFIX_SAMPLE_BLOCK = 4 << 10  # ... and this much at each of
PREFIX_SAMPLE_BLOCKS = 4  # spots spread over the rest of it


def sample_ranges(offset: int) -> list[tuple[int, int]]:
    """The prefix blocks read back before a resume: the tail right before ``offset`` and
    ``PREFIX_SAMPLE_BLOCKS`` blocks spread evenly over the rest."""
    tail = (max(0, offset - PREFIX_SAMPLE_BYTES), offset)
    block = min(PREFIX_SAMPLE_BLOCK, tail[0])
    spread = [] if block <= 0 else [
        (s, s + block) for s in sorted({i * (tail[0] - block) // max(PREFIX_SAMPLE_BLOCKS - 1, 1)
                                        for i in range(PREFIX_SAMPLE_BLOCKS)})
    ]
    return [*spread, tail]


def check_prefix(
    source: Source, part: Path, ckpt: Checkpoint, expected: bool
) -> tuple[str | None, dict[str, Any]]:
    """(why the kept prefix of ``part`` cannot be trusted, or ``None``; what the resume relied
    on, for the shard's report). ``expected``: whether an expected sha256 guards the result."""
    offset = ckpt.verified_bytes
    validator = ckpt.validator
    if validator.strong_etag:
        used = f"If-Range ETag {validator.strong_etag}"
    elif ckpt.last_modified:
        used = f"If-Range Last-Modified {ckpt.last_modified}"
    else:
        used = f"version {ckpt.version_id or ckpt.etag}"
    resume: dict[str, Any] = {
        "validator": used,
        "verified_prefix_bytes": offset,
        "prefix_sample_bytes": 0,
        "expected_sha256": expected,
    }
    if not source.coarse_validators or offset <= 0:
        return None, resume  # a content-derived ETag / pinned version (S3) identifies the bytes
    modified = validator.modified_epoch
    if ckpt.fetched_at is None or modified is None or ckpt.fetched_at - modified >= SAME_SECOND_MARGIN_S:
        # The object had been stable for a while when its first bytes were fetched: a
        # replacement since then has a newer date, and so a new mtime-derived ETag (RFC 9110
        # 8.8.2.2). A checkpoint of an older feedline has no fetched_at: trusted as before.
        resume["modified_before_fetch_s"] = (
            None if ckpt.fetched_at is None or modified is None else round(ckpt.fetched_at - modified, 3)
        )
        return None, resume
    ranges = sample_ranges(offset)
    try:
        remote = source.read_ranges(ranges)
    except (FeedlineError, OSError) as exc:
        return f"cannot read back a sample of the kept prefix ({exc})", resume
    with open(part, "rb") as handle:
        for (start, end), theirs in zip(ranges, remote, strict=True):
            handle.seek(start)
            if handle.read(end - start) != theirs:
                return (
                    f"the server's bytes {start}-{end - 1} differ from the kept prefix although "
                    "its validator matches (replaced within the validator's resolution)"
                ), resume
    resume["prefix_sample_bytes"] = sum(end - start for start, end in ranges)
    return None, resume
