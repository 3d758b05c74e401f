"""Built-in taggers, one module per family.

Families are imported on demand by :func:`feedline.curate.registry.get_tagger` (see
``BUILTIN_TAGGERS``), so importing this package costs nothing; ``list_taggers`` imports them all.
"""

from __future__ import annotations

from feedline.curate.taggers.base import BaseTagger, BaseTaggerWithMetadata

__all__ = ["BaseTagger", "BaseTaggerWithMetadata"]
