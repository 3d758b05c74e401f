"""Errors of the remote-I/O layer.

They separate what retrying can fix (:class:`TransientError`) from what it cannot (a missing
object, a denied request, a range past the end), so callers never loop on a 404.
"""

from __future__ import annotations

from feedline.errors import FeedlineError


class IoError(FeedlineError):
    """Root of the I/O layer's errors: catch it to handle any store, lock or file-format failure."""


class StoreError(IoError):
    """A store could not serve a request; the message names the URL and, if any, the status."""


class UrlError(StoreError):
    """A URL or path that names nothing feedline can open: an unsupported scheme, no host or
    bucket, a port that is not one, unparsable brackets. Raised before any request is made."""


class HomeError(IoError):
    """``$FEEDLINE_HOME`` (or its default) is not a folder feedline can write its caches into."""


class NotFoundError(StoreError):
    """The object does not exist (HTTP 404, missing key or file)."""


class AccessDeniedError(StoreError):
    """The store refused the credentials (HTTP 401/403); the message names the store, never secrets."""


class RangeError(StoreError):
    """A byte range is outside the object (HTTP 416, or ``end`` past the object size).

    ``total`` is the object's size when the server or store said it (a 416's
    ``Content-Range: bytes */size``), else ``None``: a resume refused at exactly ``total`` means
    the file was already complete.
    """

    def __init__(self, message: str, total: int | None = None) -> None:
        super().__init__(message)
        self.total = total

    def __reduce__(self) -> tuple[type[RangeError], tuple[str, int | None]]:
        return type(self), (str(self), self.total)


class ObjectChangedError(StoreError):
    """The object is no longer the one a read was pinned to (:meth:`Store.read_ranges_pinned`):
    its size or ETag differs, or it is gone. Not transient: the caller's view of it is stale.

    ``url`` names the object and ``what`` says what differs (``"size 100 -> 120"``, ``"same
    size, new ETag"``, ``"same size, new mtime"``, ``"it is gone"``), for a caller that words its own message.
    """

    def __init__(self, message: str, what: str = "", url: str = "") -> None:
        super().__init__(message)
        self.what = what
        self.url = url

    def __reduce__(self) -> tuple[type[ObjectChangedError], tuple[str, str, str]]:
        return type(self), (str(self), self.what, self.url)


def object_change(
    size: int, fingerprint: str | None, now_size: int | None, now_fingerprint: str | None
) -> str | None:
    """What differs between an object seen with ``size``/``fingerprint`` and one seen now
    (``None`` where a side is not known), in :class:`ObjectChangedError`'s ``what`` words;
    ``None`` when nothing known differs."""
    if now_size is not None and now_size != size:
        return f"size {size} -> {now_size}"
    if fingerprint is not None and now_fingerprint is not None and now_fingerprint != fingerprint:
        return f"same size, {_validator_change(fingerprint, now_fingerprint)}"
    return None


#: What each store's fingerprint is (``kind:value``; see ``Store.stat``), by its prefix.
_VALIDATORS = {"http": "ETag", "s3": "ETag", "az": "ETag", "hf": "blob hash"}


def _validator_change(old: str, new: str) -> str:
    """Which validator differs, in words that claim no more than the store said: a new mtime
    or inode is no proof of new bytes, and only an ETag is called one."""
    kind, _, old_value = old.partition(":")
    new_kind, _, new_value = new.partition(":")
    if kind != new_kind or not old_value:
        return "another fingerprint"
    if kind == "local":  # local:inode:mtime_ns:size
        old_parts, new_parts = old_value.split(":"), new_value.split(":")
        names = [name for name, a, b in zip(("inode", "mtime"), old_parts, new_parts, strict=False) if a != b]
        return "new " + " and ".join(names) if names else "another fingerprint"
    if kind == "gs":
        return "new generation" if old_value.isdigit() and new_value.isdigit() else "new ETag"
    return f"new {_VALIDATORS.get(kind, 'ETag')}"


class TransientError(StoreError):
    """A failure that a retry may fix: connection reset, timeout, 429 or 5xx.

    ``retry_after`` is the seconds a 429/503 asked the client to wait (``Retry-After``), if any:
    retrying sooner only earns another refusal.
    """

    retry_after: float | None = None


class StoreUnavailableError(TransientError):
    """A store kept failing transiently for longer than the retry policy's ``outage_s``.

    Still a :class:`TransientError` (a later run, or a caller that judges offline, may do better),
    but retrying it at once is pointless: calls on a store whose outage is over ``outage_s`` old
    give up on their first failure (see :mod:`feedline.io.retry`).
    """


class LockTimeout(IoError):
    """Another process held a lock for longer than the caller would wait."""


class CorpusFormatError(IoError):
    """A corpus file is malformed: a bad JSON line (with its number) or a truncated gzip/zstd stream."""


#: Libraries whose exceptions mean "the network or the remote service failed", not a bug here
#: (prefixes: huggingface_hub ships its own forks ``httpx2``/``httpcore2``).
TRANSPORT_MODULES = (
    "httpx", "httpcore", "requests", "aiohttp", "botocore", "huggingface_hub", "urllib3",
    "azure.core", "gcsfs",
)


def is_transport_error(exc: BaseException) -> bool:
    """Raised by a network library rather than by feedline or the caller's code."""
    return type(exc).__module__.startswith(TRANSPORT_MODULES)
