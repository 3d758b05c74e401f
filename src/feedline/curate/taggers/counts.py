"""Length and count taggers. Names and signals mirror Dolma's ``length.py`` where they exist.

* ``char_length_v1`` — ``length``: characters (code points) in the text.
* ``char_length_strip_ws_v1`` — ``length_no_ws``: characters after stripping outer whitespace.
* ``char_length_with_paragraphs_v1`` — ``paragraph`` (characters per non-empty line) and
  ``document`` (characters in the text).
* ``bytes_length_v1`` — ``bytes``: UTF-8 bytes. ``doc_count_v1`` — ``docs``: always 1.
* ``whitespace_tokenizer_v1`` — ``length``: pieces when splitting on ``\\w+|[^\\w\\s]+`` (Dolma's
  definition: the number of such tokens plus one).
* ``whitespace_tokenizer_with_paragraphs_v1`` — the same per ``paragraph`` and summed per ``document``.
* ``counts_v1`` (feedline) — ``characters``, ``bytes``, ``words`` (whitespace-separated),
  ``lines`` and ``paragraphs`` (blank-line separated blocks) in one pass.
"""

from __future__ import annotations

import re

import regex

from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger
from feedline.curate.taggers.text import paragraphs

# The third-party ``regex`` module, as Dolma uses: its \w also covers combining marks.
_TOKEN = regex.compile(r"\w+|[^\w\s]+")
_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*\n")


def _token_pieces(text: str) -> int:
    return len(_TOKEN.split(text))


@add_tagger("char_length_v1")
class CharLength(BaseTagger):
    """Characters (code points) in the text."""

    def predict(self, doc: Document) -> DocResult:
        n = len(doc.text)
        return DocResult(doc, [Span(0, n, "length", n)])


@add_tagger("char_length_strip_ws_v1")
class CharLengthStripWs(BaseTagger):
    """Characters in the text once leading and trailing whitespace is stripped."""

    def predict(self, doc: Document) -> DocResult:
        return DocResult(doc, [Span(0, len(doc.text), "length_no_ws", len(doc.text.strip()))])


@add_tagger("char_length_with_paragraphs_v1")
class CharLengthWithParagraphs(BaseTagger):
    """Characters per non-empty line (``paragraph``) and in the whole text (``document``)."""

    def predict(self, doc: Document) -> DocResult:
        text = doc.text
        spans = [Span(s, e, "paragraph", e - s) for s, e in paragraphs(text)]
        spans.append(Span(0, len(text), "document", len(text)))
        return DocResult(doc, spans)


@add_tagger("bytes_length_v1")
class BytesLength(BaseTagger):
    """UTF-8 bytes of the text."""

    def predict(self, doc: Document) -> DocResult:
        return DocResult(doc, [Span(0, len(doc.text), "bytes", len(doc.text.encode("utf-8", "surrogatepass")))])


@add_tagger("doc_count_v1")
class DocCount(BaseTagger):
    """Always 1: summing it over a mix counts documents."""

    def predict(self, doc: Document) -> DocResult:
        return DocResult(doc, [Span(0, len(doc.text), "docs", 1)])


@add_tagger("whitespace_tokenizer_v1")
class WhitespaceTokenizer(BaseTagger):
    """Word-ish tokens (``\\w+`` runs and punctuation runs) plus one, as Dolma counts them."""

    def predict(self, doc: Document) -> DocResult:
        return DocResult(doc, [Span(0, len(doc.text), "length", _token_pieces(doc.text))])


@add_tagger("whitespace_tokenizer_with_paragraphs_v1")
class WhitespaceTokenizerWithParagraphs(BaseTagger):
    """Tokens per non-empty line (``paragraph``) and their sum (``document``)."""

    def predict(self, doc: Document) -> DocResult:
        text = doc.text
        spans = [Span(s, e, "paragraph", _token_pieces(text[s:e])) for s, e in paragraphs(text)]
        spans.append(Span(0, len(text), "document", sum(s.score for s in spans)))
        return DocResult(doc, spans)


@add_tagger("counts_v1")
class Counts(BaseTagger):
    """Characters, UTF-8 bytes, whitespace-separated words, lines and blank-line paragraphs."""

    def predict(self, doc: Document) -> DocResult:
        text = doc.text
        n = len(text)
        stripped = text.strip()
        lines = text.count("\n") + 1 if text else 0
        blocks = len(_BLANK_LINES.split(stripped)) if stripped else 0
        return DocResult(
            doc,
            [
                Span(0, n, "characters", n),
                Span(0, n, "bytes", len(text.encode("utf-8", "surrogatepass"))),
                Span(0, n, "words", len(text.split())),
                Span(0, n, "lines", lines),
                Span(0, n, "paragraphs", blocks),
            ],
        )
