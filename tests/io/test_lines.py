"""LineReader: the one strict line reader under stream_jsonl and curate's readers."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.io.errors import CorpusFormatError, NotFoundError, TransientError
from feedline.io.jsonl import stream_jsonl
from feedline.io.lines import LineReader, open_input

LINES = [b'{"id": %d, "text": "line %d"}\n' % (i, i) for i in range(500)]


def frames(lines: list[bytes], parts: int, kind: str) -> bytes:
    """``lines`` as ``parts`` independent zstd frames or gzip members, concatenated."""
    step = -(-len(lines) // parts)
    chunks = [b"".join(lines[i : i + step]) for i in range(0, len(lines), step)]
    if kind == "zst":
        cctx = zstandard.ZstdCompressor()
        return b"".join(cctx.compress(c) for c in chunks)
    return b"".join(gzip.compress(c) for c in chunks)


def read(data: bytes, read_bytes: int = 1 << 20) -> list[bytes]:
    return list(LineReader(io.BytesIO(data), "mem.jsonl", read_bytes=read_bytes))


@pytest.mark.parametrize("kind", ["zst", "gz"])
def test_multi_frame_files_read_whole(kind):
    data = frames(LINES, 7, kind)
    assert read(data) == LINES
    assert read(data, read_bytes=333) == LINES


@settings(max_examples=30, deadline=None)
@given(cut=st.floats(0.02, 0.98), kind=st.sampled_from(["zst", "gz"]))
def test_a_cut_inside_any_frame_is_an_error_never_a_shorter_file(cut, kind):
    data = frames(LINES, 6, kind)
    ends = set()  # where frames/members end: a cut exactly there is a valid shorter file
    cctx_sizes = []
    step = -(-len(LINES) // 6)
    for i in range(0, len(LINES), step):
        part = b"".join(LINES[i : i + step])
        size = len(zstandard.ZstdCompressor().compress(part) if kind == "zst" else gzip.compress(part))
        cctx_sizes.append(size)
        ends.add(sum(cctx_sizes))
    at = int(len(data) * cut)
    if at in ends:
        return
    name = "zstd" if kind == "zst" else "gzip"
    with pytest.raises(CorpusFormatError, match=rf"mem.jsonl: truncated {name} stream .* download it again"):
        read(data[:at])


def test_final_line_without_newline_and_blank_tail():
    assert read(b"a\nb") == [b"a\n", b"b"]
    assert read(b"a\n\nb\n   ") == [b"a\n", b"\n", b"b\n"]  # inner blank lines are lines; a blank tail is not
    reader = LineReader(io.BytesIO(b"x\ny\nz"), "m")
    batches = list(reader.batches())
    assert [line for batch in batches for line in batch] == [b"x\n", b"y\n", b"z"]
    assert reader.lines == 3 and reader.compressed_bytes == 5


def test_corrupt_data_names_the_file():
    raw = b"".join(LINES)
    data = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(raw))
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(CorpusFormatError, match="mem.jsonl: corrupt compressed data"):
        read(bytes(data))


class _FailingHandle(io.RawIOBase):
    """A MOCK handle that fails mid-read: a real store retries internally, so the pass-through of
    the error a caller finally sees cannot be caused on demand with a server."""

    def __init__(self, data: bytes, fail_after: int) -> None:
        self._data, self._pos, self._fail_after = data, 0, fail_after

    def readinto(self, view) -> int:  # type: ignore[override]
        if self._pos >= self._fail_after:
            raise TransientError("http://host/x.jsonl: connection reset")
        n = min(len(view), self._fail_after - self._pos)
        view[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


def test_handle_errors_pass_through_for_the_caller_to_classify():
    data = b"".join(LINES)
    reader = LineReader(_FailingHandle(data, 1000), "x.jsonl", read_bytes=256)
    with pytest.raises(TransientError, match="connection reset"):
        list(reader)


def test_open_input_local_and_missing(tmp_path: Path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"1\n")
    with open_input(f"file://{path}") as handle:
        assert handle.read() == b"1\n"
    with pytest.raises(NotFoundError, match="no such file"):
        open_input(str(tmp_path / "absent.jsonl"))


def test_stream_jsonl_counts_the_line_of_the_document_it_yields(tmp_path: Path):
    """``lines`` is the yielded document's line while the caller holds it (ids of documents
    without one are derived from it)."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a": 3}\n')
    stream = stream_jsonl(path)
    assert [(doc["a"], stream.lines) for doc in stream] == [(1, 1), (2, 3), (3, 4)]
