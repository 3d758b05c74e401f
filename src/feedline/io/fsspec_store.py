"""Roots on fsspec filesystems: S3 (s3fs), memory, the Hugging Face Hub, and others.

fsspec/s3fs do the protocol work (signing, credentials from the environment, async parallel
reads); this module adds what feedline needs on top: rooting, fingerprints, a strict range
contract, and errors sorted into not-found / denied / transient so the retry policy can act.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import IO, Any, TypeVar

from feedline.io.body import Body, ObjectValidator, file_body, read_error
from feedline.io.errors import (
    AccessDeniedError,
    NotFoundError,
    ObjectChangedError,
    RangeError,
    StoreError,
    TransientError,
    is_transport_error,
)
from feedline.io.retry import RetryPolicy, call_with_retries, default_retry
from feedline.io.store import ObjectInfo, Store, _check_range

T = TypeVar("T")

try:  # botocore is present whenever s3fs is; other protocols do not need it
    from botocore.exceptions import BotoCoreError as _BotoCoreError
except ImportError:  # pragma: no cover
    _BotoCoreError = OSError  # type: ignore[misc,assignment]


#: The schemes adlfs serves (Azure Blob Storage and ADLS Gen2); one fingerprint for all three.
AZURE_PROTOCOLS = ("az", "abfs", "abfss")

#: Filesystems whose ``info`` is served from a cached listing of the folder.
FRESH_STAT_PROTOCOLS = ("gs", *AZURE_PROTOCOLS)

OPEN_BLOCK_SIZE = 256 << 10
#: Read-ahead block of a streaming read (:meth:`FsspecStore.open_from`): one GET per 8 MiB, not
#: one per 256 KiB buffer of the caller.
STREAM_BLOCK_SIZE = 8 << 20


#: What an S3-style error text says when the service, not the request, failed: 5xx, throttling
#: (429, SlowDown, the throttling codes of S3-compatible stores), a request timeout.
_TRANSIENT_WORDS = (
    "500", "502", "503", "504", "429", "SlowDown", "reduce your request rate", "Throttl",
    "TooManyRequests", "RequestLimitExceeded", "ServiceUnavailable", "InternalError",
    "RequestTimeout",
)


#: Words in the name of a network library's error that mean the network failed (azure-core's
#: ``ServiceRequestError``: no connection; ``ServiceResponseError``: one cut mid-answer).
_NETWORK_WORDS = ("Connect", "Timeout", "Network", "Protocol", "ServiceRequest", "ServiceResponse")


def _service_failed(exc: BaseException) -> bool:
    """An S3 answer of 5xx or 429, or a throttling code, behind s3fs' translated error.

    s3fs turns botocore's ``ClientError`` into an ``OSError`` whose text is the service's message
    alone ("We encountered an internal error.", "Please reduce your request rate."), keeping the
    answer as ``__cause__``: its status and code are what to go by.
    """
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    if not isinstance(response, dict):
        return False
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    code = str((response.get("Error") or {}).get("Code") or "")
    return (isinstance(status, int) and (status == 429 or status >= 500)) or any(
        word in code for word in _TRANSIENT_WORDS
    )


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status behind a gcsfs ``HttpError`` (``code``) or an azure-core
    ``HttpResponseError`` (``status_code``); ``None`` for any other error."""
    if not type(exc).__module__.startswith(("gcsfs", "azure")):
        return None
    status = getattr(exc, "status_code", None) or getattr(exc, "code", None)
    return status if isinstance(status, int) else None


def _one_retry_loop(fs: Any) -> None:
    """Leave retrying to feedline's policy, so its ``outage_s`` bounds the time in all.

    s3fs retries some errors itself (5 tries, 0.1-0.8 s apart: timeouts, SlowDown) and botocore
    retries again under each (legacy mode: 5 attempts, up to 8 s apart); both multiply with
    feedline's attempts. Both are set to a single try here, before the client is made (a user's
    ``config_kwargs["retries"]`` is kept).
    """
    if hasattr(fs, "retries"):
        fs.retries = 1
    config = getattr(fs, "config_kwargs", None)
    if isinstance(config, dict) and getattr(fs, "_s3", None) is None:
        config.setdefault("retries", {"max_attempts": 0})


def _no_azure_retries(fs: Any) -> None:
    """Azure Storage's own retry policy waits 15 s, then 18 s, then 24 s between its 3 retries of a
    5xx, under feedline's attempts; adlfs takes no setting for it, so the client's policy (the
    one object its pipeline and every container and blob client share) is set to no retries."""
    config = getattr(getattr(fs, "service_client", None), "_config", None)
    policy = getattr(config, "retry_policy", None)
    if policy is not None and hasattr(policy, "total_retries"):
        policy.total_retries = 0


def _mtime(info: dict[str, Any]) -> float | None:
    value = info.get("LastModified") or info.get("mtime") or info.get("created")
    if value is None:
        return None
    with contextlib.suppress(AttributeError, TypeError, ValueError):
        return float(value.timestamp()) if hasattr(value, "timestamp") else float(value)
    return None


class FsspecStore(Store):
    """Objects below ``root`` (a protocol-less path such as ``bucket/prefix``) on ``fs``."""

    def __init__(
        self,
        fs: Any,
        root: str,
        *,
        protocol: str,
        max_connections: int = 16,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.protocol = protocol
        self.root_url = f"{protocol}://{self.root}"
        self.max_connections = max_connections
        self.retry = retry or default_retry()  # None: the io default ($FEEDLINE_OUTAGE_S or 60 s)
        #: The outage clock's key and the name in its warnings: the bucket (or filesystem root).
        self.store_name = f"{protocol}://{self.root.lstrip('/').split('/')[0]}"
        if protocol == "s3":
            _one_retry_loop(fs)
        elif protocol in AZURE_PROTOCOLS:
            _no_azure_retries(fs)

    def set_outage_s(self, outage_s: float) -> None:
        self.retry = self.retry.with_outage(outage_s)

    def full_path(self, path: str) -> str:
        clean = self.clean_path(path)
        return f"{self.root}/{clean}" if clean else self.root

    def _rel(self, full: str) -> str:
        full = full.lstrip("/") if not self.root.startswith("/") else full
        return full[len(self.root) :].lstrip("/")

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        def once() -> T:
            try:
                return fn()
            except FileNotFoundError:
                raise NotFoundError(f"{what}: no such object") from None
            except PermissionError:
                raise AccessDeniedError(
                    f"{what}: access denied; check the credentials for {self.protocol}://"
                ) from None
            except (ConnectionError, TimeoutError, _BotoCoreError) as exc:
                if type(exc).__name__ == "OfflineModeIsEnabled":
                    raise StoreError(
                        f"{what}: HF_HUB_OFFLINE is set; unset it or read from a local root"
                    ) from None
                raise TransientError(f"{what}: {type(exc).__name__}") from None
            except OSError as exc:
                text = str(exc)
                if is_transport_error(exc):
                    raise TransientError(f"{what}: {type(exc).__name__}") from None
                if self.protocol == "gs" and text.startswith("Forbidden"):  # gcsfs' 403
                    raise AccessDeniedError(
                        f"{what}: access denied; check the credentials for gs://"
                    ) from None
                if "InvalidRange" in text or "416" in text or "not satisfiable" in text:
                    raise RangeError(f"{what}: requested range not satisfiable") from None
                if _service_failed(exc) or any(word in text for word in _TRANSIENT_WORDS):
                    raise TransientError(f"{what}: {text[:160]}") from None
                raise StoreError(f"{what}: {text[:200]}") from None
            except Exception as exc:
                status = _status_of(exc)
                if status == 404:
                    raise NotFoundError(f"{what}: no such object") from None
                if status in (401, 403):
                    raise AccessDeniedError(
                        f"{what}: access denied; check the credentials for {self.protocol}://"
                    ) from None
                if status == 416:
                    raise RangeError(f"{what}: requested range not satisfiable") from None
                if status is not None and (status in (408, 429) or status >= 500):
                    raise TransientError(f"{what}: HTTP {status}") from None
                # huggingface_hub (httpx) and aiohttp raise their own types for network failures.
                if not is_transport_error(exc):
                    raise
                name = type(exc).__name__
                if any(word in name for word in _NETWORK_WORDS):
                    raise TransientError(f"{what}: {name}") from None
                raise StoreError(f"{what}: {name}: {str(exc)[:200]}") from None

        return call_with_retries(once, policy=self.retry, what=what, store=self.store_name)

    def _info(self, rel: str, info: dict[str, Any]) -> ObjectInfo:
        etag = info.get("ETag") or info.get("etag")
        version = info.get("VersionId") or info.get("version_id")
        fingerprint: str | None = None
        if self.protocol == "s3" and etag:
            # ETag only: listings carry no version id, and stat and list must agree. A replaced
            # object gets a new ETag (a content hash), even at the same size.
            fingerprint = f"s3:{etag}"
        elif self.protocol == "hf":
            lfs = info.get("lfs") or {}
            blob = (lfs.get("sha256") if isinstance(lfs, dict) else None) or info.get("blob_id")
            if blob:
                fingerprint = f"hf:{self.root}/{rel}:{blob}"
        elif self.protocol == "gs" and (info.get("generation") or etag):
            # A generation is new with every write of the object, content or not; metadata edits
            # (metageneration) leave it, and the bytes, alone.
            version = info.get("generation")
            fingerprint = f"gs:{version}" if version else f"gs:{etag}"
        elif self.protocol in AZURE_PROTOCOLS and etag:
            # Azure gives every write of a blob a new ETag (and a version id where versioning is
            # on; listings carry it only then, so the ETag alone keeps stat and list agreeing).
            fingerprint = f"az:{etag}"
        elif etag:
            fingerprint = f"{self.protocol}:{etag}"
        return ObjectInfo(
            path=rel,
            size=int(info.get("size") or 0),
            etag=etag,
            version_id=version,
            fingerprint=fingerprint,
            last_modified=_mtime(info),
        )

    def stat(self, path: str) -> ObjectInfo:
        full = self.full_path(path)

        def info() -> dict[str, Any]:
            if self.protocol in FRESH_STAT_PROTOCOLS:
                # gcsfs and adlfs answer info() from the last listing: a pin check must not.
                with contextlib.suppress(AttributeError):
                    self.fs.invalidate_cache(full)
            return self.fs.info(full)

        info = self._call(self.url(path), info)
        if info.get("type") == "directory":
            raise NotFoundError(f"{self.url(path)}: is a directory, not an object")
        return self._info(self.clean_path(path), info)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        full = self.full_path(prefix)

        def find() -> dict[str, Any]:
            with contextlib.suppress(AttributeError):
                self.fs.invalidate_cache(full)  # a listing must be fresh to detect replacements
            return self.fs.find(full, detail=True)

        found = self._call(self.url(prefix), find)
        out = [
            self._info(self._rel(name), info)
            for name, info in found.items()
            if info.get("type", "file") != "directory"
        ]
        return sorted(out, key=lambda info: info.path)

    def read_range(self, path: str, start: int, end: int, **read: Any) -> bytes:
        where = self.url(path)
        _check_range(where, start, end)
        if end == start:
            return b""
        full = self.full_path(path)
        data = self._call(where, lambda: self.fs.cat_file(full, start=start, end=end, **read))
        if len(data) != end - start:
            raise RangeError(f"{where}: range [{start}, {end}) past the object's end")
        return bytes(data)

    def read_ranges(self, path: str, ranges: list[tuple[int, int]], **read: Any) -> list[bytes]:
        where = self.url(path)
        for start, end in ranges:
            _check_range(where, start, end)
        if read and (not hasattr(self.fs, "cat_ranges") or len(ranges) <= 1):
            return [self.read_range(path, s, e, **read) for s, e in ranges]
        if not hasattr(self.fs, "cat_ranges") or len(ranges) <= 1:
            return super().read_ranges(path, ranges)
        full = self.full_path(path)
        wanted = [(s, e) for s, e in ranges if e > s]

        def fetch() -> list[Any]:
            kwargs = {"batch_size": self.max_connections} if getattr(self.fs, "async_impl", False) else {}
            return self.fs.cat_ranges(
                [full] * len(wanted), [s for s, _ in wanted], [e for _, e in wanted],
                on_error="return", **kwargs, **read,
            )

        results = iter(self._call(where, fetch)) if wanted else iter(())
        out: list[bytes] = []
        for start, end in ranges:
            if end == start:
                out.append(b"")
                continue
            data = next(results)
            if isinstance(data, BaseException):
                # Re-run this one range alone so it gets the same error mapping and retries.
                data = self.read_range(path, start, end, **read)
            if len(data) != end - start:
                raise RangeError(f"{where}: range [{start}, {end}) past the object's end")
            out.append(bytes(data))
        return out

    def read_ranges_pinned(
        self, path: str, ranges: list[tuple[int, int]], pin: ObjectInfo
    ) -> list[bytes]:
        """On GCS the reads name the pinned generation (``generation=``): a replaced object's
        old generation is gone (a 404), so no stat is needed after the reads. Elsewhere: the
        reads, then a fresh stat compared with ``pin``."""
        if self.protocol != "gs" or not pin.version_id:
            return super().read_ranges_pinned(path, ranges, pin)
        try:
            blobs = self.read_ranges(path, ranges, generation=pin.version_id)
        except NotFoundError:
            url, what = self.url(path), f"generation {pin.version_id} is gone"
            raise ObjectChangedError(f"{url}: changed ({what})", what, url) from None
        if pin.size and any(end > pin.size for _, end in ranges):
            raise RangeError(f"{self.url(path)}: a range past the pinned size {pin.size}")
        return blobs

    def open(self, path: str) -> IO[bytes]:
        full = self.full_path(path)
        # Small read-ahead blocks: pyarrow and PyAV seek around; s3fs' default blocks are MBs.
        return self._call(
            self.url(path), lambda: self.fs.open(full, "rb", block_size=OPEN_BLOCK_SIZE)
        )

    def validator(self, path: str) -> ObjectValidator:
        """ETag (the fingerprint where there is none: a Hub content hash), version id, size."""
        try:
            info = self.stat(path)
        except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
            raise read_error(self.url(path), exc) from None
        return ObjectValidator(info.size, self._identity(info), None, info.version_id)

    def _identity(self, info: ObjectInfo) -> str | None:
        """What a validator records as the object's ETag: GCS' generation (its ETag also moves
        with metadata edits, and an emulator's is a content hash), else the ETag itself."""
        if self.protocol == "gs":
            return info.fingerprint
        return info.etag or info.fingerprint

    def open_from(self, path: str, offset: int = 0, validator: ObjectValidator | None = None) -> Body:
        """A streaming read pinned to the object seen at open: s3fs sends every ranged GET of
        the file with ``IfMatch`` on the ETag it opened, so a replacement mid-read fails the read
        (a transient error: the retry opens the new object and restarts) instead of mixing them."""
        url, full = self.url(path), self.full_path(path)
        try:
            handle = self.fs.open(full, "rb", block_size=STREAM_BLOCK_SIZE, cache_type="readahead")
        except Exception as exc:  # noqa: BLE001 - sorted into not-found / denied / transient
            raise read_error(url, exc) from None
        try:
            details = getattr(handle, "details", None) or self.fs.info(full)
            # The Hub has no ETag in its listing but a content hash (LFS sha256 / git blob id):
            # the store's fingerprint, so a resume can tell the same object from another.
            etag = (
                self._identity(self._info(self.clean_path(path), details))
                or details.get("ETag") or details.get("etag") or self.stat(path).fingerprint
            )
            seen = ObjectValidator(int(details["size"]), etag, None, details.get("VersionId"))
        except BaseException as exc:
            handle.close()
            if isinstance(exc, Exception):
                raise read_error(url, exc) from None
            raise
        return file_body(url, handle, offset, validator, seen)

    def write_bytes(self, path: str, data: bytes) -> None:
        """One PUT: object stores install a whole object or nothing."""
        full = self.full_path(path)
        self._call(self.url(path), lambda: self.fs.pipe_file(full, data))
