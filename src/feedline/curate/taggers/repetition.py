"""Repetition taggers, Dolma's ``repetitions_v1`` / ``paragraph_repetitions_v1`` signals.

* ``repetition``: one span per run of a character group repeated at least 4 times
  (``(.+?)(\\s?\\1){3,}``), scored by how many times the group occurs in the run.
* ``doc_max_score_repetition``: the largest such count; ``doc_max_length_repetition``: the
  longest run in characters; ``doc_frac_repetition``: characters inside runs / all characters.

``paragraph_repetitions_v1`` looks for runs within each line only (faster on long documents).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from feedline.curate.model import DocResult, Document, Span
from feedline.curate.registry import add_tagger
from feedline.curate.taggers.base import BaseTagger
from feedline.curate.taggers.text import paragraphs

_REPEATS = re.compile(r"(.+?)(\s?\1){3,}")


def _runs(text: str, offset: int = 0) -> Iterator[Span]:
    for m in _REPEATS.finditer(text):
        yield Span(m.start() + offset, m.end() + offset, "repetition", m.group(0).count(m.group(1)))


@add_tagger("repetitions_v1")
class Repetitions(BaseTagger):
    """Runs of a repeated character group (4+ times) and document summaries."""

    def _find(self, text: str) -> list[Span]:
        return list(_runs(text))

    def predict(self, doc: Document) -> DocResult:
        spans = self._find(doc.text)
        n = len(doc.text)
        spans.extend(
            [
                Span(0, n, "doc_max_score_repetition", max((s.score for s in spans), default=0.0)),
                Span(0, n, "doc_max_length_repetition", max((s.end - s.start for s in spans), default=0)),
                Span(0, n, "doc_frac_repetition", sum(s.end - s.start for s in spans) / n if spans else 0.0),
            ]
        )
        return DocResult(doc, spans)


@add_tagger("paragraph_repetitions_v1")
class ParagraphRepetitions(Repetitions):
    """``repetitions_v1`` restricted to runs inside a single line."""

    def _find(self, text: str) -> list[Span]:
        spans: list[Span] = []
        for start, end in paragraphs(text, remove_empty=False):
            spans.extend(_runs(text[start:end], start))
        return spans
