"""feedline.io: the one remote-I/O layer every part reads and writes through.

Names load on first use: a purely local job (markers, atomic writes, locks) does not pay for the
HTTP client and fsspec/s3fs at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "AccessDeniedError": "feedline.io.errors",
    "LockTimeout": "feedline.io.errors",
    "NotFoundError": "feedline.io.errors",
    "ObjectChangedError": "feedline.io.errors",
    "RangeError": "feedline.io.errors",
    "StoreError": "feedline.io.errors",
    "IoError": "feedline.io.errors",
    "CorpusFormatError": "feedline.io.errors",
    "stream_jsonl": "feedline.io.jsonl",
    "TransientError": "feedline.io.errors",
    "StoreUnavailableError": "feedline.io.errors",
    "FsspecStore": "feedline.io.fsspec_store",
    "feedline_home": "feedline.io.home",
    "HttpRangeClient": "feedline.io.http.client",
    "HttpStore": "feedline.io.http.store",
    "HubStore": "feedline.io.hub",
    "AtomicFile": "feedline.io.atomic",
    "atomic_file": "feedline.io.upload",
    "atomic_write": "feedline.io.upload",
    "Body": "feedline.io.body",
    "ObjectValidator": "feedline.io.body",
    "process_lock": "feedline.io.locks",
    "open_object": "feedline.io.open",
    "open_store": "feedline.io.open",
    "split_object_url": "feedline.io.open",
    "RetryPolicy": "feedline.io.retry",
    "call_with_retries": "feedline.io.retry",
    "LocalStore": "feedline.io.store",
    "PinnedStore": "feedline.io.pinned",
    "ObjectInfo": "feedline.io.store",
    "Store": "feedline.io.store",
}

__all__ = [
    "AtomicFile",
    "Body",
    "CorpusFormatError",
    "IoError",
    "stream_jsonl",
    "AccessDeniedError",
    "FsspecStore",
    "HttpRangeClient",
    "HttpStore",
    "HubStore",
    "LocalStore",
    "LockTimeout",
    "NotFoundError",
    "ObjectChangedError",
    "ObjectInfo",
    "ObjectValidator",
    "PinnedStore",
    "RangeError",
    "RetryPolicy",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "TransientError",
    "atomic_file",
    "atomic_write",
    "call_with_retries",
    "feedline_home",
    "open_object",
    "open_store",
    "process_lock",
    "split_object_url",
]

if TYPE_CHECKING:
    from feedline.io.atomic import AtomicFile
    from feedline.io.body import Body, ObjectValidator
    from feedline.io.errors import (
        AccessDeniedError,
        CorpusFormatError,
        IoError,
        LockTimeout,
        NotFoundError,
        ObjectChangedError,
        RangeError,
        StoreError,
        StoreUnavailableError,
        TransientError,
    )
    from feedline.io.fsspec_store import FsspecStore
    from feedline.io.home import feedline_home
    from feedline.io.http.client import HttpRangeClient
    from feedline.io.http.store import HttpStore
    from feedline.io.hub import HubStore
    from feedline.io.jsonl import stream_jsonl
    from feedline.io.locks import process_lock
    from feedline.io.open import open_object, open_store, split_object_url
    from feedline.io.pinned import PinnedStore
    from feedline.io.retry import RetryPolicy, call_with_retries
    from feedline.io.store import LocalStore, ObjectInfo, Store
    from feedline.io.upload import atomic_file, atomic_write


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
