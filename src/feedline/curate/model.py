"""The documents/attributes data model: rows are msgspec structs, spans are measurements.

A document row is never modified; a tagger produces :class:`Span` measurements that are written
as an attribute row ``{id, attributes: {"<experiment>__<tagger>__<signal>": [[start, end, score]]},
source}``, line-aligned with the document file. Offsets are code-point indices (Python ``str``
indices), as in Dolma, so Dolma's mixer and ours cut the same characters.

The rows' ``source`` field is Dolma's schema: the collection a document came from
(``"common-crawl"``), kept as is. Everywhere else in feedline a source is where bytes are read
from (a document file here, the remote object of a download in ``feedline.acquire``).
"""

from __future__ import annotations

from typing import Any

import msgspec

#: Scores are written rounded to this many decimals (Dolma's ``TAGGER_SCORE_PRECISION``).
SCORE_PRECISION = 5

#: Separator of the three parts of an attribute key.
KEY_SEPARATOR = "__"


class Document(msgspec.Struct, kw_only=True):
    """A document row without ``metadata``: the fast decoder every tagger gets by default.

    ``source`` is Dolma's field, the collection the document belongs to (see the module doc).
    """

    id: str
    text: str
    source: str | None = None
    added: str | None = None
    created: str | None = None
    version: str | None = None


class DocumentWithMetadata(Document, kw_only=True):
    """A document row including ``metadata``; decoded only when some tagger asks for it."""

    metadata: dict[str, Any] | None = None


class Span(msgspec.Struct):
    """``text[start:end]`` scored ``score`` on signal ``type`` by ``tagger`` in ``experiment``."""

    start: int
    end: int
    type: str
    score: float = 1.0
    experiment: str | None = None
    tagger: str | None = None

    def to_spec(self) -> tuple[str, tuple[int, int, float]]:
        """The attribute key and ``(start, end, score)`` value this span is written as."""
        if self.experiment is None or self.tagger is None:
            raise ValueError(f"span {self.type!r} needs an experiment and a tagger name to be written")
        key = f"{self.experiment}{KEY_SEPARATOR}{self.tagger}{KEY_SEPARATOR}{self.type}"
        return key, (self.start, self.end, float(self.score))

    @classmethod
    def from_spec(cls, key: str, value: tuple[int, int, float] | list[Any]) -> Span:
        """Parse a key written by :meth:`to_spec` (or a bare Dolma deduper key) and its value."""
        if KEY_SEPARATOR in key:
            experiment, tagger, signal = key.split(KEY_SEPARATOR, 2)
        else:  # Dolma's deduper writes bare names such as ``bff_duplicate_paragraph_spans``
            experiment = tagger = signal = key
        start, end, score = value
        return cls(int(start), int(end), signal, float(score), experiment, tagger)

    def mention(self, text: str, window: int = 0) -> str:
        """The spanned text with ``window`` characters of context each side."""
        return text[max(0, self.start - window) : self.end + window]


class DocResult(msgspec.Struct):
    """What a tagger returns: the document and its spans (measurements, never decisions)."""

    doc: Document
    spans: list[Span]


class AttributeRow(msgspec.Struct):
    """One line of an attribute file, in Dolma's ``OutputSpec`` field order (``source`` copied
    from the document row)."""

    id: str
    attributes: dict[str, list[tuple[int, int, float]]]
    source: str | None = None


class AttributeIdRow(msgspec.Struct):
    """Just the id of an attribute row: enough to check alignment without decoding spans."""

    id: str


def round_score(score: float) -> float:
    """A score as written: a float rounded to :data:`SCORE_PRECISION` decimals."""
    return round(float(score), SCORE_PRECISION)


DOCUMENT_DECODER = msgspec.json.Decoder(Document)
DOCUMENT_WITH_METADATA_DECODER = msgspec.json.Decoder(DocumentWithMetadata)
ATTRIBUTE_DECODER = msgspec.json.Decoder(AttributeRow)
ATTRIBUTE_ENCODER = msgspec.json.Encoder()


def document_decoder(with_metadata: bool) -> msgspec.json.Decoder:
    """The decoder for document rows: with ``metadata`` only when a tagger needs it."""
    return DOCUMENT_WITH_METADATA_DECODER if with_metadata else DOCUMENT_DECODER
