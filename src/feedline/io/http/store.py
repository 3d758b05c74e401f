"""HTTP(S) roots, read with feedline's own range client."""

from __future__ import annotations

import io
from typing import IO

from feedline.io.errors import StoreError
from feedline.io.http.client import HttpRangeClient
from feedline.io.http.headers import http_date_to_epoch
from feedline.io.redact import redact_url
from feedline.io.store import ObjectInfo, RangedFile, Store, _check_range


class HttpStore(Store):
    """Objects below an HTTP(S) URL. HTTP has no listing, so :meth:`list` refuses.

    The fingerprint is the server's *strong* ETag: nginx derives it from mtime and size, S3 and
    CDNs from content; a server without one (or with only a weak one) gives ``None``.
    """

    def __init__(self, base_url: str, client: HttpRangeClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.root_url = redact_url(self.base_url)
        self.client = client or HttpRangeClient()
        self.max_connections = self.client.max_connections

    def __getstate__(self) -> dict[str, object]:
        """Pickle the settings, not the pool: a DataLoader worker opens its own connections."""
        client = self.client
        return {
            "base_url": self.base_url,
            "client_kwargs": {
                "max_connections": client.max_connections,
                "subranges": client.subranges,
                "timeout_s": client.timeout_s,
                "retry": client.retry,
                "headers": client.extra_headers,
                "min_subrange_bytes": client.min_subrange_bytes,
                "min_bytes_per_s": client.min_bytes_per_s,
            },
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["base_url"], HttpRangeClient(**state["client_kwargs"]))  # type: ignore[misc,arg-type]

    def _full(self, path: str) -> str:
        clean = self.clean_path(path)
        return f"{self.base_url}/{clean}" if clean else self.base_url

    def stat(self, path: str) -> ObjectInfo:
        head = self.client.head(self._full(path))
        strong = head.strong_etag
        return ObjectInfo(
            path=self.clean_path(path),
            size=head.size,
            etag=head.etag,
            fingerprint=f"http:{strong}" if strong else None,
            last_modified=http_date_to_epoch(head.last_modified),
        )

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        raise StoreError(
            f"{self.url(prefix)}: HTTP servers cannot list objects; "
            "name the files (or use an s3:// or local root)"
        )

    def read_range(self, path: str, start: int, end: int) -> bytes:
        _check_range(self.url(path), start, end)
        return self.client.get_range(self._full(path), start, end)

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        for start, end in ranges:
            _check_range(self.url(path), start, end)
        return self.client.get_ranges(self._full(path), ranges)

    def open(self, path: str) -> IO[bytes]:
        size = self.stat(path).size
        # A small buffer: pyarrow asks for exact ranges, and each buffered miss is one request.
        return io.BufferedReader(RangedFile(self, path, size), buffer_size=64 << 10)

    def close(self) -> None:
        self.client.close()
