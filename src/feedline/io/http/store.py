"""HTTP(S) roots, read with feedline's own range client.

A streaming read from an offset (:meth:`HttpStore.open_from`) is one GET with ``Range`` and
``If-Range``: the server itself sends the tail only while the object is the one the validator
names, and the whole new object otherwise; the answer is checked either way (status, encoding,
``Content-Range``, validators), so a body never claims bytes it does not carry.
"""

from __future__ import annotations

import io
from typing import IO, Any

from feedline.io.body import Body, ObjectValidator
from feedline.io.errors import StoreError, StoreUnavailableError, TransientError
from feedline.io.http.client import Expected, HttpRangeClient, status_error
from feedline.io.http.headers import http_date_to_epoch, parse_content_range, strong_etag
from feedline.io.redact import redact_url
from feedline.io.retry import OUTAGES
from feedline.io.store import ObjectInfo, RangedFile, Store, _check_range


class HttpStore(Store):
    """Objects below an HTTP(S) URL. HTTP has no listing, so :meth:`list` refuses.

    The fingerprint is the server's *strong* ETag: nginx derives it from mtime and size, S3 and
    CDNs from content; a server without one (or with only a weak one) gives ``None``.
    """

    coarse_validators = True  # Last-Modified has whole seconds, and so has nginx's ETag

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

    def url(self, path: str = "") -> str:
        """The object's URL without credentials, nor the query (a name may carry a token)."""
        return redact_url(self._full(path))

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

    def read_range(self, path: str, start: int, end: int) -> bytearray:
        _check_range(self.url(path), start, end)
        return self.client.get_range(self._full(path), start, end)

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytearray]:
        for start, end in ranges:
            _check_range(self.url(path), start, end)
        return self.client.get_ranges(self._full(path), ranges)

    def read_ranges_pinned(
        self, path: str, ranges: list[tuple[int, int]], pin: ObjectInfo
    ) -> list[bytearray]:
        """The ranges, each GET sent with ``If-Match: <pinned ETag>`` and its answer's size and
        ETag checked against ``pin``: a replaced object fails with no request beyond the ranges
        (without a strong ETag only a change of size shows, as with a stat)."""
        for start, end in ranges:
            _check_range(self.url(path), start, end)
        return self.client.get_ranges(self._full(path), ranges, Expected(pin.size, _pinned_etag(pin)))

    def open(self, path: str) -> IO[bytes]:
        return self._file(path, self.stat(path).size, None)

    def open_pinned(self, path: str, pin: ObjectInfo) -> IO[bytes]:
        """A file over ``path`` of ``pin``'s size, each read pinned to it (no HEAD)."""
        return self._file(path, pin.size, pin)

    def _file(self, path: str, size: int, pin: ObjectInfo | None) -> IO[bytes]:
        # A small buffer: pyarrow asks for exact ranges, and each buffered miss is one request.
        return io.BufferedReader(RangedFile(self, path, size, pin), buffer_size=64 << 10)

    def close(self) -> None:
        self.client.close()

    def set_outage_s(self, outage_s: float) -> None:
        self.client.retry = self.client.retry.with_outage(outage_s)

    def validator(self, path: str) -> ObjectValidator:
        head = self.client.head(self._full(path))
        return ObjectValidator(head.size, head.etag, head.last_modified)

    def open_from(self, path: str, offset: int = 0, validator: ObjectValidator | None = None) -> Body:
        """A GET from ``offset`` with ``If-Range`` on the strong ETag, else the date. Without
        either no ``Range`` is sent at all: a weak ETag cannot guard splicing."""
        full = self._full(path)
        headers: dict[str, str] = {}
        if offset > 0 and validator is not None:
            guard = validator.strong_etag or validator.last_modified
            if guard:
                headers = {"Range": f"bytes={offset}-", "If-Range": guard}
        # One request: the caller (a download) retries, with this store's policy's delays. The
        # outage clock still hears of it, for the one warning and the note when it answers.
        store = self.client.store_name(full)
        try:
            resp = self.client.request("GET", full, headers=headers, preload_content=False)
            if resp.status == 429 or resp.status >= 500:
                _drop(resp)
                raise status_error(full, resp.status, resp.reason or "", None, resp.headers.get("Retry-After"))
        except TransientError as exc:
            outage_s = self.client.retry.outage_s
            failing = OUTAGES.failed(store, exc, outage_s)
            if failing >= outage_s:  # failing that long already (a size probe's retries count)
                raise StoreUnavailableError(
                    f"store {store} unavailable: {exc} (failing for {failing:.1f} s; outage_s={outage_s:g})"
                ) from None
            raise
        OUTAGES.succeeded(store)
        try:
            return self._body(path, resp, offset if headers else 0, validator)
        except BaseException:
            _drop(resp)
            raise

    def _body(self, path: str, resp: Any, offset: int, validator: ObjectValidator | None) -> Body:
        full, url = self._full(path), self.url(path)
        status = resp.status
        if status not in (200, 206):
            raise status_error(full, status, resp.reason or "", resp.headers.get("Content-Range"))
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            # A compressed ranged reply has no usable offsets; appending it would corrupt the file.
            raise StoreError(
                f"{url}: server sent Content-Encoding {encoding!r} although identity was asked; "
                "a proxy is recompressing the shard"
            )
        etag = resp.headers.get("ETag")
        last_modified = resp.headers.get("Last-Modified")
        why = ""
        if status == 206:
            answered = parse_content_range(resp.headers.get("Content-Range"))
            if answered is None or answered.first != offset or offset == 0:
                raise StoreError(
                    f"{url}: server answered Content-Range "
                    f"{resp.headers.get('Content-Range')!r} to bytes={offset}-"
                )
            total = answered.total
            if validator is not None and validator.differs(ObjectValidator(total, etag, last_modified)):
                # The server ignored If-Range but the object is another one: do not splice.
                _drop(resp)
                return self.open_from(path, 0, None).with_reason("validator changed despite If-Range")
            start = offset
        else:
            length = resp.headers.get("Content-Length")
            total = int(length) if length is not None else None
            start = 0
            if offset > 0:
                why = "server answered 200 to a ranged request (ignores Range or the object changed)"
        fp = getattr(resp, "_fp", None)
        # Read straight from http.client into our buffer: urllib3's readinto allocates per call,
        # which halves throughput at loopback speeds. Safe because the encoding is identity.
        # readinto1 returns after one socket read, so a trickling server meets the pace check
        # instead of blocking a whole buffer's worth of reads.
        reader = fp.readinto1 if fp is not None and hasattr(fp, "readinto1") else resp.readinto
        body = Body(start, total, etag, last_modified, None, reader, lambda: _finish(resp), why)
        body.pace = self.client.pace(full)
        return body


def _pinned_etag(pin: ObjectInfo) -> str | None:
    """The strong ETag ``pin`` was seen with: its own, or the one its fingerprint carries."""
    if pin.fingerprint is not None and pin.fingerprint.startswith("http:"):
        return pin.fingerprint[len("http:") :]
    return strong_etag(pin.etag)


def _finish(resp: Any) -> None:
    """Keep the connection alive when the body was read to its end; drop it otherwise."""
    fp = getattr(resp, "_fp", None)
    if fp is not None and getattr(fp, "isclosed", lambda: False)():
        resp.release_conn()
    else:
        _drop(resp)


def _drop(resp: Any) -> None:
    """Close the connection and give its pool slot back: a closed response keeps its slot
    otherwise, and after ``max_connections`` broken bodies every request would wait forever."""
    resp.close()
    resp.release_conn()
