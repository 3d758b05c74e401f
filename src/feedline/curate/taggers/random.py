"""``random_number_v1``: a uniform score in [0, 1) per document, for tests and sampling.

Dolma draws from one generator per process, so the numbers depend on which worker got which
file; here the number is a hash of (seed, document id), so reruns, resumes and any executor give
the same value for the same document.
"""

from __future__ import annotations

import hashlib
import os

from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger


def uniform(seed: int, key: str) -> float:
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8, key=str(seed).encode()).digest()
    return (int.from_bytes(digest, "big") >> 11) / float(1 << 53)


@add_tagger("random_number_v1")
class RandomNumber(BaseTagger):
    """``random``: a reproducible uniform number from the document id (seed: ``FEEDLINE_RANDOM_SEED``, 1)."""

    def __init__(self) -> None:
        self.seed = int(os.environ.get("FEEDLINE_RANDOM_SEED", "1"))

    def predict(self, doc: Document) -> DocResult:
        return DocResult(doc, [Span(0, len(doc.text), "random", uniform(self.seed, doc.id))])
