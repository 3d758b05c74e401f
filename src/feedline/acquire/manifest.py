"""The run manifest: the one file downstream tools read to trust a downloaded corpus.

One JSON per run lists every shard with its URL (never credentials), local path, sha256, size,
document count and dedup counts, plus the parameters that produced them. It is written
atomically and *last*: if it exists, every file it names was complete and verified when it was
written (paths are relative to the manifest's folder, so the folder can be moved). Per-document
verdicts go to ``verdicts.jsonl`` beside it, one ``{"id", "shard", "verdict"}`` object a line,
written before the manifest, which records its sha256.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from feedline import __version__
from feedline.io import atomic_write

MANIFEST_SCHEMA = 1
VERDICTS_NAME = "verdicts.jsonl"


@dataclass
class ShardEntry:
    """One shard of the run, as the manifest records it."""

    url: str
    path: str
    sha256: str
    bytes: int
    documents: int | None = None
    kept: int | None = None
    exact_dup: int | None = None
    near_dup: int | None = None
    bad_lines: int = 0
    kept_path: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    reused_bytes: int = 0
    fetched_bytes: int = 0
    restarts: int = 0
    resume: dict[str, Any] | None = None  # what a resume relied on (see ShardResult.resume)
    extra: dict[str, Any] = field(default_factory=dict)


class VerdictWriter:
    """Streams ``verdicts.jsonl`` (one line per document) without holding verdicts in memory."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self._hash = hashlib.sha256()
        self.count = 0

    def write(self, doc_id: str, shard: str, verdict: str) -> None:
        line = orjson.dumps({"id": doc_id, "shard": shard, "verdict": verdict}) + b"\n"
        self._handle.write(line)
        self._hash.update(line)
        self.count += 1

    def write_lines(self, lines: bytes) -> None:
        """Verdict lines already encoded (a batch from :mod:`feedline.dedup.shards`, whose lines
        are the ones :meth:`write` makes)."""
        self._handle.write(lines)
        self._hash.update(lines)
        self.count += lines.count(b"\n")

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


@contextmanager
def verdict_writer(folder: str | os.PathLike[str]) -> Iterator[VerdictWriter]:
    """``verdicts.jsonl`` in ``folder``, installed atomically when the block ends without error."""
    with atomic_write(Path(folder) / VERDICTS_NAME, "wb") as handle:
        yield VerdictWriter(handle)


def _relative(path: str | os.PathLike[str] | None, base: Path) -> str | None:
    if path is None:
        return None
    full = Path(path).absolute()
    try:
        return full.relative_to(base).as_posix()
    except ValueError:
        return os.path.relpath(full, base)


def emit_manifest(
    manifest_path: str | os.PathLike[str],
    shards: Iterable[ShardEntry],
    *,
    parameters: dict[str, Any],
    verdicts: VerdictWriter | Iterable[tuple[str, str, str]] | None = None,
    started_at: float | None = None,
    failed: list[dict[str, str]] | None = None,
) -> Path:
    """Write the run's manifest (and, from ``(id, shard, verdict)`` triples, ``verdicts.jsonl``).

    Call it when everything else is on disk: the manifest is the run's commit record.
    ``verdicts`` may also be a :class:`VerdictWriter` whose file was already written.
    ``failed`` lists the shards that could not be downloaded (``{"url", "error"}``): the
    manifest then says ``"complete": false`` and covers only the shards it lists.
    """
    target = Path(manifest_path).absolute()
    base = target.parent
    if verdicts is not None and not isinstance(verdicts, VerdictWriter):
        with verdict_writer(base) as writer:
            for doc_id, shard, verdict in verdicts:
                writer.write(doc_id, shard, verdict)
        verdicts = writer
    entries = []
    totals = {
        "shards": 0,
        "bytes": 0,
        "fetched_bytes": 0,
        "reused_bytes": 0,
        "documents": 0,
        "kept": 0,
        "exact_dup": 0,
        "near_dup": 0,
        "bad_lines": 0,
    }
    for shard in shards:
        entry = asdict(shard)
        entry["path"] = _relative(shard.path, base)
        entry["kept_path"] = _relative(shard.kept_path, base)
        if not entry["extra"]:
            del entry["extra"]
        entries.append(entry)
        totals["shards"] += 1
        totals["bytes"] += shard.bytes
        totals["fetched_bytes"] += shard.fetched_bytes
        totals["reused_bytes"] += shard.reused_bytes
        for key in ("documents", "kept", "exact_dup", "near_dup", "bad_lines"):
            totals[key] += getattr(shard, key) or 0
    now = time.time()
    document = {
        "schema": MANIFEST_SCHEMA,
        "generator": f"feedline {__version__}",
        "created_at": _iso(now),
        "started_at": _iso(started_at) if started_at else None,
        "parameters": parameters,
        "totals": totals,
        "complete": not failed,
        "failed": list(failed or []),
        "shards": entries,
        "verdicts": None
        if verdicts is None
        else {
            "path": VERDICTS_NAME,
            "documents": verdicts.count,
            "sha256": verdicts.sha256,
        },
    }
    with atomic_write(target, "wb") as handle:
        handle.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    return target


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest as a dict (for tools and tests)."""
    return orjson.loads(Path(path).read_bytes())
