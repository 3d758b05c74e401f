"""PII regex taggers (email, phone, IP): spans per match and document scores.

Names and signals mirror Dolma's ``pii.py``:

* ``pii_regex_v1`` / ``pii_regex_v2`` — spans ``EMAIL_ADDRESS``, ``PHONE_NUMBER``, ``IP_ADDRESS``
  after Dolma's post-processing (an email needs a ``.`` in its domain; a phone or IP match is
  dropped when ``isbn``, ``doi`` or ``#`` is within 100 characters; a phone match is dropped when
  the document contains a URL), plus ``doc``: matches per whitespace-separated word (-1 for a
  document without words; Dolma's ``v1`` fails on those, which is all its ``v2`` changed).
* ``pii_regex_with_counts_v2`` — the same plus ``doc_count``: the number of matches.
* ``pii_regex_with_counts_fast_v2`` — Dolma's per-paragraph variant: ``doc_count`` and
  ``doc_frac`` (fraction of characters inside matches).

Differences on purpose: ``doc_frac`` is the fraction of characters inside matches (Dolma's
adds the whole-text ``doc_count`` span to the sum, so its value is 1 + this). Dolma's URL pattern is a non-raw string whose ``\\b`` is a backspace
character, so its "contains a URL" rule practically never fires; feedline's URL pattern uses a
real word boundary, so phone numbers in documents with URLs are dropped as Dolma intended.
Each regex only runs when the text contains a character the pattern needs (``@``, a digit),
which gives identical matches at a fraction of the cost.
"""

from __future__ import annotations

import re

from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger
from feedline.curate.taggers.text import paragraphs

EMAIL, PHONE, IP = "EMAIL_ADDRESS", "PHONE_NUMBER", "IP_ADDRESS"
WINDOW = 100
EMAIL_REGEX = re.compile(r"[.\s@,?!;:)(]*([^\s@]+@[^\s@,?!;:)(]+?)[.\s@,?!;:)(]?[\s\n\r]")
PHONE_REGEX = re.compile(r"\s+\(?(\d{3})\)?[-\. ]*(\d{3})[-. ]?(\d{4})")
IP_REGEX = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)")
URL_REGEX = re.compile(
    r"(?i)\b((?:https?://|www\d{0,3}[.]|[a-z0-9.\-]+[.][a-z]{2,4}/)(?:[^\s()<>]+|\(([^\s()<>]+|"
    r"(\([^\s()<>]+\)))*\))+(?:\(([^\s()<>]+|(\([^\s()<>]+\)))*\)|[^\s`!()\[\]{};:'\".,<>?«»“”‘’]))"
)
_DIGIT = re.compile(r"\d")
_DOT_THEN_CHAR = re.compile(r"\.\S")


def _raw_matches(text: str) -> list[Span]:
    spans: list[Span] = []
    if "@" in text:
        spans.extend(Span(*m.span(), EMAIL) for m in EMAIL_REGEX.finditer(text))
    if _DIGIT.search(text):
        spans.extend(Span(*m.span(), PHONE) for m in PHONE_REGEX.finditer(text))
        if "." in text:
            spans.extend(Span(*m.span(), IP) for m in IP_REGEX.finditer(text))
    return spans


def _postprocess(text: str, spans: list[Span]) -> list[Span]:
    kept: list[Span] = []
    has_url: bool | None = None
    for span in spans:
        mention = text[span.start : span.end]
        if span.type == EMAIL:
            addressee, _, domain = mention.partition("@")
            if addressee.strip() != "(" and "." in domain:
                kept.append(span)
            continue
        context = span.mention(text, WINDOW)
        if "isbn" in context or "doi" in context or "#" in context:
            continue
        if span.type == PHONE:
            if has_url is None:
                has_url = URL_REGEX.search(text) is not None
            if has_url:
                continue
        kept.append(span)
    return kept


@add_tagger("pii_regex_v1")
class PiiRegex(BaseTagger):
    """Email, phone and IP matches after Dolma's false-positive rules; ``doc``: matches per word."""

    def _score(self, text: str, spans: list[Span]) -> float:
        words = len(text.split())
        return len(spans) / words if words else -1.0  # Dolma's v1 raises ZeroDivisionError here

    def predict(self, doc: Document) -> DocResult:
        spans = _postprocess(doc.text, _raw_matches(doc.text))
        spans.append(Span(0, len(doc.text), "doc", self._score(doc.text, spans)))
        return DocResult(doc, spans)


@add_tagger("pii_regex_v2")
class PiiRegexV2(PiiRegex):
    """``pii_regex_v1`` under Dolma's v2 name (Dolma's v2 only fixed the empty-document score)."""


@add_tagger("pii_regex_with_counts_v2")
class PiiRegexWithCounts(PiiRegexV2):
    """``pii_regex_v2`` plus ``doc_count``, the number of matches."""

    def predict(self, doc: Document) -> DocResult:
        result = super().predict(doc)
        count = sum(1 for s in result.spans if s.type != "doc")
        result.spans.append(Span(0, len(doc.text), "doc_count", count))
        return result


@add_tagger("pii_regex_with_counts_fast_v2")
class PiiRegexFast(BaseTagger):
    """Per-paragraph matching; ``doc_count`` (matches) and ``doc_frac`` (characters in matches)."""

    def predict(self, doc: Document) -> DocResult:
        text = doc.text
        spans: list[Span] = []
        if text.count("?") <= 10_000:
            for start, end in paragraphs(text):
                para = text[start:end]
                if "@" in para:
                    for m in EMAIL_REGEX.finditer(para):
                        addressee, _, domain = m.group(1).partition("@")
                        if addressee.strip() != "(" and "." in domain:
                            spans.append(Span(m.start() + start, m.end() + start, EMAIL))
                if _DIGIT.search(para):
                    spans.extend(Span(m.start() + start, m.end() + start, PHONE) for m in PHONE_REGEX.finditer(para))
                if _DOT_THEN_CHAR.search(para):
                    for m in IP_REGEX.finditer(para):
                        if URL_REGEX.search(m.group(0)) is None:
                            spans.append(Span(m.start() + start, m.end() + start, IP))
        n = len(text)
        # Dolma sums after appending the whole-text doc_count span, so its doc_frac is 1 + this.
        frac = sum(s.end - s.start for s in spans) / n if n else -1.0
        spans.append(Span(0, n, "doc_count", float(len(spans))))
        spans.append(Span(0, n, "doc_frac", frac))
        return DocResult(doc, spans)
