"""feedline.acquire: verified resumable shard downloads, streaming JSONL decoding, manifests.

Names load on first use (the dedup engine loads numpy), so ``feedline download --help`` stays
cheap. ``except AcquireError`` catches every error of this part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "ShardResult": "feedline.acquire.download",
    "download_shard": "feedline.acquire.download",
    "AcquireError": "feedline.acquire.errors",
    "DownloadError": "feedline.acquire.errors",
    "CorpusFormatError": "feedline.io.errors",
    "stream_jsonl": "feedline.io.jsonl",
    "ShardEntry": "feedline.acquire.manifest",
    "emit_manifest": "feedline.acquire.manifest",
    "DedupConfig": "feedline.dedup.engine",
    "Deduplicator": "feedline.dedup.engine",
    "Verdict": "feedline.dedup.engine",
    "dedup_texts": "feedline.dedup.engine",
}

__all__ = [
    "AcquireError",
    "CorpusFormatError",
    "DedupConfig",
    "Deduplicator",
    "DownloadError",
    "ShardEntry",
    "ShardResult",
    "Verdict",
    "dedup_texts",
    "download_shard",
    "emit_manifest",
    "stream_jsonl",
]

if TYPE_CHECKING:
    from feedline.acquire.download import ShardResult, download_shard
    from feedline.acquire.errors import AcquireError, DownloadError
    from feedline.acquire.manifest import ShardEntry, emit_manifest
    from feedline.dedup.engine import DedupConfig, Deduplicator, Verdict, dedup_texts
    from feedline.io.errors import CorpusFormatError
    from feedline.io.jsonl import stream_jsonl

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
