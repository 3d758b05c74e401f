"""Language identification with CLD2 (``pycld2``: the model is compiled into the wheel, so
nothing is downloaded at run time). Names and signals mirror Dolma's ``cld2_*`` taggers.

* ``cld2_en_doc_v2`` — ``en``: CLD2's percentage of English / 100 when the guess is reliable
  (else 0), and ``not_en`` = 1 - ``en``, for the whole document.
* ``cld2_en_paragraph_v2`` — the same per non-empty line.
* ``cld2_en_paragraph_with_doc_score_v2`` — plus ``doc_en`` (character-weighted mean of the
  paragraph ``en`` scores) and ``doc_not_en``.
* ``cld2_doc_v1`` (feedline) — one span per language CLD2 reports for the document, the signal
  being the ISO code (``en``, ``fr``, ...) and the score its percentage / 100; ``reliable`` is 1
  when CLD2 deems the guess reliable.
"""

from __future__ import annotations

import re

import pycld2

from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger
from feedline.curate.taggers.text import paragraphs

# CLD2 rejects control characters and lone surrogates; Dolma strips \p{Cc}\p{Cs} on failure.
_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]+")


def detect(text: str) -> tuple[bool, list[tuple[str, str, int]]]:
    """CLD2's ``(reliable, [(name, code, percent), ...])``, sanitising input CLD2 rejects."""
    for candidate in (text, _BAD_CHARS.sub("", text)):
        try:
            reliable, _, details = pycld2.detect(candidate)
            return bool(reliable), [(d[0], d[1], int(d[2])) for d in details]
        except (pycld2.error, UnicodeEncodeError):
            continue
    return False, []


def english_score(text: str) -> float:
    reliable, details = detect(text)
    if not reliable:
        return 0.0
    return max([pct for name, _, pct in details if name == "ENGLISH"] or [0]) / 100.0


@add_tagger("cld2_en_doc_v2")
class Cld2EnglishDocument(BaseTagger):
    """Probability-like English score of the whole document (``en`` / ``not_en``)."""

    def predict(self, doc: Document) -> DocResult:
        score = english_score(doc.text)
        n = len(doc.text)
        return DocResult(doc, [Span(0, n, "en", score), Span(0, n, "not_en", 1.0 - score)])


@add_tagger("cld2_en_paragraph_v2")
class Cld2EnglishParagraph(BaseTagger):
    """English score per non-empty line (``en`` / ``not_en``)."""

    def predict(self, doc: Document) -> DocResult:
        spans: list[Span] = []
        for start, end in paragraphs(doc.text):
            score = english_score(doc.text[start:end])
            spans.append(Span(start, end, "en", score))
            spans.append(Span(start, end, "not_en", 1.0 - score))
        return DocResult(doc, spans)


@add_tagger("cld2_en_paragraph_with_doc_score_v2")
class Cld2EnglishParagraphWithDocScore(Cld2EnglishParagraph):
    """Per-line English scores plus their character-weighted document mean."""

    def predict(self, doc: Document) -> DocResult:
        result = super().predict(doc)
        n = len(doc.text)
        if n:
            doc_en = sum((s.end - s.start) * s.score for s in result.spans if s.type == "en") / n
            doc_not_en = 1 - doc_en
        else:
            doc_en = doc_not_en = 0.0
        result.spans.append(Span(0, n, "doc_en", doc_en))
        result.spans.append(Span(0, n, "doc_not_en", doc_not_en))
        return result


@add_tagger("cld2_doc_v1")
class Cld2Languages(BaseTagger):
    """Every language CLD2 finds in the document, as ``<iso code>: percent / 100``."""

    def predict(self, doc: Document) -> DocResult:
        reliable, details = detect(doc.text)
        n = len(doc.text)
        spans = [Span(0, n, code, pct / 100.0) for _, code, pct in details if code != "un" and pct > 0]
        spans.append(Span(0, n, "reliable", 1.0 if reliable else 0.0))
        return DocResult(doc, spans)
