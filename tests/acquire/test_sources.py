"""acquire.sources: where a download's bytes come from, against real nginx, moto S3 and files."""

from __future__ import annotations

import os

import pytest

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.sources import StoreSource, open_source
from feedline.io import RangeError


def _checkpoint_for(source, offset: int) -> Checkpoint:
    info = source.stat()
    return Checkpoint(url=source.url, expected_size=None, verified_bytes=offset, sha256_prefix="",
                      etag=info.etag)


def test_store_source_offset_past_the_end_is_a_range_error_with_the_size(tmp_path) -> None:
    """Like an HTTP 416: the downloader decides (complete, or start over), never retries it."""
    (tmp_path / "obj.bin").write_bytes(os.urandom(1000))
    source = open_source(str(tmp_path / "obj.bin"))
    assert isinstance(source, StoreSource)
    with pytest.raises(RangeError) as info:
        source.open(1500, _checkpoint_for(source, 1500))
    assert info.value.total == 1000
