"""The one strict reader of line-oriented corpus files: ``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``.

Compressed bytes are read into one reused buffer, decompressed incrementally and split on
newlines while carrying the unfinished tail, so memory is one read buffer, one decompressed piece
and the current line. The format is sniffed from the magic bytes (a JSON text cannot start with
them), so a misnamed file still reads.

Why ``decompressobj`` and not zstandard's ``stream_reader`` or ``gzip.GzipFile``: a stream reader
returns a short, clean-looking end on a truncated frame (``read_across_frames=True`` included), so
a file cut off by a failed copy would read as a shorter valid file and every later stage would
count it as done. Here the end of input must coincide with the end of a frame/member, or the read
fails naming the file. Multi-frame zstd and multi-member gzip files are read whole.

Everything that reads corpus lines (``stream_jsonl``, curate's documents and attributes) builds on
:class:`LineReader`; callers only decide what a line means and which error type their users see.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from io import BytesIO
from itertools import chain
from typing import IO, Any

import zstandard

from feedline.io.errors import CorpusFormatError, NotFoundError
from feedline.io.paths import is_url, local_path

READ_BYTES = 1 << 20  # compressed bytes per read (one reused buffer)
FEED_BYTES = 32 << 10  # compressed bytes per decompress call: the decompressed piece stays in cache while split
MAX_LINE_BYTES = 256 << 20  # a "line" larger than this is a broken file, not a document
ZSTD_MAX_WINDOW = 1 << 31  # files made with `zstd --long=31` need it; costs memory only if used
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


class _Zstd:
    kind = "zstd"

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


class _Gzip:
    kind = "gzip"

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
            self.complete = True  # a member ended; anything after it is the next member
            data = self._obj.unused_data
            self._obj = zlib.decompressobj(wbits=31)
        return b"".join(out)


class _Plain:
    kind = "plain"
    complete = True

    @staticmethod
    def feed(data: bytes | memoryview) -> bytes:
        return bytes(data)


def _sniff(head: bytes) -> _Zstd | _Gzip | _Plain:
    if head.startswith(_ZSTD_MAGIC):
        return _Zstd()
    if head.startswith(_GZIP_MAGIC):
        return _Gzip()
    return _Plain()


def open_input(path_or_url: str, storage_options: dict[str, Any] | None = None) -> IO[bytes]:
    """A binary handle on a local path (``file://`` allowed) or any URL ``feedline.io`` knows.

    Local files are opened unbuffered: :class:`LineReader` reads a whole buffer at a time. A
    missing local file is a :class:`NotFoundError`; remote failures are the store's errors.
    """
    if not is_url(path_or_url):
        path = local_path(path_or_url)
        try:
            return open(path, "rb", buffering=0)  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            raise NotFoundError(f"{path}: no such file") from None
    from feedline.io.open import open_object

    store, name = open_object(path_or_url, **(storage_options or {}))
    return store.open(name)


class LineReader:
    """The lines of one plain, gzip or zstd byte stream, refusing a truncated or corrupt one.

    :meth:`batches` yields lists of lines, one list per decompressed piece, so a consumer's inner
    loop runs over a plain list; iterating the reader itself yields single lines. Lines keep their
    ``\n`` as Python's file iteration does (JSON decoders ignore it); a final unterminated line
    counts when it holds more than whitespace.
    Decompression problems raise :class:`CorpusFormatError` naming ``name``; errors of the handle
    itself (a dropped connection, a disk error) pass through unchanged so the caller can decide
    whether they are worth a retry.

    Args:
        handle: the compressed bytes, read with ``readinto``; the caller closes it.
        name: the file or URL, for error messages.
        read_bytes: compressed bytes per read (one reused buffer).
    """

    def __init__(self, handle: IO[bytes], name: str, *, read_bytes: int = READ_BYTES) -> None:
        self.handle = handle
        self.name = name
        self.read_bytes = read_bytes
        #: Compressed bytes read so far.
        self.compressed_bytes = 0
        #: Lines yielded so far.
        self.lines = 0

    def __iter__(self) -> Iterator[bytes]:
        return chain.from_iterable(self.batches())

    def _decoded(self) -> Iterator[bytes]:
        """Decompressed text in pieces of bounded size (input is fed ``FEED_BYTES`` at a time)."""
        buffer = bytearray(self.read_bytes)
        view = memoryview(buffer)
        readinto = self.handle.readinto
        decoder: _Zstd | _Gzip | _Plain | None = None
        head = b""
        while True:
            got = readinto(view)
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
                raise CorpusFormatError(f"{self.name}: corrupt compressed data: {exc}") from None
        if decoder is None and head:
            decoder = _sniff(head)  # a file shorter than the magic
            yield decoder.feed(head)
        if decoder is not None and not decoder.complete:
            raise CorpusFormatError(
                f"{self.name}: truncated {decoder.kind} stream after {self.compressed_bytes} "
                "compressed bytes; the file is incomplete, download it again"
            )

    def batches(self) -> Iterator[list[bytes]]:
        """Lists of complete lines, in file order (see the class docstring)."""
        tail = b""
        for text in self._decoded():
            # BytesIO shares the piece's buffer and finds newlines with memchr: about twice as fast
            # as bytes.split, which scans byte by byte.
            pieces = BytesIO(text).readlines()
            if tail:
                pieces[0] = tail + pieces[0]  # joins one line, not the whole piece
            tail = b"" if pieces[-1].endswith(b"\n") else pieces.pop()
            if len(tail) > MAX_LINE_BYTES:
                raise CorpusFormatError(
                    f"{self.name}: line {self.lines + len(pieces) + 1} longer than "
                    f"{MAX_LINE_BYTES >> 20} MiB without a newline; not a JSONL file?"
                )
            if pieces:
                self.lines += len(pieces)
                yield pieces
        if tail.strip():
            self.lines += 1
            yield [tail]
