"""feedline.text: curated documents into training: ``feedline tokenize`` and ``TokenDataset``.

Names are imported on first use, so ``import feedline.text`` loads neither torch nor tokenizers.
"""

from __future__ import annotations

from feedline.lazy import lazy_exports

_EXPORTS = {
    "TokenDataset": "feedline.text.dataset",
    "TokenSource": "feedline.text.dataset",
    "TokenCorpus": "feedline.text.corpus",
    "document_mask": "feedline.text.boundaries",
    "flat_cu_seqlens": "feedline.text.boundaries",
    "load_tokenizer": "feedline.text.tokenizer",
    "TextTokenizer": "feedline.text.tokenizer",
    "TokenizeJob": "feedline.text.shard",
    "run_tokenize": "feedline.text.tokenize",
    "parse_manifest": "feedline.text.manifest",
    "TextError": "feedline.text.errors",
    "TokenizerLoadError": "feedline.text.errors",
    "DocumentError": "feedline.text.errors",
    "TokenFileError": "feedline.text.errors",
    "TokenFileChangedError": "feedline.text.errors",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
