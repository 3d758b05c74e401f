"""Stores: one interface over local folders, HTTP, S3, memory and the Hugging Face Hub.

Every part of feedline reads through a :class:`Store` rooted at a dataset or corpus root, with
relative ``/``-separated paths. Rooting is what lets a LeRobot dataset or a corpus move between a
laptop folder, nginx and a bucket without code changes, and what lets us refuse a path that
escapes its root (a ``../`` in a path template) instead of reading whatever it points at.
"""

from __future__ import annotations

import io
import os
import posixpath
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from feedline.io.atomic import atomic_write
from feedline.io.body import Body, ObjectValidator, file_body, read_error
from feedline.io.errors import (
    AccessDeniedError,
    NotFoundError,
    ObjectChangedError,
    RangeError,
    StoreError,
    object_change,
)
from feedline.io.paths import root_escape


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows about one object.

    ``fingerprint`` is a stable identity of the object's *content* (S3 ETag + version id, an HTTP
    strong ETag, a Hub blob hash, a local inode + mtime + size), or ``None`` when the store has
    none; caches keyed by it are invalidated when an object is replaced, even by one of equal size.
    """

    path: str
    size: int
    etag: str | None = None
    version_id: str | None = None
    fingerprint: str | None = None
    last_modified: float | None = None


def _check_range(where: str, start: int, end: int) -> None:
    if start < 0 or end < start:
        raise RangeError(f"{where}: invalid byte range [{start}, {end})")


class Store(ABC):
    """A read-mostly view of objects below one root URL."""

    #: The root as given by the user, with credentials removed.
    root_url: str
    #: Most ranged reads in flight at once for :meth:`read_ranges`.
    max_connections: int = 16
    #: Whether this store's validators can miss a replacement: HTTP's Last-Modified and nginx's
    #: ETag (mtime seconds + size) stay equal for a same-size replacement within one second, so
    #: a resume on them should read back a sample of what it keeps.
    coarse_validators: bool = False

    def clean_path(self, path: str) -> str:
        """Normalise ``path`` and refuse one that leaves the root."""
        if path in ("", "."):
            return ""
        if path.startswith("/") or "\\" in path or "\x00" in path:
            raise StoreError(f"{self.root_url}: path {path!r} is not a relative path inside the root")
        escape = root_escape(path, "the store root")  # percent-decoded too: the server decodes first
        if escape is not None:
            raise StoreError(f"{self.root_url}: path {path!r} {escape}")
        clean = posixpath.normpath(path)
        return "" if clean == "." else clean

    def url(self, path: str = "") -> str:
        """The full URL of ``path`` (never with credentials)."""
        path = self.clean_path(path)
        return f"{self.root_url.rstrip('/')}/{path}" if path else self.root_url

    @abstractmethod
    def stat(self, path: str) -> ObjectInfo: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object below ``prefix`` (recursive), sorted by path."""

    @abstractmethod
    def read_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; ``end`` past the object's end is a :class:`RangeError`.

        A bytes-like object: ``bytes``, or the ``bytearray`` the HTTP store read into (saving a
        copy of every payload); callers must not rely on it being hashable or immutable."""

    @abstractmethod
    def open(self, path: str) -> IO[bytes]:
        """A seekable binary file object (pyarrow and PyAV read through it)."""

    def validator(self, path: str) -> ObjectValidator:
        """The identity a read of ``path`` would record now (:attr:`Body.validator`), without
        reading it: size, ETag (or the fingerprint), Last-Modified, version id."""
        try:
            info = self.stat(path)
        except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
            raise read_error(self.url(path), exc) from None
        return _stat_validator(info)

    def open_from(self, path: str, offset: int = 0, validator: ObjectValidator | None = None) -> Body:
        """``path`` opened for one streaming read from byte ``offset``, if it is still the object
        ``validator`` describes (the :attr:`Body.validator` of an earlier read); else the body
        starts at byte 0 and :attr:`Body.why_restart` says why. An offset past the end raises
        :class:`RangeError` with the size, so the caller can tell "already complete".

        This default compares the stat fingerprint (a local file's inode + mtime + size) taken
        as the file is opened; HTTP and fsspec stores pin the read on the wire instead.
        """
        url = self.url(path)
        try:
            seen = _stat_validator(self.stat(path))
            handle = self.open(path)
        except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
            raise read_error(url, exc) from None
        return file_body(url, handle, offset, validator, seen)

    def read_ranges(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Many ranges of one object, at most :attr:`max_connections` in flight."""
        if len(ranges) <= 1:
            return [self.read_range(path, s, e) for s, e in ranges]
        with ThreadPoolExecutor(max_workers=min(self.max_connections, len(ranges))) as pool:
            return list(pool.map(lambda r: self.read_range(path, r[0], r[1]), ranges))

    def read_ranges_pinned(
        self, path: str, ranges: list[tuple[int, int]], pin: ObjectInfo
    ) -> list[bytes]:
        """:meth:`read_ranges`, if ``path`` is still the object ``pin`` describes (its size, and
        its fingerprint where it has one); else :class:`~feedline.io.errors.ObjectChangedError`.

        Bytes read from a replaced object are never returned. This default reads, then compares
        a fresh stat (free on a local folder); the HTTP store pins the reads themselves
        (``If-Match`` and the answer's size), with no request beyond the ranges.
        """
        blobs = self.read_ranges(path, ranges)
        self.check_pin(path, pin)
        return blobs

    def check_pin(self, path: str, pin: ObjectInfo) -> None:
        """Raise :class:`~feedline.io.errors.ObjectChangedError` unless a fresh stat of
        ``path`` matches ``pin`` (size, and fingerprint when ``pin`` has one)."""
        try:
            now = self.stat(path)
        except NotFoundError:
            url = self.url(path)
            raise ObjectChangedError(f"{url}: changed (it is gone)", "it is gone", url) from None
        # A stat is the whole truth: a fingerprint that disappeared is a change too.
        changed_from(self.url(path), pin, now.size, now.fingerprint or "")

    def open_pinned(self, path: str, pin: ObjectInfo) -> IO[bytes]:
        """:meth:`open` for an object already stat'ed (``pin``): no second stat where the store
        needs one to open, and reads pinned to ``pin`` where the store can pin them."""
        return self.open(path)

    def read_bytes(self, path: str) -> bytes:
        return self.read_range(path, 0, self.stat(path).size)

    def prepare_reads(self, paths: list[str]) -> None:
        """Called with the files about to be read, before DataLoader workers fork: a store that
        looks something up per file before its first read (the Hub: where the file's bytes are)
        does it here, once, so every forked worker inherits it instead of asking again."""
        return None

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except NotFoundError:
            return False
        return True

    def local_path(self, path: str) -> str | None:
        """A filesystem path for ``path`` when the store is a local folder, else ``None``."""
        return None

    def write_bytes(self, path: str, data: bytes) -> None:
        raise StoreError(f"{self.url(path)}: this store is read-only")

    def close(self) -> None:
        """Release pooled connections; the store must not be used afterwards."""
        return None

    def set_outage_s(self, outage_s: float) -> None:
        """Ride out failures of this store for up to ``outage_s`` seconds (default 60; see
        :mod:`feedline.io.retry`). Local folders do not fail transiently: nothing to set."""
        return None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root_url!r})"


def changed_from(url: str, pin: ObjectInfo, size: int | None, fingerprint: str | None) -> None:
    """Raise :class:`~feedline.io.errors.ObjectChangedError` when an object seen with ``size``
    and ``fingerprint`` (``None``: not known) is not the one ``pin`` describes."""
    what = object_change(pin.size, pin.fingerprint, size, fingerprint)
    if what is not None:
        raise ObjectChangedError(f"{url}: changed ({what})", what, url)


def _stat_validator(info: ObjectInfo) -> ObjectValidator:
    """The validator of a store whose only identity is its stat: the fingerprint stands in for
    an ETag, and the mtime (as text, so it compares exactly) for Last-Modified."""
    return ObjectValidator(
        size=info.size,
        etag=info.etag or info.fingerprint,
        last_modified=None if info.last_modified is None else repr(info.last_modified),
        version_id=info.version_id,
    )


class LocalStore(Store):
    """A folder on this machine."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.root_url = str(self.root)

    def _full(self, path: str) -> Path:
        clean = self.clean_path(path)
        return self.root / clean if clean else self.root

    def url(self, path: str = "") -> str:
        return str(self._full(path))

    def local_path(self, path: str) -> str | None:
        return str(self._full(path))

    def _info(self, path: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(
            path=path,
            size=st.st_size,
            fingerprint=f"local:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}",
            last_modified=st.st_mtime,
        )

    def stat(self, path: str) -> ObjectInfo:
        full = self._full(path)
        try:
            st = full.stat()
        except FileNotFoundError:
            raise NotFoundError(f"{full}: no such file") from None
        except PermissionError:
            raise AccessDeniedError(f"{full}: permission denied") from None
        if not full.is_file():
            raise NotFoundError(f"{full}: not a file")
        return self._info(self.clean_path(path), st)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        base = self._full(prefix)
        if base.is_file():
            return [self.stat(prefix)]
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                full = Path(dirpath) / name
                rel = full.relative_to(self.root).as_posix()
                out.append(self._info(rel, full.stat()))
        return sorted(out, key=lambda info: info.path)

    def read_range(self, path: str, start: int, end: int) -> bytes:
        full = self._full(path)
        _check_range(str(full), start, end)
        try:
            with open(full, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if end > size:
                    raise RangeError(f"{full}: range end {end} past file size {size}")
                return os.pread(handle.fileno(), end - start, start) if end > start else b""
        except FileNotFoundError:
            raise NotFoundError(f"{full}: no such file") from None
        except PermissionError:
            raise AccessDeniedError(f"{full}: permission denied") from None

    def read_bytes(self, path: str) -> bytes:
        full = self._full(path)
        try:
            return full.read_bytes()
        except FileNotFoundError:
            raise NotFoundError(f"{full}: no such file") from None

    def open(self, path: str) -> IO[bytes]:
        full = self._full(path)
        try:
            return open(full, "rb")
        except FileNotFoundError:
            raise NotFoundError(f"{full}: no such file") from None

    def write_bytes(self, path: str, data: bytes) -> None:
        with atomic_write(self._full(path)) as handle:
            handle.write(data)


class RangedFile(io.RawIOBase):
    """A seekable read-only file over ranged reads, for libraries that want a file object."""

    def __init__(self, store: Store, path: str, size: int, pin: ObjectInfo | None = None) -> None:
        super().__init__()
        self._store, self._path, self._size, self._pos = store, path, size, 0
        self._pin = pin  # reads pinned to this object (Store.read_ranges_pinned)
        self.name = store.url(path)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def readinto(self, buffer: Any) -> int:
        end = min(self._size, self._pos + len(buffer))
        if end <= self._pos:
            return 0
        if self._pin is None:
            data = self._store.read_range(self._path, self._pos, end)
        else:
            (data,) = self._store.read_ranges_pinned(self._path, [(self._pos, end)], self._pin)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)
