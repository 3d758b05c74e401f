"""Reading and writing JSONL files (plain, gzip, zstd), local or remote, all-or-nothing.

Local paths are the main case and are read and written directly; any URL with a scheme goes
through :mod:`feedline.io`. Outputs are written to a temporary file and renamed (or uploaded)
only when complete, so a killed run never leaves a partial attribute or mix file in place.
Gzip output has a zero timestamp and no file name in its header, so reruns are byte-identical.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Iterator
from itertools import chain
from typing import IO

import zstandard

from feedline.curate.errors import CurateError, RetryableFailure
from feedline.io.errors import (
    CorpusFormatError,
    NotFoundError,
    StoreError,
    TransientError,
    is_transport_error,
)
from feedline.io.globs import expand_paths
from feedline.io.lines import LineReader, open_input
from feedline.io.paths import is_url, local_path
from feedline.io.upload import atomic_file, atomic_write

GZIP_LEVEL = 6  # zlib's default: ~3x faster than gzip.open's 9 for a few percent of size
ZSTD_LEVEL = 3
DOCUMENTS_IN_FOLDER = "**/*.json*"  # .json, .jsonl, .jsonl.gz, .jsonl.zst ... below a folder given as is
_READ_BUFFER = 1 << 20


def compression_of(path: str) -> str:
    """``gz``, ``zst`` or ``""`` from the file name."""
    if path.endswith((".gz", ".gzip")):
        return "gz"
    if path.endswith((".zst", ".zstd")):
        return "zst"
    return ""


def expand(patterns: list[str]) -> list[str]:
    """Every document file matching any pattern (``**`` allowed; a folder means its ``*.json*``
    files below it), in pattern order, each once; see :func:`feedline.io.globs.expand_paths`."""
    return expand_paths(patterns, folder_glob=DOCUMENTS_IN_FOLDER, error=CurateError)


def size_of(path: str) -> int:
    """Size in bytes of a local or remote file."""
    if not is_url(path):
        return os.path.getsize(local_path(path))
    from feedline.io import open_object

    store, name = open_object(path)
    return store.stat(name).size


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(local_path(path))
    from feedline.io import open_object

    store, name = open_object(path)
    return store.exists(name)


def _open_raw(path: str) -> IO[bytes]:
    try:
        return open_input(path)
    except NotFoundError:
        raise CurateError(f"{path}: no such file") from None
    except TransientError as exc:
        raise RetryableFailure(f"{path}: {exc}") from exc
    except StoreError as exc:
        raise CurateError(str(exc)) from None


@contextlib.contextmanager
def open_lines(path: str) -> Iterator[Iterator[bytes]]:
    """Iterate the non-blank lines of a (possibly compressed, possibly remote) file as bytes.

    Reads through :class:`feedline.io.lines.LineReader`, the strict reader ``stream_jsonl`` uses:
    a truncated or corrupt compressed stream (a multi-frame ``.zst`` cut mid-frame included)
    raises :class:`CurateError` naming the file, so no ``.done`` marker or mix shard is ever made
    from part of a file; a transient network error raises :class:`RetryableFailure`.
    """
    raw = _open_raw(path)
    try:
        batches = _curate_errors(LineReader(raw, path).batches(), path)
        # C-level chaining and filtering: no Python frame per line on the hot path.
        yield filter(bytes.strip, chain.from_iterable(batches))
    finally:
        raw.close()


def _curate_errors(batches: Iterator[list[bytes]], path: str) -> Iterator[list[bytes]]:
    """``batches`` with the I/O layer's errors turned into the processor's retry/fail classes."""
    try:
        yield from batches
    except CorpusFormatError as exc:
        raise CurateError(str(exc)) from None
    except TransientError as exc:
        raise RetryableFailure(f"{path}: read failed ({exc})") from exc
    except StoreError as exc:
        raise CurateError(f"{path}: read failed ({exc})") from None
    except OSError as exc:
        if is_url(path) or is_transport_error(exc):
            raise RetryableFailure(f"{path}: read failed ({exc})") from exc
        raise CurateError(f"{path}: read failed ({exc})") from None
    except Exception as exc:
        if not is_transport_error(exc):
            raise
        raise RetryableFailure(f"{path}: read failed ({type(exc).__name__}: {exc})") from exc


class AtomicOutput:
    """A compressed output file that appears at ``path`` only on :meth:`commit`.

    Compression on top of :class:`feedline.io.atomic.AtomicFile`: a hidden temp file in the
    destination folder renamed into place (fsynced, folder included), or for a URL a local temp
    file uploaded in one PUT.
    """

    def __init__(self, path: str, compression: str | None = None) -> None:
        self.path = path
        self.compression = compression_of(path) if compression is None else compression
        self._file = atomic_file(path)
        self._raw = self._file.handle
        self.bytes_in = 0
        self._zstd: zstandard.ZstdCompressionWriter | None = None
        self._sink: IO[bytes]
        if self.compression == "gz":
            self._sink = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, compresslevel=GZIP_LEVEL, mtime=0)
        elif self.compression == "zst":
            self._zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(self._raw, closefd=False)
            self._sink = self._zstd  # type: ignore[assignment]
        else:
            self._sink = self._raw
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._done = False

    def write(self, data: bytes) -> None:
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered >= _READ_BUFFER:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        if self._buffer:
            chunk = b"".join(self._buffer)
            self._sink.write(chunk)
            self.bytes_in += len(chunk)
            self._buffer.clear()
            self._buffered = 0

    def compressed_size(self) -> int:
        """Exact compressed bytes so far: flushes the compressor to a block boundary (a few bytes
        of overhead), so callers should ask rarely (see the mixer's size estimate)."""
        self._flush_buffer()
        if self.compression == "gz":
            self._sink.flush(zlib.Z_SYNC_FLUSH)  # type: ignore[call-arg]
        elif self._zstd is not None:
            self._zstd.flush(zstandard.FLUSH_BLOCK)
        return self._raw.tell()

    def commit(self) -> None:
        """Finish the stream and move it into place."""
        if self._done:
            return
        self._done = True
        try:
            self._flush_buffer()
            if self._sink is not self._raw:
                self._sink.close()  # ends the gzip member / zstd frame; the file stays open
        except BaseException:
            self._file.abort()
            raise
        self._file.commit()

    def abort(self) -> None:
        """Drop the temp file; the previous file at ``path`` (if any) stays untouched."""
        self._done = True
        self._file.abort()


def write_small(path: str, data: bytes) -> None:
    """Write a small file (a marker, a report) atomically, local or remote."""
    with atomic_write(path) as handle:
        handle.write(data)
