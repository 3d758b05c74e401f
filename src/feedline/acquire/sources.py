"""Download sources: the object a shard download reads, opened from any byte offset.

"Source" means one thing in feedline: where bytes are read from. Here it is one object of an open
store, and the protocol work is the store's: :meth:`feedline.io.Store.open_from` reads "from byte
N, but only if it is still the object this validator describes" (HTTP ``Range`` + ``If-Range``,
S3 reads pinned to the opened ETag, a local fingerprint) and starts at byte 0, saying why, when
it could not. What a download adds lives here: the checkpoint is the validator, and I/O errors
are sorted into "retry" (:class:`TransientError`), "decide" (:class:`RangeError`: a 416 may mean
"already complete") and "fail with a :class:`DownloadError` that says what to do".

A run downloads many shards of a few folders: :class:`FolderStores` opens one store per folder
for all of them (one connection pool per server) and closes them at the end.
"""

from __future__ import annotations

import threading
from typing import Any

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.errors import DownloadError
from feedline.errors import FeedlineError
from feedline.io import (
    Body,
    ObjectValidator,
    RangeError,
    Store,
    StoreError,
    TransientError,
    open_store,
    split_object_url,
)


def _download_error(exc: StoreError) -> FeedlineError:
    """Transient and range errors stay (the downloader retries or decides); the rest fail."""
    if isinstance(exc, TransientError | RangeError):
        return exc
    return DownloadError(str(exc))


class Source:
    """Object ``name`` of ``store``: what one download reads. ``url`` is its URL without
    credentials (the checkpoint records it). The store is the caller's unless ``owned``."""

    def __init__(self, store: Store, name: str, *, owned: bool = False) -> None:
        self.store = store
        self.name = name
        self.url = store.url(name)
        self.owned = owned

    @property
    def coarse_validators(self) -> bool:
        """Whether a matching validator can still hide a replacement (see Store)."""
        return self.store.coarse_validators

    def stat(self) -> ObjectValidator:
        """Size and validators, without reading the body."""
        try:
            return self.store.validator(self.name)
        except StoreError as exc:
            raise _download_error(exc) from None

    def open(self, offset: int, ckpt: Checkpoint | None) -> Body:
        """The object from ``offset`` if it is still the object ``ckpt`` describes, else from 0
        (``Body.why_restart`` says why); an offset past the end raises ``RangeError``."""
        try:
            return self.store.open_from(self.name, offset, None if ckpt is None else ckpt.validator)
        except StoreError as exc:
            raise _download_error(exc) from None

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Bytes of the object as the store has it now (the pre-resume prefix check)."""
        return self.store.read_ranges(self.name, ranges)

    def close(self) -> None:
        """Close the store when this source opened it; a shared one stays with its owner."""
        if self.owned:
            self.store.close()


def open_source(url: str, storage_options: dict[str, Any] | None = None) -> Source:
    """The download source for one object URL (http(s)://, s3://, hf://, memory://, file:// or a
    local path), with a store of its own that :meth:`Source.close` closes; ``storage_options``
    go to the store (credentials, endpoint)."""
    try:
        folder, name = split_object_url(url)
        return Source(open_store(folder, **(storage_options or {})), name, owned=True)
    except StoreError as exc:
        raise DownloadError(str(exc)) from None


class FolderStores:
    """One open store per folder, shared by every shard of a run (and its threads), closed on
    exit: shards of one server share one bounded connection pool instead of a pool each."""

    def __init__(self, storage_options: dict[str, Any] | None = None) -> None:
        self.storage_options = dict(storage_options or {})
        self._stores: dict[str, Store] = {}
        self._lock = threading.Lock()

    def source(self, url: str) -> Source:
        """The source of object ``url``, on its folder's store (opened on first use)."""
        try:
            folder, name = split_object_url(url)
            with self._lock:
                store = self._stores.get(folder)
                if store is None:
                    store = self._stores[folder] = open_store(folder, **self.storage_options)
        except StoreError as exc:
            raise DownloadError(str(exc)) from None
        return Source(store, name)

    def close(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()

    def __enter__(self) -> FolderStores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
