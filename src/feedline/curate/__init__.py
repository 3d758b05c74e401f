"""feedline.curate: Dolma-style documents/attributes toolkit (taggers, resumable runner, mixer).

Names are imported on first use so ``import feedline.curate`` (and every ``feedline`` command)
stays cheap.
"""

from __future__ import annotations

from feedline.lazy import lazy_exports

_EXPORTS = {
    "Document": "feedline.curate.model",
    "DocumentWithMetadata": "feedline.curate.model",
    "Span": "feedline.curate.model",
    "DocResult": "feedline.curate.model",
    "BaseTagger": "feedline.curate.taggers.base",
    "BaseTaggerWithMetadata": "feedline.curate.taggers.base",
    "add_tagger": "feedline.curate.registry",
    "get_tagger": "feedline.curate.registry",
    "list_taggers": "feedline.curate.registry",
    "import_tagger_modules": "feedline.curate.registry",
    "TagJob": "feedline.curate.runtime",
    "FileTagger": "feedline.curate.runtime",
    "run_tag": "feedline.curate.processor",
    "RunReport": "feedline.curate.processor",
    "load_config": "feedline.curate.mixconfig",
    "parse_config": "feedline.curate.mixconfig",
    "run_mix": "feedline.curate.mixer",
    "JsonPath": "feedline.curate.jsonpath",
    "CurateError": "feedline.curate.errors",
    "RetryableFailure": "feedline.curate.errors",
    "AlignmentError": "feedline.curate.errors",
}

__all__ = [
    "AlignmentError",
    "BaseTagger",
    "BaseTaggerWithMetadata",
    "CurateError",
    "DocResult",
    "Document",
    "DocumentWithMetadata",
    "FileTagger",
    "JsonPath",
    "RetryableFailure",
    "RunReport",
    "Span",
    "TagJob",
    "add_tagger",
    "get_tagger",
    "import_tagger_modules",
    "list_taggers",
    "load_config",
    "parse_config",
    "run_mix",
    "run_tag",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
