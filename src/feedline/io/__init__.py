"""feedline.io: the one remote-I/O layer every part reads and writes through."""

from __future__ import annotations

from feedline.io.errors import (
    AccessDeniedError,
    LockTimeout,
    NotFoundError,
    RangeError,
    StoreError,
    TransientError,
)
from feedline.io.fsspec_store import FsspecStore
from feedline.io.home import feedline_home
from feedline.io.http import HttpRangeClient
from feedline.io.http_store import HttpStore
from feedline.io.locks import atomic_write, process_lock
from feedline.io.open import open_object, open_store
from feedline.io.retry import RetryPolicy, call_with_retries
from feedline.io.store import LocalStore, ObjectInfo, Store

__all__ = [
    "AccessDeniedError",
    "FsspecStore",
    "HttpRangeClient",
    "HttpStore",
    "LocalStore",
    "LockTimeout",
    "NotFoundError",
    "ObjectInfo",
    "RangeError",
    "RetryPolicy",
    "Store",
    "StoreError",
    "TransientError",
    "atomic_write",
    "call_with_retries",
    "feedline_home",
    "open_object",
    "open_store",
    "process_lock",
]
