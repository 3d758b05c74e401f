"""feedline.acquire: verified resumable shard downloads, streaming JSONL decoding, manifests."""

from __future__ import annotations

from feedline.acquire.download import ShardResult, download_shard
from feedline.acquire.errors import CorpusFormatError, DownloadError
from feedline.acquire.jsonl import stream_jsonl
from feedline.acquire.manifest import ShardEntry, emit_manifest

__all__ = [
    "CorpusFormatError",
    "DownloadError",
    "ShardEntry",
    "ShardResult",
    "download_shard",
    "emit_manifest",
    "stream_jsonl",
]
