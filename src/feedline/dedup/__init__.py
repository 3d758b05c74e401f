"""feedline.dedup: exact + MinHash/LSH near-duplicate detection, shared by acquire and curate.

``minhash`` (seeded signatures) -> ``lsh`` (banding, candidate index) -> ``engine`` (verdicts per
document) -> ``cli`` (``feedline dedup``). Names load on first use (numpy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from feedline.lazy import lazy_exports

_EXPORTS = {
    "DedupConfig": "feedline.dedup.engine",
    "Deduplicator": "feedline.dedup.engine",
    "Verdict": "feedline.dedup.engine",
    "dedup_texts": "feedline.dedup.engine",
    "DedupError": "feedline.dedup.errors",
}

__all__ = [
    "DedupConfig",
    "DedupError",
    "Deduplicator",
    "Verdict",
    "dedup_texts",
]

if TYPE_CHECKING:
    from feedline.dedup.engine import DedupConfig, Deduplicator, Verdict, dedup_texts
    from feedline.dedup.errors import DedupError

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
