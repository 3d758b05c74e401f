"""The tagger contract: ``predict(doc) -> DocResult``; grouping and rounding live here once."""

from __future__ import annotations

from typing import ClassVar

from feedline.curate.model import SCORE_PRECISION, DocResult, Document, Span


class BaseTagger:
    """Measures a document; never decides. Subclasses implement :meth:`predict`.

    ``defaults`` lists signal types that always appear (as an empty list when no span has them),
    so a mixer filter can rely on the key being present.
    """

    name: ClassVar[str] = ""
    needs_metadata: ClassVar[bool] = False
    defaults: ClassVar[tuple[str, ...]] = ()
    #: True for taggers that measure a document against the whole run (e.g. near duplicates):
    #: the processor calls ``prepare_corpus(sources, workdir)`` once before files are tagged;
    #: ``sources`` are the document files (paths or URLs) the run reads.
    needs_corpus_pass: ClassVar[bool] = False
    #: Options the tagger's constructor takes as keywords (name -> help), set per run with
    #: ``--tagger-option <tagger>.<name>=<value>``; values arrive as strings.
    options: ClassVar[dict[str, str]] = {}

    @classmethod
    def prepare_corpus(cls, sources: list[str], workdir: str) -> None:
        """A pass over every document of the run, before any file is tagged (default: none)."""

    @classmethod
    def preflight(cls, options: dict[str, str]) -> None:
        """Check what the tagger needs (a model file, an optional package) before any file is
        read, so a run fails in a second instead of in every worker (default: nothing)."""

    def begin_file(self, source: str, workdir: str | None) -> None:
        """Called before the first row of each file, with the document file it reads (default:
        nothing)."""

    def predict(self, doc: Document) -> DocResult:
        raise NotImplementedError

    def tag(self, doc: Document) -> dict[str, list[tuple[int, int, float]]]:
        """The document's spans grouped by signal type, scores rounded to 5 decimals."""
        return self.group(self.predict(doc).spans)

    def group(self, spans: list[Span]) -> dict[str, list[tuple[int, int, float]]]:
        """Spans by signal type in order of appearance (``defaults`` first), rounded: the one
        place an attribute row's values are shaped."""
        grouped: dict[str, list[tuple[int, int, float]]] = {t: [] for t in self.defaults}
        for span in spans:
            value = (span.start, span.end, round(float(span.score), SCORE_PRECISION))
            bucket = grouped.get(span.type)
            if bucket is None:
                grouped[span.type] = [value]
            else:
                bucket.append(value)
        return grouped

    def tag_batch(self, docs: list[Document]) -> list[dict[str, list[tuple[int, int, float]]]]:
        """:meth:`tag` for consecutive rows of a file, in order. Override to vectorise across
        documents; the result must equal ``[self.tag(d) for d in docs]``."""
        return [self.tag(doc) for doc in docs]


class BaseTaggerWithMetadata(BaseTagger):
    """A tagger that reads ``doc.metadata``; its presence switches the runtime's decoder."""

    needs_metadata: ClassVar[bool] = True


def whole(doc: Document, signal: str, score: float) -> Span:
    """A document-level span covering the whole text."""
    return Span(0, len(doc.text), signal, score)
