"""fastText language identification with Dolma's ``ft_lang_id_*`` names, signals and spans.

Dolma downloads ``lid.176.bin`` when the tagger is created; feedline never downloads at run time,
so the model is a local file named by the tagger option ``model``
(``--tagger-option ft_lang_id_en_doc_v2.model=PATH``) or by ``$FEEDLINE_FASTTEXT_LID_MODEL``.
The binding is the optional extra ``feedline[fasttext]``. Any fastText supervised model with
``__label__<lang>`` labels works (the tests train a tiny one).

Exactly as Dolma computes them:

* the text of a slice is lower-cased, ``\\n`` replaced by a space, stripped, then classified with
  ``k=-1`` (every label);
* ``*_en_*_v2``: ``en`` = the probability of ``__label__en`` (0 when absent), ``not_en`` = 1 - en;
* ``*_doc_*``: one slice, the whole document; ``*_paragraph_*``: each non-empty line with its
  newline (Dolma's ``split_paragraphs``);
* ``*_with_doc_score_v2``: plus ``doc_en`` = sum(len(paragraph) x en) / len(text) and
  ``doc_not_en`` = 1 - doc_en (both 0 for an empty text);
* ``ft_lang_id_doc_v1`` / ``ft_lang_id_paragraph_v1``: one span per label, signal the label
  without ``__label__``, highest probability first.

Rows are classified a batch at a time (one ``predict`` call over every slice of the batch), which
gives the same probabilities as one call per slice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from feedline.curate.errors import CurateError
from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger
from feedline.curate.taggers.text import paragraphs

#: Environment variable naming the model file when the tagger option ``model`` is not given.
MODEL_ENV = "FEEDLINE_FASTTEXT_LID_MODEL"
LABEL_PREFIX = "__label__"
HOW_TO_GET = (
    "download lid.176.bin (fastText's language-identification model, "
    "https://fasttext.cc/docs/en/language-identification.html) and pass "
    "--tagger-option {name}.model=PATH or set " + MODEL_ENV
)

_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


def load_model(path: str, tagger: str) -> Any:
    """The fastText model at ``path``, loaded once per process (lid.176.bin is 126 MB; every
    ``ft_lang_id_*`` tagger of a job shares it)."""
    with _MODELS_LOCK:
        model = _MODELS.get(path)
        if model is not None:
            return model
        try:
            from fasttext.FastText import _FastText
        except ImportError:
            raise CurateError(
                f"tagger {tagger!r} needs the fastText binding: pip install 'feedline[fasttext]'"
            ) from None
        if not os.path.isfile(path):
            raise CurateError(f"{path}: no such fastText model file for tagger {tagger!r}; "
                              + HOW_TO_GET.format(name=tagger))
        try:
            # the private class, as Dolma does: fasttext.load_model prints a warning per load
            model = _FastText(model_path=path)
        except ValueError as exc:
            raise CurateError(f"{path}: not a fastText model ({exc})") from None
        _MODELS[path] = model
        return model


def prepare(text: str) -> str:
    """What the classifier sees of a slice: Dolma's lower-case, newline-free, stripped text."""
    return text.lower().replace("\n", " ").strip()


class FastTextLanguageTagger(BaseTagger):
    """Base of the ``ft_lang_id_*`` taggers: slices by ``mode``, one batched predict call."""

    options: ClassVar[dict[str, str]] = {
        "model": f"path of the fastText model (lid.176.bin); default ${MODEL_ENV}",
    }
    #: ``document``: the whole text is one slice; ``paragraph``: each non-empty line.
    mode: ClassVar[str] = "document"

    def __init__(self, model: str | None = None) -> None:
        self.model_path = self.model_file(model)
        self.classifier = load_model(self.model_path, self.name)

    @classmethod
    def model_file(cls, model: str | None) -> str:
        """The option, else the environment variable; neither is a one-line error saying how
        to get the model."""
        path = model or os.environ.get(MODEL_ENV)
        if not path:
            raise CurateError(f"tagger {cls.name!r} needs a fastText language-ID model: "
                              + HOW_TO_GET.format(name=cls.name))
        return path

    @classmethod
    def preflight(cls, options: dict[str, str]) -> None:
        path = cls.model_file(options.get("model"))
        try:
            import fasttext  # noqa: F401
        except ImportError:
            raise CurateError(
                f"tagger {cls.name!r} needs the fastText binding: pip install 'feedline[fasttext]'"
            ) from None
        if not os.path.isfile(path):
            raise CurateError(f"{path}: no such fastText model file for tagger {cls.name!r}; "
                              + HOW_TO_GET.format(name=cls.name))

    def slices(self, text: str) -> list[tuple[int, int]]:
        if self.mode == "paragraph":
            return paragraphs(text)
        return [(0, len(text))]

    def spans_for(self, start: int, end: int, labels: Sequence[str], probs: Sequence[float]) -> list[Span]:
        raise NotImplementedError

    def finish(self, doc: Document, spans: list[Span]) -> list[Span]:
        """Per-document spans added after the slices' (default: none)."""
        return spans

    def predict(self, doc: Document) -> DocResult:
        return self._predict_many([doc])[0]

    def _predict_many(self, docs: list[Document]) -> list[DocResult]:
        per_doc = [self.slices(doc.text) for doc in docs]
        texts = [prepare(doc.text[s:e]) for doc, cuts in zip(docs, per_doc, strict=True) for s, e in cuts]
        try:
            labels, probs = self.classifier.predict(texts, k=-1) if texts else ([], [])
        except TypeError:
            # a lone surrogate (JSON can escape one) cannot cross into fastText as UTF-8, where
            # Dolma's tagger crashes; it is classified as '?' instead (offsets are unaffected)
            texts = [t.encode("utf-8", "replace").decode("utf-8") for t in texts]
            labels, probs = self.classifier.predict(texts, k=-1)
        results = []
        at = 0
        for doc, cuts in zip(docs, per_doc, strict=True):
            spans: list[Span] = []
            for start, end in cuts:
                spans.extend(self.spans_for(start, end, labels[at], [float(p) for p in probs[at]]))
                at += 1
            results.append(DocResult(doc, self.finish(doc, spans)))
        return results

    def tag_batch(self, docs: list[Document]) -> list[dict[str, list[tuple[int, int, float]]]]:
        return [self.group(result.spans) for result in self._predict_many(docs)]


class _EnglishTagger(FastTextLanguageTagger):
    def spans_for(self, start: int, end: int, labels: Sequence[str], probs: Sequence[float]) -> list[Span]:
        score = 0.0
        for label, prob in zip(labels, probs, strict=True):
            if label == f"{LABEL_PREFIX}en":
                score = prob
                break
        return [Span(start, end, "en", score), Span(start, end, "not_en", 1.0 - score)]


class _AllLanguagesTagger(FastTextLanguageTagger):
    def spans_for(self, start: int, end: int, labels: Sequence[str], probs: Sequence[float]) -> list[Span]:
        ranked = sorted(zip(labels, probs, strict=True), key=lambda pair: pair[1], reverse=True)
        return [Span(start, end, label.replace(LABEL_PREFIX, ""), prob) for label, prob in ranked]


@add_tagger("ft_lang_id_en_doc_v2")
class FastTextEnglishDocument(_EnglishTagger):
    """fastText English probability of the whole document (``en`` / ``not_en``), as Dolma."""

    mode = "document"


@add_tagger("ft_lang_id_en_paragraph_v2")
class FastTextEnglishParagraph(_EnglishTagger):
    """fastText English probability per non-empty line (``en`` / ``not_en``), as Dolma."""

    mode = "paragraph"


@add_tagger("ft_lang_id_en_paragraph_with_doc_score_v2")
class FastTextEnglishParagraphWithDocScore(_EnglishTagger):
    """Per-line fastText English scores plus their length-weighted document mean (``doc_en``)."""

    mode = "paragraph"

    def finish(self, doc: Document, spans: list[Span]) -> list[Span]:
        n = len(doc.text)
        if n:
            doc_en = sum((s.end - s.start) * s.score for s in spans if s.type == "en") / n
            doc_not_en = 1.0 - doc_en
        else:
            doc_en = doc_not_en = 0.0
        spans.append(Span(0, n, "doc_en", doc_en))
        spans.append(Span(0, n, "doc_not_en", doc_not_en))
        return spans


@add_tagger("ft_lang_id_doc_v1")
class FastTextLanguagesDocument(_AllLanguagesTagger):
    """fastText probability of every language for the whole document (one signal per label)."""

    mode = "document"


@add_tagger("ft_lang_id_paragraph_v1")
class FastTextLanguagesParagraph(_AllLanguagesTagger):
    """fastText probability of every language per non-empty line (one signal per label)."""

    mode = "paragraph"
