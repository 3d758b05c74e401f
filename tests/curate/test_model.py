from __future__ import annotations

import gzip
import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedline.curate.model import (
    ATTRIBUTE_DECODER,
    Document,
    DocumentWithMetadata,
    Span,
    document_decoder,
)
from feedline.curate.registry import add_tagger
from feedline.curate.runtime import FileTagger, TagJob
from feedline.curate.taggers.base import BaseTagger, BaseTaggerWithMetadata

from .helpers import write_jsonl

names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda s: "__" not in s and not s.endswith("_"))
signals = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,12}", fullmatch=True)


@given(
    start=st.integers(0, 10**9),
    length=st.integers(0, 10**6),
    signal=signals,
    score=st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(10**6), 10**6)),
    experiment=names,
    tagger=names,
)
def test_span_spec_round_trip(start, length, signal, score, experiment, tagger):
    span = Span(start, start + length, signal, score, experiment, tagger)
    key, value = span.to_spec()
    assert key == f"{experiment}__{tagger}__{signal}"
    back = Span.from_spec(key, value)
    assert back == span
    assert isinstance(back.score, float)


def test_span_from_bare_dolma_dedupe_key():
    span = Span.from_spec("bff_duplicate_paragraph_spans", [3, 9, 1])
    assert (span.experiment, span.tagger, span.type, span.score) == (
        "bff_duplicate_paragraph_spans", "bff_duplicate_paragraph_spans", "bff_duplicate_paragraph_spans", 1.0)


def test_signal_with_double_underscore_stays_in_type():
    span = Span.from_spec("exp__tagger__a__b", [0, 1, 0.5])
    assert (span.experiment, span.tagger, span.type) == ("exp", "tagger", "a__b")


def test_to_spec_needs_names():
    with pytest.raises(ValueError):
        Span(0, 1, "x").to_spec()


def test_decoders_with_and_without_metadata():
    line = json.dumps({"id": "a", "text": "t", "source": "s", "metadata": {"url": "u"}, "extra": 1}).encode()
    plain = document_decoder(False).decode(line)
    assert type(plain) is Document and not hasattr(plain, "metadata")
    rich = document_decoder(True).decode(line)
    assert isinstance(rich, DocumentWithMetadata) and rich.metadata == {"url": "u"}
    with pytest.raises(msgspec.ValidationError):
        document_decoder(False).decode(b'{"text": "no id"}')


@add_tagger("test_precision_v1")
class _Precision(BaseTagger):
    def predict(self, doc):
        from feedline.curate.model import DocResult

        return DocResult(doc, [Span(0, len(doc.text), "third", 1 / 3), Span(0, 1, "int", 7),
                               Span(0, 1, "tiny", 1.234567e-7)])


@add_tagger("test_metadata_v1")
class _Meta(BaseTaggerWithMetadata):
    def predict(self, doc):
        from feedline.curate.model import DocResult

        return DocResult(doc, [Span(0, 0, "has_url", 1.0 if (doc.metadata or {}).get("url") else 0.0)])


def test_scores_written_with_five_decimals_as_floats(tmp_path):
    src = write_jsonl(tmp_path / "documents" / "a.jsonl.gz", [{"id": "1", "text": "hello", "source": "s"}])
    FileTagger(TagJob(("test_precision_v1",), experiment="p")).tag_file(str(src))
    raw = gzip.decompress((tmp_path / "attributes" / "p" / "a.jsonl.gz").read_bytes())
    assert b'"p__test_precision_v1__third":[[0,5,0.33333]]' in raw
    assert b'"p__test_precision_v1__int":[[0,1,7.0]]' in raw
    assert b'"p__test_precision_v1__tiny":[[0,1,0.0]]' in raw
    row = ATTRIBUTE_DECODER.decode(raw.splitlines()[0])
    assert row.id == "1" and row.source == "s"


def test_metadata_decoder_only_when_asked(tmp_path):
    src = write_jsonl(tmp_path / "documents" / "a.jsonl", [{"id": "1", "text": "x", "metadata": {"url": "u"}}])
    assert not FileTagger(TagJob(("test_precision_v1",))).with_metadata
    tagger = FileTagger(TagJob(("test_precision_v1", "test_metadata_v1"), experiment="m"))
    assert tagger.with_metadata
    tagger.tag_file(str(src))
    row = json.loads((tmp_path / "attributes" / "m" / "a.jsonl").read_text())
    assert row["attributes"]["m__test_metadata_v1__has_url"] == [[0, 0, 1.0]]
    assert row["source"] is None
