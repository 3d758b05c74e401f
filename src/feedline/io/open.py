"""``open_store(url)``: pick the store for a URL, so callers never branch on the scheme."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from feedline.io.errors import StoreError
from feedline.io.fsspec_store import FsspecStore
from feedline.io.http.client import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MIN_BYTES_PER_S,
    HttpRangeClient,
)
from feedline.io.http.store import HttpStore
from feedline.io.store import LocalStore, Store
from feedline.io.urls import check_url, url_name

#: Storage options feedline itself understands; everything else goes to the filesystem.
HTTP_OPTIONS = ("max_connections", "subranges", "timeout_s", "min_bytes_per_s", "headers")


def open_store(url: str, **storage_options: Any) -> Store:
    """A :class:`Store` rooted at ``url``.

    ``storage_options`` go to the backend (s3fs keys such as ``endpoint_url``, ``key``/``secret``,
    ``anon``; huggingface_hub's ``token``); for HTTP they are ``max_connections``, ``subranges``,
    ``timeout_s`` (each socket read, and the grace before ``min_bytes_per_s`` applies),
    ``min_bytes_per_s`` (slowest average a transfer may keep) and ``headers``. Credentials are taken, never echoed.
    """
    scheme = check_url(url)  # a malformed URL fails here, named, before any library sees it
    if scheme == "file":
        path = url[len("file://") :] if url.startswith("file://") else url
        if storage_options:
            raise StoreError(f"{url}: local folders take no storage options ({sorted(storage_options)})")
        return LocalStore(path or ".")
    if scheme in ("http", "https"):
        unknown = set(storage_options) - set(HTTP_OPTIONS)
        if unknown:
            raise StoreError(f"{urlsplit(url).netloc}: unknown HTTP storage options {sorted(unknown)}")
        client = HttpRangeClient(
            max_connections=int(storage_options.get("max_connections") or DEFAULT_MAX_CONNECTIONS),
            subranges=int(storage_options.get("subranges") or 1),
            timeout_s=float(storage_options.get("timeout_s") or 30.0),
            headers=storage_options.get("headers"),
            min_bytes_per_s=float(storage_options.get("min_bytes_per_s", DEFAULT_MIN_BYTES_PER_S)),
        )
        return HttpStore(url, client)
    if scheme == "hf" and url.split("://", 1)[1].startswith("datasets/"):
        from feedline.io.hub import open_hub_store

        return open_hub_store(url, storage_options)  # feedline's own client (io/hub.py)
    max_connections = int(storage_options.pop("max_connections", 16))
    root = url.split("://", 1)[1]
    if scheme == "s3":
        import s3fs

        fs = s3fs.S3FileSystem(**storage_options)
    elif scheme == "hf":
        from huggingface_hub import HfFileSystem

        fs = HfFileSystem(**storage_options)
    elif scheme in ("gs", "gcs"):
        fs, scheme = _gcs_filesystem(url, storage_options), "gs"
    elif scheme in ("az", "abfs", "abfss"):
        try:
            from adlfs import AzureBlobFileSystem
        except ImportError:
            raise StoreError(
                f"{url_name(url)}: {scheme}:// needs adlfs: pip install 'feedline[azure]'"
            ) from None
        fs = AzureBlobFileSystem(**storage_options)
    else:
        import fsspec

        try:
            fs = fsspec.filesystem(scheme, **storage_options)
        except (ImportError, ValueError, TypeError) as exc:
            raise StoreError(f"{url_name(url)}: no filesystem for {scheme}:// ({exc})") from None
    if scheme == "memory":
        root = "/" + root.lstrip("/")
    return FsspecStore(fs, root, protocol=scheme, max_connections=max_connections)


def _gcs_filesystem(url: str, storage_options: dict[str, Any]) -> Any:
    """gcsfs' filesystem for a ``gs://`` root.

    gcsfs' default class (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT``, on since 2026) first asks the
    storage-control API over gRPC with TLS what kind of bucket it is; an emulator or private
    endpoint never answers, so every open waits out a 60 s deadline and falls back. With an
    ``endpoint_url`` option or ``STORAGE_EMULATOR_HOST`` set, the plain JSON-API class is used,
    which never asks; on Google's own endpoint the default class stays (zonal buckets need it).
    """
    try:
        import gcsfs
        from gcsfs.core import GCSFileSystem
    except ImportError:
        raise StoreError(f"{url_name(url)}: gs:// needs gcsfs: pip install 'feedline[gcs]'") from None
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "") not in ("", "default")
    cls = GCSFileSystem if storage_options.get("endpoint_url") or emulator else gcsfs.GCSFileSystem
    return cls(**storage_options)


def split_object_url(url: str) -> tuple[str, str]:
    """(the URL of an object's folder, the object's name): objects of one folder share one store
    (and its connections), so a caller opening many of them keys its stores by the first."""
    check_url(url)
    if "://" in url:
        scheme, rest = url.split("://", 1)
        parent, _, name = rest.rstrip("/").rpartition("/")
        if not parent or not name:
            raise StoreError(f"{url_name(url)}: not the URL of an object")
        return f"{scheme}://{parent}", name
    path = url[len("file://") :] if url.startswith("file://") else url
    parent, _, name = path.rpartition("/")
    return parent or ".", name


def open_object(url: str, **storage_options: Any) -> tuple[Store, str]:
    """Split an object URL into (the store of its folder, the object's name); the store is the
    caller's to close."""
    folder, name = split_object_url(url)
    return open_store(folder, **storage_options), name
