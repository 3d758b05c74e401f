"""The read-back before a resume: samples of the kept prefix compared with the source's bytes.

A weak ETag, nginx's ETag (mtime seconds + size) and a Last-Modified date cannot prove that the
object is still the one the kept prefix came from: a same-size replacement within the same
second (or one that restores the old mtime, as ``rsync -t`` or ``touch -d`` do) keeps them, so
``If-Range`` alone would join the old prefix to the new file's tail. On such a source
(``Source.coarse_validators``) every resume therefore checks bytes, not names:

* the resuming request itself asks for ``OVERLAP_BYTES`` before the offset, and those bytes,
  from the same response as the tail that is appended, must equal the last bytes on disk;
* with that response open, ``PREFIX_SAMPLE_BLOCKS`` blocks at random offsets of the rest of the
  prefix are read back and compared with the disk too (:func:`open_resume`).

Any difference starts over from byte 0. What this cannot see is a replacement identical to the
old object in every sampled byte (the last 64 KiB of the prefix and the random blocks) yet
different elsewhere in the prefix; ``--expected-sha256`` closes that.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.sources import Source
from feedline.errors import FeedlineError
from feedline.io import Body, TransientError

OVERLAP_BYTES = 64 << 10  # re-read before the offset by the resuming request itself ...
PREFIX_SAMPLE_BLOCK = 4 << 10  # ... and this much at each of
PREFIX_SAMPLE_BLOCKS = 8  # random spots of the rest, drawn afresh on every resume
_RANDOM = random.SystemRandom()  # positions a structured replacement cannot anticipate


def sample_ranges(offset: int, rng: random.Random = _RANDOM) -> list[tuple[int, int]]:
    """The blocks read back before a resume: up to ``PREFIX_SAMPLE_BLOCKS`` blocks at random,
    distinct spots of the prefix before the overlap the resume re-reads anyway."""
    room = max(0, offset - OVERLAP_BYTES)
    block = min(PREFIX_SAMPLE_BLOCK, room)
    if block <= 0:
        return []
    slots = room // block
    starts = rng.sample(range(slots), min(PREFIX_SAMPLE_BLOCKS, slots))
    return [(s * block, s * block + block) for s in sorted(starts)]


def resume_record(ckpt: Checkpoint, expected: bool) -> dict[str, Any]:
    """What a resume relies on, for the shard's report (``prefix_sample_bytes`` grows as
    :func:`open_resume` compares bytes). ``expected``: whether an expected sha256 guards it."""
    validator = ckpt.validator
    if validator.strong_etag:
        used = f"If-Range ETag {validator.strong_etag}"
    elif ckpt.last_modified:
        used = f"If-Range Last-Modified {ckpt.last_modified}"
    else:
        used = f"version {ckpt.version_id or ckpt.etag}"
    return {
        "validator": used,
        "verified_prefix_bytes": ckpt.verified_bytes,
        "prefix_sample_bytes": 0,
        "expected_sha256": expected,
    }


def open_resume(
    source: Source,
    offset: int,
    ckpt: Checkpoint,
    kept: Callable[[int, int], bytes],
    record: dict[str, Any] | None = None,
) -> Body:
    """``source.open(offset, ckpt)``; on a coarse source the kept prefix is compared first.

    The request asks for ``OVERLAP_BYTES`` before ``offset`` and those bytes must equal
    ``kept(start, end)`` (the disk); then, with that response open, the random blocks of
    :func:`sample_ranges` are read and compared. Reading the blocks only after the resuming
    response arrived means a server that ignores ``Range`` (a 200: start over anyway) costs no
    extra reads. The body returned starts at ``offset``, or at 0 with ``why_restart`` set; the
    bytes compared are added to ``record["prefix_sample_bytes"]``.
    """
    overlap = min(OVERLAP_BYTES, offset) if source.coarse_validators else 0
    if overlap <= 0:
        return source.open(offset, ckpt)
    first = offset - overlap
    body = source.open(first, ckpt)
    if body.start != first:
        return body  # the store already starts over (200, changed validator): nothing to compare
    try:
        why = _compare(source, body, first, offset, kept, record)
    except BaseException:
        body.close()
        raise
    if why:
        body.close()
        return source.open(0, None).with_reason(why)
    body.start = offset
    return body


def _compare(
    source: Source,
    body: Body,
    first: int,
    offset: int,
    kept: Callable[[int, int], bytes],
    record: dict[str, Any] | None,
) -> str:
    """Why the kept prefix is not the server's (``""``: the samples match)."""
    if _read_exactly(body, offset - first) != kept(first, offset):
        return _differs(first, offset)
    compared = offset - first
    ranges = sample_ranges(offset)
    try:
        remote = source.read_ranges(ranges) if ranges else []
    except (FeedlineError, OSError) as exc:
        if record is not None and record.get("expected_sha256"):
            remote = []  # the expected sha256 still refuses a spliced result at the end
        else:
            return f"cannot read back a sample of the kept prefix ({exc})"
    for (start, end), theirs in zip(ranges, remote, strict=False):
        if theirs != kept(start, end):
            return _differs(start, end)
        compared += end - start
    if record is not None:
        record["prefix_sample_bytes"] += compared
    return ""


def _read_exactly(body: Body, n: int) -> bytes:
    buffer = bytearray(n)
    view = memoryview(buffer)
    got = 0
    while got < n:
        step = body.readinto(view[got:])
        if not step:
            raise TransientError(f"body ended {n - got} bytes into the re-read of the kept prefix")
        got += step
    return bytes(buffer)


def _differs(start: int, end: int) -> str:
    return (
        f"the server's bytes {start}-{end - 1} differ from the kept prefix although its "
        "validator matches (a same-size replacement the ETag / date cannot tell)"
    )
