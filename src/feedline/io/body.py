"""Resumable reads: an object's identity (:class:`ObjectValidator`) and a body from an offset.

A resume may only join bytes of one object. So a store opens a read "from byte N, but only if it
is still the object this validator describes" (:meth:`feedline.io.Store.open_from`) and says
honestly when it could not: the :class:`Body` then starts at byte 0 and
:attr:`Body.why_restart` says why, and the caller starts over instead of splicing two objects.
Every store answers with the same two types, so a caller (the downloader) holds only its restart
policy and never a protocol detail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from feedline.io.errors import (
    AccessDeniedError,
    NotFoundError,
    RangeError,
    StoreError,
    TransientError,
    is_transport_error,
)
from feedline.io.http.headers import http_date_to_epoch, strong_etag
from feedline.io.redact import redact_text


@dataclass(frozen=True)
class ObjectValidator:
    """The identity of one version of an object, as a read saw it.

    ``etag`` is the server's ETag (HTTP, S3) or the store's fingerprint where it has no ETag (a
    local inode + mtime + size, a Hub blob hash); ``last_modified`` the HTTP date (or the local
    mtime as text); ``version_id`` the S3 version. Two validators describe different objects when
    any field both know differs (:meth:`differs`).
    """

    size: int | None
    etag: str | None = None
    last_modified: str | None = None
    version_id: str | None = None

    @property
    def usable(self) -> bool:
        """Whether a resume can be guarded at all: an object with neither validator cannot."""
        return bool(self.etag or self.last_modified)

    @property
    def strong_etag(self) -> str | None:
        """The ETag when it is strong: only a strong one guards ``If-Range`` (RFC 9110 13.1.5)."""
        return strong_etag(self.etag)

    @property
    def modified_epoch(self) -> float | None:
        """``last_modified`` as epoch seconds when it is an HTTP date, else ``None``."""
        return http_date_to_epoch(self.last_modified)

    def differs(self, seen: ObjectValidator) -> bool:
        """``seen`` is evidently another object than this one."""
        if self.etag and seen.etag and self.etag != seen.etag:
            return True
        if self.last_modified and seen.last_modified and self.last_modified != seen.last_modified:
            return True
        return self.size is not None and seen.size is not None and self.size != seen.size


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
    why_restart: str = ""  # set when start == 0 although a later offset was asked for
    pace: Any = None  # a minimum-throughput watch (HTTP), checked after every read
    received: int = 0
    failed: TransientError | None = None

    @property
    def validator(self) -> ObjectValidator:
        """The identity of the object this body reads: what a later resume passes back."""
        return ObjectValidator(self.total, self.etag, self.last_modified, self.version_id)

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
        except Exception as exc:
            # urllib3's and http.client's errors are told by their module: importing them here
            # would load the HTTP client for every local read.
            if not (isinstance(exc, OSError) or is_transport_error(exc) or _from_http_client(exc)):
                raise
            raise TransientError(
                f"connection broke mid-body: {type(exc).__name__}: {redact_text(str(exc))}"
            ) from None

    def close(self) -> None:
        self.closer()

    def with_reason(self, why: str) -> Body:
        self.why_restart = why
        return self


def _from_http_client(exc: BaseException) -> bool:
    return type(exc).__module__ == "http.client"


def restart_reason(offset: int, asked: ObjectValidator | None, seen: ObjectValidator) -> str:
    """Why a read asked to start at ``offset`` must start at 0 instead (``""``: it need not)."""
    if offset > 0 and (asked is None or asked.differs(seen) or not seen.usable):
        return "object changed since the previous read"
    return ""


def file_body(
    url: str, handle: IO[bytes], offset: int, asked: ObjectValidator | None, seen: ObjectValidator
) -> Body:
    """A body over a seekable file ``handle`` of the object ``seen``: from ``offset`` when it is
    still the object ``asked`` describes, else from 0. On failure ``handle`` is closed and the
    error is the I/O layer's (:func:`read_error`), so no store repeats that cleanup."""
    try:
        why = restart_reason(offset, asked, seen)
        start = 0 if why else offset
        if seen.size is not None and start > seen.size:
            raise RangeError(f"{url}: resume offset {start} past the object's {seen.size} bytes", seen.size)
        handle.seek(start)
    except BaseException as exc:
        handle.close()
        if isinstance(exc, Exception):
            raise read_error(url, exc) from None
        raise
    readinto: Callable[[memoryview], int] = handle.readinto  # type: ignore[attr-defined]

    def reader(view: memoryview) -> int:
        try:
            return readinto(view)
        except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
            raise read_error(url, exc) from None

    return Body(start, seen.size, seen.etag, seen.last_modified, seen.version_id, reader, handle.close, why)


def read_error(url: str, exc: BaseException) -> StoreError:
    """The I/O layer's error for a failure while opening or reading a body of ``url``.

    Anything a store did not sort itself is taken as transient: a streaming read that breaks in
    a library's own exception type is retried from the verified offset, not given up.
    """
    if isinstance(exc, FileNotFoundError | NotFoundError):
        return NotFoundError(f"{url}: no such object; check the URL")
    if isinstance(exc, PermissionError | AccessDeniedError):
        return AccessDeniedError(f"{url}: access denied; check the credentials for this store")
    if isinstance(exc, StoreError):
        return exc
    if type(exc).__name__ == "FileExpired":  # s3fs: the ETag pinned at open no longer matches
        return TransientError(f"{url}: object replaced while reading")
    return TransientError(f"{url}: {type(exc).__name__}: {redact_text(str(exc))[:200]}")
