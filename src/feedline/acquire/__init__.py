"""feedline.acquire: verified resumable shard downloads, streaming JSONL decoding, manifests."""

from __future__ import annotations

from feedline.acquire.download import ShardResult, download_shard
from feedline.acquire.errors import CorpusFormatError, DownloadError
from feedline.acquire.jsonl import stream_jsonl
from feedline.acquire.manifest import ShardEntry, emit_manifest

#: The dedup engine loads numpy; it is imported on first use, not with every ``feedline`` command.
_LAZY = {"DedupConfig", "Deduplicator", "Verdict", "dedup_texts"}

__all__ = [
    "CorpusFormatError",
    "DedupConfig",
    "Deduplicator",
    "Verdict",
    "dedup_texts",
    "DownloadError",
    "ShardEntry",
    "ShardResult",
    "download_shard",
    "emit_manifest",
    "stream_jsonl",
]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        from feedline.acquire import dedup

        return getattr(dedup, name)
    raise AttributeError(f"module 'feedline.acquire' has no attribute {name!r}")
