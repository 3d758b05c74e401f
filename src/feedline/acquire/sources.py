"""Download sources: the remote object a shard download reads, opened from any byte offset.

"Source" means one thing in feedline: where bytes are read from. Here it is the object behind a
shard URL, with its identity (ETag, Last-Modified, version id), so a resume can check it is still
the same object.

Every source answers the same question — "give me the object from byte N, but only if it is still
the object described by this checkpoint" — and says honestly when it could not: the body then
starts at byte 0 (HTTP 200, a changed ETag) and the downloader starts over instead of splicing.
HTTP uses ``Range`` + ``If-Range`` on feedline's range client; S3 uses s3fs reads pinned to the
ETag seen at open (``IfMatch``); local and other stores compare their stat fingerprint.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from typing import Any, Protocol

from urllib3.exceptions import HTTPError as Urllib3HTTPError

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.errors import DownloadError
from feedline.io import FsspecStore, HttpStore, Store, TransientError, open_object
from feedline.io.errors import AccessDeniedError, NotFoundError, RangeError, StoreError
from feedline.io.http.client import status_error
from feedline.io.http.headers import parse_content_range, strong_etag
from feedline.io.redact import redact_text, redact_url

S3_READ_BYTES = 8 << 20  # read-ahead block: one GET per 8 MiB, not one per 256 KiB buffer


@dataclass
class Body:
    """An open response: bytes ``[start, total)`` of the object, read with :meth:`readinto`."""

    start: int
    total: int | None
    etag: str | None
    last_modified: str | None
    version_id: str | None
    reader: Any
    closer: Any
    why_restart: str = ""  # set when start == 0 although a resume was asked for
    pace: Any = None  # a minimum-throughput watch (HTTP), checked after every read
    received: int = 0
    failed: TransientError | None = None

    def readinto(self, view: memoryview) -> int:
        """Fill ``view`` (less only at the end of the body). With a pace, the reader returns
        after each socket read and the pace is checked in between."""
        if self.pace is None:
            return self._read(view)
        if self.failed is not None:
            raise self.failed
        got = 0
        try:
            while got < len(view):
                n = self._read(view[got:])
                if not n:
                    break
                got += n
                self.received += n
                self.pace.check(self.received)
        except TransientError as exc:
            if not got:
                raise
            self.failed = exc  # hand over the bytes that did arrive; fail on the next read
        return got

    def _read(self, view: memoryview) -> int:
        try:
            return self.reader(view)
        except (Urllib3HTTPError, http.client.HTTPException, OSError) as exc:
            raise TransientError(
                f"connection broke mid-body: {type(exc).__name__}: {redact_text(str(exc))}"
            ) from None

    def close(self) -> None:
        self.closer()

    def with_reason(self, why: str) -> Body:
        self.why_restart = why
        return self


@dataclass(frozen=True)
class SourceInfo:
    """Size and validator of a source object, as a HEAD or stat tells them."""

    size: int
    etag: str | None
    last_modified: str | None


class Source(Protocol):
    """The remote object one download reads. ``url`` is its URL without credentials."""

    url: str

    def open(self, offset: int, ckpt: Checkpoint | None) -> Body:
        """The object from ``offset`` if it is still the object ``ckpt`` describes, else from 0
        (``Body.why_restart`` says why); an offset past the end raises ``RangeError``."""
        ...

    def stat(self) -> SourceInfo:
        """Size and validators, without reading the body."""
        ...

    def close(self) -> None:
        """Release what this source holds (the store's connections stay with the store)."""
        ...


class HttpSource:
    """A GET on feedline's HTTP client; resumes with ``Range`` + ``If-Range`` (strong ETag, else date)."""

    def __init__(self, store: HttpStore, name: str) -> None:
        self.client = store.client
        self.full_url = f"{store.base_url}/{name}"
        self.url = redact_url(self.full_url)

    def open(self, offset: int, ckpt: Checkpoint | None) -> Body:
        headers: dict[str, str] = {}
        validator = None
        if offset > 0 and ckpt is not None:
            validator = strong_etag(ckpt.etag) or ckpt.last_modified
            if validator:
                headers = {"Range": f"bytes={offset}-", "If-Range": validator}
        resp = self.client.request("GET", self.full_url, headers=headers, preload_content=False)
        try:
            return self._body(resp, offset if headers else 0, ckpt)
        except BaseException:
            _drop(resp)
            raise

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Bytes of the object as the server has it now (the pre-resume prefix check)."""
        return self.client.get_ranges(self.full_url, ranges)

    def stat(self) -> SourceInfo:
        try:
            head = self.client.head(self.full_url)
        except (NotFoundError, AccessDeniedError) as exc:
            raise DownloadError(str(exc)) from None
        return SourceInfo(head.size, head.etag, head.last_modified)

    def _body(self, resp: Any, offset: int, ckpt: Checkpoint | None) -> Body:
        status = resp.status
        if status not in (200, 206):
            error = status_error(self.full_url, status, resp.reason or "", resp.headers.get("Content-Range"))
            if isinstance(error, TransientError | RangeError):
                raise error  # retried / decided by the downloader (a 416 may mean "already complete")
            raise DownloadError(str(error))
        encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            # A compressed ranged reply has no usable offsets; appending it would corrupt the file.
            raise DownloadError(
                f"{self.url}: server sent Content-Encoding {encoding!r} although identity was asked; "
                "a proxy is recompressing the shard"
            )
        etag = resp.headers.get("ETag")
        last_modified = resp.headers.get("Last-Modified")
        why = ""
        if status == 206:
            answered = parse_content_range(resp.headers.get("Content-Range"))
            if answered is None or answered.first != offset or offset == 0:
                raise DownloadError(
                    f"{self.url}: server answered Content-Range "
                    f"{resp.headers.get('Content-Range')!r} to bytes={offset}-"
                )
            total = answered.total
            if ckpt is not None and _changed(ckpt, etag, last_modified, total):
                # The server ignored If-Range but the object is another one: do not splice.
                _drop(resp)
                return self.open(0, None).with_reason("validator changed despite If-Range")
            start = offset
        else:
            length = resp.headers.get("Content-Length")
            total = int(length) if length is not None else None
            start = 0
            if offset > 0:
                why = (
                    "server answered 200 to a ranged request (ignores Range or the object changed)"
                )
        fp = getattr(resp, "_fp", None)
        # Read straight from http.client into our buffer: urllib3's readinto allocates per call,
        # which halves throughput at loopback speeds. Safe because the encoding is identity.
        # readinto1 returns after one socket read, so a trickling server meets the pace check
        # instead of blocking a whole buffer's worth of reads.
        reader = fp.readinto1 if fp is not None and hasattr(fp, "readinto1") else resp.readinto
        body = Body(start, total, etag, last_modified, None, reader, lambda: _finish(resp), why)
        body.pace = self.client.pace(self.full_url)
        return body

    def close(self) -> None:
        return None  # the client belongs to the store, closed by its owner


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


def _changed(
    ckpt: Checkpoint, etag: str | None, last_modified: str | None, total: int | None
) -> bool:
    if ckpt.etag and etag and ckpt.etag != etag:
        return True
    if ckpt.last_modified and last_modified and ckpt.last_modified != last_modified:
        return True
    return ckpt.expected_size is not None and total is not None and ckpt.expected_size != total


class StoreSource:
    """Any other store: S3 (s3fs reads pinned to the opened ETag), memory, local files."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.url = store.url(name)

    def _errors(self, exc: BaseException) -> BaseException:
        if isinstance(exc, FileNotFoundError | NotFoundError):
            return DownloadError(f"{self.url}: no such object; check the URL")
        if isinstance(exc, PermissionError | AccessDeniedError):
            return DownloadError(f"{self.url}: access denied; check the credentials for this store")
        if isinstance(exc, TransientError):
            return exc
        if type(exc).__name__ == "FileExpired":
            return TransientError(f"{self.url}: object replaced while reading")
        if isinstance(exc, StoreError):
            return DownloadError(str(exc))
        return TransientError(f"{self.url}: {type(exc).__name__}: {redact_text(str(exc))[:200]}")

    def stat(self) -> SourceInfo:
        try:
            info = self.store.stat(self.name)
        except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
            raise self._errors(exc) from None
        return SourceInfo(info.size, info.etag or info.fingerprint, None)

    def open(self, offset: int, ckpt: Checkpoint | None) -> Body:
        try:
            return self._open(offset, ckpt)
        except (DownloadError, RangeError):
            raise
        except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
            raise self._errors(exc) from None

    def _open(self, offset: int, ckpt: Checkpoint | None) -> Body:
        if isinstance(self.store, FsspecStore):
            handle = self.store.fs.open(
                self.store.full_path(self.name),
                "rb",
                block_size=S3_READ_BYTES,
                cache_type="readahead",
            )
            details = getattr(handle, "details", None) or self.store.fs.info(
                self.store.full_path(self.name)
            )
            etag = details.get("ETag") or details.get("etag")
            if not etag:
                # The Hub has no ETag in its listing but a content hash (LFS sha256 / git blob
                # id): the store's fingerprint, so a resume can tell the same object from another.
                etag = self.store.stat(self.name).fingerprint
            version = details.get("VersionId")
            total = int(details["size"])
            last_modified = None
        else:
            info = self.store.stat(self.name)
            handle = self.store.open(self.name)
            etag, version, total = info.etag or info.fingerprint, info.version_id, info.size
            last_modified = None if info.last_modified is None else repr(info.last_modified)
        why = ""
        start = offset
        if offset > 0 and (
            ckpt is None
            or _changed(ckpt, etag, last_modified, total)
            or not (etag or last_modified)
        ):
            why = "object changed since the checkpoint"
            start = 0
        if start > total:
            handle.close()
            raise RangeError(f"{self.url}: resume offset {start} past the object's {total} bytes", total)
        handle.seek(start)
        source = self

        def reader(view: memoryview) -> int:
            try:
                return handle.readinto(view)
            except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
                raise source._errors(exc) from None

        return Body(start, total, etag, last_modified, version, reader, handle.close, why)

    def close(self) -> None:
        return None


def split_object_url(url: str) -> tuple[str, str]:
    """(the URL of an object's folder, the object's name), as :func:`feedline.io.open_object`
    splits it: shards of one folder share a store (and its connections)."""
    if "://" in url:
        scheme, rest = url.split("://", 1)
        parent, _, name = rest.rstrip("/").rpartition("/")
        if not parent or not name:
            raise DownloadError(f"{redact_text(url)}: not the URL of an object")
        return f"{scheme}://{parent}", name
    path = url.removeprefix("file://")
    parent, _, name = path.rpartition("/")
    return parent or ".", name


def source_for(store: Store, name: str) -> Source:
    """The download source for object ``name`` of an open ``store`` (which stays the caller's)."""
    if isinstance(store, HttpStore):
        return HttpSource(store, name)
    return StoreSource(store, name)


def open_source(url: str, storage_options: dict[str, Any] | None = None) -> Source:
    """The download source for one object URL (http(s)://, s3://, hf://, memory://, file:// or a
    local path); ``storage_options`` go to its store (credentials, endpoint)."""
    try:
        store, name = open_object(url, **(storage_options or {}))
    except StoreError as exc:
        raise DownloadError(str(exc)) from None
    return source_for(store, name)
