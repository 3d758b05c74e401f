"""C4-style rule measurements (Raffel et al. 2020), Dolma's ``c4_v1``/``c4_v2`` signal names.

* ``lines_with_no_ending_punctuation`` / ``lines_with_too_few_words`` (< 3 words): one span per
  offending line (score 1).
* ``has_javascript``, ``has_lorem_ipsum``, ``has_curly_brace``: a whole-document span when true.
* ``has_naughty_word``: a whole-document span when a line contains a block-listed word or phrase.
  feedline ships no block list; set ``FEEDLINE_C4_BLOCKLIST`` to a file with one entry per line
  (e.g. the LDNOOBW English list Dolma uses) — without one this signal is never emitted.
* ``line_count``: lines in the text. ``c4_v2`` is Dolma's faster variant: the flags come from
  substring checks over the whole lower-cased text and the per-line spans are interleaved.
"""

from __future__ import annotations

import os
from functools import lru_cache

from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger

MIN_WORDS_PER_LINE = 3
ENDING_PUNCTUATION = (".", "?", "!", '"')


@lru_cache(maxsize=4)
def _blocklist(path: str | None) -> tuple[frozenset[str], tuple[str, ...]]:
    if not path:
        return frozenset(), ()
    with open(path, encoding="utf-8") as handle:
        entries = [line.strip().lower() for line in handle if line.strip()]
    return frozenset(e for e in entries if " " not in e), tuple(e for e in entries if " " in e)


@add_tagger("c4_v1")
class C4(BaseTagger):
    """C4 heuristics: per-line punctuation/length spans and document flags."""

    def __init__(self) -> None:
        self.words, self.phrases = _blocklist(os.environ.get("FEEDLINE_C4_BLOCKLIST"))

    def predict(self, doc: Document) -> DocResult:
        text = doc.text
        n = len(text)
        no_punct: list[Span] = []
        few_words: list[Span] = []
        naughty = javascript = lorem = curly = False
        lines = text.split("\n")
        offset = 0
        last = len(lines) - 1
        for number, original in enumerate(lines):
            end = offset + len(original) + (1 if number < last else 0)
            line = original.lower().strip()
            if not line.endswith(ENDING_PUNCTUATION):
                no_punct.append(Span(offset, end, "lines_with_no_ending_punctuation"))
            words = line.split()
            if len(words) < MIN_WORDS_PER_LINE:
                few_words.append(Span(offset, end, "lines_with_too_few_words"))
            if not naughty and (self.words or self.phrases):
                naughty = any(w in self.words for w in words) or any(p in line for p in self.phrases)
            if not javascript and "javascript" in line:
                javascript = "javascript" in words
            if not lorem and "lorem ipsum" in line:
                lorem = True
            if not curly and "{" in line:
                curly = True
            offset = end
        spans = no_punct + few_words
        for flag, name in ((naughty, "has_naughty_word"), (javascript, "has_javascript"),
                           (lorem, "has_lorem_ipsum"), (curly, "has_curly_brace")):
            if flag:
                spans.append(Span(0, n, name))
        spans.append(Span(0, n, "line_count", len(lines)))
        return DocResult(doc, spans)


@add_tagger("c4_v2")
class C4Fast(C4):
    """Dolma's faster C4 variant: flags from whole-text substring checks, per-line spans interleaved."""

    def predict(self, doc: Document) -> DocResult:
        text = doc.text.lower()
        n = len(doc.text)
        spans: list[Span] = []
        if "{" in text:
            spans.append(Span(0, n, "has_curly_brace"))
        if "lorem ipsum" in text:
            spans.append(Span(0, n, "has_lorem_ipsum"))
        if "javascript" in text:
            spans.append(Span(0, n, "has_javascript"))
        if (self.words or self.phrases) and (
            any(w in self.words for w in text.split()) or any(p in text for p in self.phrases)
        ):
            spans.append(Span(0, n, "has_naughty_word"))
        start = count = 0
        for line in text.split("\n"):
            end = start + len(line)
            if end != len(text):
                end += 1
            line = line.strip()
            if not line.endswith(ENDING_PUNCTUATION):
                spans.append(Span(start, end, "lines_with_no_ending_punctuation"))
            if len(line.split()) < MIN_WORDS_PER_LINE:
                spans.append(Span(start, end, "lines_with_too_few_words"))
            count += 1
            start = end
        spans.append(Span(0, n, "line_count", count))
        return DocResult(doc, spans)
