"""feedline.io: the one remote-I/O layer every part reads and writes through.

Names load on first use: a purely local job (markers, atomic writes, locks) does not pay for the
HTTP client and fsspec/s3fs at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AccessDeniedError": "feedline.io.errors",
    "LockTimeout": "feedline.io.errors",
    "NotFoundError": "feedline.io.errors",
    "RangeError": "feedline.io.errors",
    "StoreError": "feedline.io.errors",
    "TransientError": "feedline.io.errors",
    "FsspecStore": "feedline.io.fsspec_store",
    "feedline_home": "feedline.io.home",
    "HttpRangeClient": "feedline.io.http",
    "HttpStore": "feedline.io.http_store",
    "atomic_write": "feedline.io.locks",
    "process_lock": "feedline.io.locks",
    "open_object": "feedline.io.open",
    "open_store": "feedline.io.open",
    "RetryPolicy": "feedline.io.retry",
    "call_with_retries": "feedline.io.retry",
    "LocalStore": "feedline.io.store",
    "ObjectInfo": "feedline.io.store",
    "Store": "feedline.io.store",
}

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

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'feedline.io' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
