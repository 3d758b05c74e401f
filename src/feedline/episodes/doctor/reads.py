"""Count every byte ``feedline doctor`` reads, by kind, through a store that wraps the real one.

The doctor promises to read metadata, Parquet footers, two small Parquet columns and MP4 indexes
only, never video payloads. Counting at the store, under every reader it calls (pyarrow, the
MP4 box walker, the metadata loader), turns that promise into a number the report prints: the
bytes each kind of read cost, and the requests. Files are opened as unbuffered ranged files over
this store, so a library's read of a footer costs the footer, not a read-ahead buffer's worth.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from feedline.io import ObjectInfo, Store
from feedline.io.store import RangedFile

#: Kinds of read the report shows, in its order.
KINDS = ("metadata", "parquet_footers", "parquet_columns", "mp4_index")


class CountingStore(Store):
    """``inner`` with every byte read counted under the current thread's kind.

    Args:
        inner: the store actually read.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.root_url = inner.root_url
        self.max_connections = inner.max_connections
        self.coarse_validators = inner.coarse_validators
        self._bytes = dict.fromkeys(KINDS, 0)
        self._requests = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- counting ----------------------------------------------------------------------------
    @contextmanager
    def kind(self, name: str) -> Iterator[None]:
        """Count this thread's reads inside the block as ``name`` (one of :data:`KINDS`)."""
        previous = getattr(self._local, "kind", "metadata")
        self._local.kind = name
        try:
            yield
        finally:
            self._local.kind = previous

    def current_kind(self) -> str:
        return getattr(self._local, "kind", "metadata")

    def _count(self, nbytes: int, requests: int = 1, kind: str | None = None) -> None:
        kind = kind or self.current_kind()
        with self._lock:
            self._bytes[kind] = self._bytes.get(kind, 0) + nbytes
            self._requests += requests

    @property
    def bytes_read(self) -> dict[str, int]:
        """Bytes read so far, per kind, plus ``total``."""
        with self._lock:
            out = dict(self._bytes)
        out["total"] = sum(out.values())
        return out

    @property
    def requests(self) -> int:
        with self._lock:
            return self._requests

    # -- the Store interface -------------------------------------------------------------------
    def clean_path(self, path: str) -> str:
        return self.inner.clean_path(path)

    def url(self, path: str = "") -> str:
        return self.inner.url(path)

    def stat(self, path: str) -> ObjectInfo:
        return self.inner.stat(path)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return self.inner.list(prefix)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        data = self.inner.read_range(path, start, end)
        self._count(len(data))
        return data

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        parts = self.inner.read_ranges(path, ranges)
        self._count(sum(len(p) for p in parts), len(ranges))
        return parts

    def read_bytes(self, path: str) -> bytes:
        data = self.inner.read_bytes(path)
        self._count(len(data))
        return data

    def open(self, path: str) -> IO[bytes]:
        """An unbuffered ranged file: each read a library makes is one counted range read, of
        the kind current when the file was opened (pyarrow reads from its own threads)."""
        return _CountedFile(self, path, self.inner.stat(path).size, self.current_kind())  # type: ignore[return-value]

    def close(self) -> None:
        self.inner.close()

    def set_outage_s(self, outage_s: float) -> None:
        self.inner.set_outage_s(outage_s)


class _CountedFile(RangedFile):
    """A ranged file over the inner store whose reads count as one fixed kind."""

    def __init__(self, store: CountingStore, path: str, size: int, kind: str) -> None:
        super().__init__(store.inner, path, size)
        self._counter, self._kind = store, kind

    def readinto(self, buffer: Any) -> int:
        n = super().readinto(buffer)
        if n:
            self._counter._count(n, kind=self._kind)
        return n
