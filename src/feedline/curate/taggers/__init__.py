"""Built-in taggers, one module per family; importing this package registers them all."""

from __future__ import annotations

from feedline.curate.taggers import c4, counts, gopher, language, minhash, pii, random, repetition  # noqa: F401
from feedline.curate.taggers.base import BaseTagger, BaseTaggerWithMetadata

__all__ = ["BaseTagger", "BaseTaggerWithMetadata"]
