"""The resume checkpoint of one shard download: ``<dest>.partial.json``.

The checkpoint is a promise about bytes on disk: "the first ``verified_bytes`` bytes of the part
file hash to ``sha256_prefix`` and came from the object identified by ``etag``/``last_modified``".
It is only ever written after those bytes are fsynced, and atomically, so a ``kill -9`` leaves
either the previous promise or the new one. On start the promise is *checked*, never trusted:
the prefix is re-hashed (Python's sha256 state cannot be saved, and re-hashing at ~1.7 GB/s is
cheap next to re-downloading).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from feedline.io import ObjectValidator, atomic_write

log = logging.getLogger(__name__)

CHECKPOINT_SCHEMA = 1
_HASH_BLOCK = 4 << 20


@dataclass
class Checkpoint:
    """What ``<dest>.partial.json`` holds (the URL without credentials or query string)."""

    url: str
    expected_size: int | None
    verified_bytes: int
    sha256_prefix: str
    etag: str | None = None
    last_modified: str | None = None
    version_id: str | None = None
    fetched_at: float | None = None  # epoch seconds when byte 0 of these bytes was requested
    schema: int = CHECKPOINT_SCHEMA
    updated_at: str = ""

    @property
    def has_validator(self) -> bool:
        """Resuming is only safe when the server can tell us the object is still the same one."""
        return bool(self.etag or self.last_modified)

    @property
    def validator(self) -> ObjectValidator:
        """The identity of the object these bytes came from, as the store's resume takes it."""
        return ObjectValidator(self.expected_size, self.etag, self.last_modified, self.version_id)

    def save(self, path: Path, *, durable: bool = True) -> None:
        """Replace the checkpoint atomically; ``durable`` also fsyncs it (and its folder).

        Without ``durable`` the rename is still atomic for other processes; only an OS crash can
        lose it, and the re-hash on start makes a lost or stale checkpoint harmless. Skipping the
        fsync matters on ext4 and XFS, where fsyncing even this small file commits the journal and
        flushes the shard's pending writes with it. A process killed mid-save leaves a temp file
        beside the checkpoint; the next download of the shard removes it.
        """
        self.updated_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with atomic_write(path, "w", durable=durable, encoding="utf-8") as handle:
            json.dump(asdict(self), handle, sort_keys=True)

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        """The checkpoint at ``path``; ``None`` when missing or unreadable (then we start over)."""
        try:
            raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable checkpoint (%s); starting over", path, exc)
            return None
        if not isinstance(raw, dict):
            log.warning("%s: checkpoint is JSON %s, not an object; starting over", path, type(raw).__name__)
            return None
        try:
            if raw.get("schema") != CHECKPOINT_SCHEMA:
                raise ValueError(f"schema {raw.get('schema')!r}")
            ckpt = cls(
                url=str(raw["url"]),
                expected_size=None if raw["expected_size"] is None else int(raw["expected_size"]),
                verified_bytes=int(raw["verified_bytes"]),
                sha256_prefix=str(raw["sha256_prefix"]),
                etag=_optional_str(raw.get("etag")),
                last_modified=_optional_str(raw.get("last_modified")),
                version_id=_optional_str(raw.get("version_id")),
                fetched_at=None if raw.get("fetched_at") is None else float(raw["fetched_at"]),
                updated_at=str(raw.get("updated_at", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("%s: malformed checkpoint (%s); starting over", path, exc)
            return None
        if ckpt.verified_bytes < 0:
            log.warning("%s: negative verified_bytes; starting over", path)
            return None
        return ckpt


def _optional_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"expected a string or null, got {type(value).__name__}")


def hash_prefix(path: Path, length: int, buffer: bytearray) -> hashlib._Hash | None:
    """sha256 state over the first ``length`` bytes of ``path``; ``None`` if the file is shorter.

    Reads through the caller's reusable ``buffer`` so re-hashing a large prefix allocates nothing.
    """
    hasher = hashlib.sha256()
    view = memoryview(buffer)
    remaining = length
    try:
        with open(path, "rb", buffering=0) as handle:
            while remaining > 0:
                want = min(remaining, len(view))
                got = handle.readinto(view[:want])
                if not got:
                    return None
                hasher.update(view[:got])
                remaining -= got
    except FileNotFoundError:
        return None
    return hasher


def remove_quietly(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
