"""``stream_jsonl``: documents from ``.jsonl``, ``.jsonl.gz`` and ``.jsonl.zst``, local or remote.

The shard is never materialised: compressed bytes are read into one reused buffer, decompressed
incrementally, split on newlines while carrying the unfinished tail, and parsed with orjson, so
memory is one read buffer, one decompressed chunk and the current line. The format is sniffed
from the magic bytes (a JSON text cannot start with them), so a misnamed file still reads.

Why ``decompressobj`` and not zstandard's ``stream_reader``: a stream reader returns a short,
clean-looking end on a truncated frame, so a shard cut off by a failed copy would read as a
shorter valid shard. Here the end of input must coincide with the end of a frame/member, or
the read fails naming the file. Multi-frame zstd and multi-member gzip files are read whole.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import zstandard

from feedline.io import StoreError, open_object
from feedline.io.errors import CorpusFormatError

READ_BYTES = 1 << 20  # compressed bytes per read (one reused buffer)
FEED_BYTES = 64 << 10  # compressed bytes per decompress call: bounds the decompressed piece
MAX_LINE_BYTES = 256 << 20  # a "line" larger than this is a broken file, not a document
ZSTD_MAX_WINDOW = 1 << 31  # shards made with `zstd --long=31` need it; costs memory only if used
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


class _Zstd:
    def __init__(self) -> None:
        self._dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self._obj = self._dctx.decompressobj()
        self.complete = True

    def feed(self, data: bytes | memoryview) -> bytes:
        out = []
        while data:
            chunk = self._obj.decompress(data)
            if chunk:
                out.append(chunk)
            if not self._obj.eof:
                self.complete = False
                break
            self.complete = True  # a frame ended; anything after it is the next frame
            data = self._obj.unused_data
            self._obj = self._dctx.decompressobj()
        return b"".join(out)

    def finish(self) -> bool:
        return self.complete


class _Gzip:
    def __init__(self) -> None:
        self._obj = zlib.decompressobj(wbits=31)
        self.complete = True

    def feed(self, data: bytes | memoryview) -> bytes:
        out = []
        while data:
            out.append(self._obj.decompress(data))
            if not self._obj.eof:
                self.complete = False
                break
            self.complete = True
            data = self._obj.unused_data
            self._obj = zlib.decompressobj(wbits=31)
        return b"".join(out)

    def finish(self) -> bool:
        return self.complete


class _Plain:
    @staticmethod
    def feed(data: bytes | memoryview) -> bytes:
        return bytes(data)

    @staticmethod
    def finish() -> bool:
        return True


def _sniff(head: bytes) -> _Zstd | _Gzip | _Plain:
    if head.startswith(_ZSTD_MAGIC):
        return _Zstd()
    if head.startswith(_GZIP_MAGIC):
        return _Gzip()
    return _Plain()


class JsonlStream:
    """An iterable over the documents (dicts) of one JSONL shard; counts what it saw.

    ``lines`` counts physical lines read, ``documents`` the documents yielded, ``bad_lines`` the
    malformed lines skipped (only with ``skip_bad_lines``; otherwise the first one raises
    :class:`CorpusFormatError` naming the file and the 1-based line number).
    """

    def __init__(
        self,
        path_or_url: str | Path,
        *,
        skip_bad_lines: bool = False,
        storage_options: dict[str, Any] | None = None,
        read_bytes: int = READ_BYTES,
    ) -> None:
        self.source = str(path_or_url)
        self.skip_bad_lines = skip_bad_lines
        self.storage_options = storage_options or {}
        self.read_bytes = read_bytes
        self.lines = 0
        self.documents = 0
        self.bad_lines = 0
        self.compressed_bytes = 0

    def _open(self) -> IO[bytes]:
        src = self.source
        if "://" not in src or src.startswith("file://"):
            path = src[len("file://") :] if src.startswith("file://") else src
            try:
                return open(path, "rb", buffering=0)  # noqa: SIM115 - closed by __iter__
            except FileNotFoundError:
                raise CorpusFormatError(f"{path}: no such file") from None
        try:
            store, name = open_object(src, **self.storage_options)
            return store.open(name)
        except StoreError as exc:
            raise CorpusFormatError(str(exc)) from None

    def _bad(self, line_no: int, why: str) -> None:
        if not self.skip_bad_lines:
            raise CorpusFormatError(
                f"{self.source}: line {line_no}: {why} (use --skip-bad-lines to skip such lines)"
            )
        self.bad_lines += 1

    def _decoded(self, handle: IO[bytes]) -> Iterator[bytes]:
        """Decompressed text in pieces of bounded size (input is fed ``FEED_BYTES`` at a time)."""
        buffer = bytearray(self.read_bytes)
        view = memoryview(buffer)
        decoder: _Zstd | _Gzip | _Plain | None = None
        head = b""
        while True:
            try:
                got = handle.readinto(view)
            except StoreError as exc:
                raise CorpusFormatError(f"{self.source}: read failed: {exc}") from None
            if not got:
                break
            self.compressed_bytes += got
            chunk: bytes | memoryview = view[:got]
            if decoder is None:
                head += bytes(chunk)
                if len(head) < len(_ZSTD_MAGIC):
                    continue  # tiny reads: wait for enough bytes to tell the format
                decoder, chunk, head = _sniff(head), head, b""
            try:
                for start in range(0, len(chunk), FEED_BYTES):
                    text = decoder.feed(chunk[start : start + FEED_BYTES])
                    if text:
                        yield text
            except (zstandard.ZstdError, zlib.error) as exc:
                raise CorpusFormatError(f"{self.source}: corrupt compressed data: {exc}") from None
        if decoder is None and head:
            decoder = _sniff(head)  # a file shorter than the magic
            yield decoder.feed(head)
        if decoder is not None and not decoder.finish():
            kind = "zstd" if isinstance(decoder, _Zstd) else "gzip"
            raise CorpusFormatError(
                f"{self.source}: truncated {kind} stream after {self.compressed_bytes} "
                "compressed bytes; the file is incomplete, download it again"
            )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        loads = orjson.loads
        handle = self._open()
        try:
            tail = b""
            line_no = self.lines
            for text in self._decoded(handle):
                pieces = (tail + text).split(b"\n") if tail else text.split(b"\n")
                tail = pieces.pop()
                if len(tail) > MAX_LINE_BYTES:
                    raise CorpusFormatError(
                        f"{self.source}: line {line_no + len(pieces) + 1} longer than "
                        f"{MAX_LINE_BYTES >> 20} MiB without a newline; not a JSONL file?"
                    )
                for line in pieces:
                    line_no += 1
                    try:
                        doc = loads(line)
                    except orjson.JSONDecodeError as exc:
                        if not line.strip():
                            continue
                        self.lines = line_no
                        self._bad(line_no, f"invalid JSON ({exc})")
                        continue
                    if type(doc) is not dict:
                        self.lines = line_no
                        self._bad(line_no, f"expected a JSON object, got {type(doc).__name__}")
                        continue
                    yield doc
                    self.documents += 1
                self.lines = line_no
            if tail.strip():
                line_no += 1
                self.lines = line_no
                try:
                    doc = loads(tail)
                except orjson.JSONDecodeError as exc:
                    self._bad(line_no, f"invalid JSON ({exc})")
                else:
                    if type(doc) is dict:
                        yield doc
                        self.documents += 1
                    else:
                        self._bad(line_no, f"expected a JSON object, got {type(doc).__name__}")
        finally:
            handle.close()


def stream_jsonl(
    path_or_url: str | Path,
    *,
    skip_bad_lines: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> JsonlStream:
    """Documents of a ``.jsonl``/``.jsonl.gz``/``.jsonl.zst`` file or URL, one at a time."""
    return JsonlStream(path_or_url, skip_bad_lines=skip_bad_lines, storage_options=storage_options)
