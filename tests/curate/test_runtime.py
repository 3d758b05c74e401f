from __future__ import annotations

import gzip
import json

import pytest

from feedline.curate.errors import CurateError
from feedline.curate.runtime import FileTagger, TagJob, attribute_path, plan_outputs

from .helpers import make_corpus, read_jsonl, write_jsonl


def test_attribute_path_rules():
    assert attribute_path("/d/documents/cc/a.jsonl.gz", "exp") == "/d/attributes/exp/cc/a.jsonl.gz"
    assert attribute_path("s3://b/x/documents/a.gz", "e") == "s3://b/x/attributes/e/a.gz"
    assert attribute_path("/d/documents/a.gz", "e", destination="/out/") == "/out/e/a.gz"
    assert attribute_path("/raw/sub/a.gz", "e", destination="/out", base="/raw") == "/out/e/sub/a.gz"
    with pytest.raises(CurateError, match="pass --destination"):
        attribute_path("/raw/a.gz", "e")


def test_taggers_sharing_a_destination_share_one_file():
    job = TagJob(("char_length_v1", "gopher_v1"), experiment="q")
    assert plan_outputs("/d/documents/a.gz", job) == {"/d/attributes/q/a.gz": ["char_length_v1", "gopher_v1"]}
    solo = TagJob(("char_length_v1", "gopher_v1"))
    assert plan_outputs("/d/documents/a.gz", solo) == {
        "/d/attributes/char_length_v1/a.gz": ["char_length_v1"],
        "/d/attributes/gopher_v1/a.gz": ["gopher_v1"],
    }


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst", ".jsonl"])
def test_attribute_files_align_with_documents(tmp_path, suffix):
    (gz,) = make_corpus(tmp_path, files=1, docs=57, seed=3)
    rows = read_jsonl(gz)
    src = write_jsonl(tmp_path / "documents" / f"sub/part{suffix}", rows)
    tagger = FileTagger(TagJob(("char_length_v1", "pii_regex_v2", "gopher_v1", "cld2_en_doc_v2"), experiment="x"))
    assert tagger.tag_file(str(src)) == 57
    out = read_jsonl(tmp_path / "attributes" / "x" / f"sub/part{suffix}")
    assert [r["id"] for r in out] == [r["id"] for r in rows]
    for doc, attrs in zip(rows, out, strict=True):
        assert attrs["source"] == "synthetic"
        keys = attrs["attributes"]
        assert keys["x__char_length_v1__length"] == [[0, len(doc["text"]), float(len(doc["text"]))]]
        assert {k.split("__")[1] for k in keys} == {"char_length_v1", "pii_regex_v2", "gopher_v1", "cld2_en_doc_v2"}
        assert all(k.startswith("x__") for k in keys)


def test_without_experiment_each_tagger_writes_its_own_folder(tmp_path):
    (src,) = make_corpus(tmp_path, files=1, docs=5)
    FileTagger(TagJob(("char_length_v1", "doc_count_v1"))).tag_file(str(src))
    a = read_jsonl(tmp_path / "attributes" / "char_length_v1" / src.name)
    b = read_jsonl(tmp_path / "attributes" / "doc_count_v1" / src.name)
    assert list(a[0]["attributes"]) == ["char_length_v1__char_length_v1__length"]
    assert b[0]["attributes"] == {"doc_count_v1__doc_count_v1__docs": [[0, len(read_jsonl(src)[0]["text"]), 1.0]]}


def test_bad_row_names_file_and_line_and_leaves_nothing(tmp_path):
    src = tmp_path / "documents" / "bad.jsonl"
    src.parent.mkdir(parents=True)
    src.write_text('{"id": "1", "text": "ok"}\n{"id": "2", "text": oops}\n')
    with pytest.raises(CurateError, match=r"bad\.jsonl: line 2: not a valid document row"):
        FileTagger(TagJob(("char_length_v1",), experiment="e")).tag_file(str(src))
    folder = tmp_path / "attributes" / "e"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_truncated_gzip_is_an_error_naming_the_file(tmp_path):
    (src,) = make_corpus(tmp_path, files=1, docs=200)
    src.write_bytes(src.read_bytes()[:-40])
    with pytest.raises(CurateError, match=r"shard_000\.jsonl\.gz: truncated gzip stream .*download it again"):
        FileTagger(TagJob(("char_length_v1",), experiment="e")).tag_file(str(src))
    assert not (tmp_path / "attributes" / "e" / src.name).exists()


def test_failed_run_keeps_previous_output_and_cleans_stale_temps(tmp_path):
    (src,) = make_corpus(tmp_path, files=1, docs=10)
    FileTagger(TagJob(("char_length_v1",), experiment="e")).tag_file(str(src))
    out = tmp_path / "attributes" / "e" / src.name
    before = out.read_bytes()
    stale = out.parent / f".{src.name}.abc123.tmp"
    stale.write_bytes(b"partial")
    src.write_bytes(gzip.compress(gzip.decompress(src.read_bytes()) + b'{"id": 1}\n'))
    with pytest.raises(CurateError):
        FileTagger(TagJob(("char_length_v1",), experiment="e")).tag_file(str(src))
    assert out.read_bytes() == before
    assert not stale.exists()
    assert sorted(p.name for p in out.parent.iterdir()) == [src.name]


def test_tagger_exception_names_document(tmp_path):
    from feedline.curate.registry import add_tagger
    from feedline.curate.taggers.base import BaseTagger

    @add_tagger("test_boom_v1")
    class Boom(BaseTagger):
        def predict(self, doc):
            raise ValueError("kaboom")

    src = write_jsonl(tmp_path / "documents" / "a.jsonl", [{"id": "doc-7", "text": "t"}])
    with pytest.raises(CurateError, match=r"a\.jsonl: line 1 \(id 'doc-7'\): tagger 'test_boom_v1' failed: ValueError: kaboom"):
        FileTagger(TagJob(("test_boom_v1",), experiment="e")).tag_file(str(src))


def test_progress_is_batched(tmp_path):
    (src,) = make_corpus(tmp_path, files=1, docs=2500)
    calls: list[int] = []
    job = TagJob(("char_length_v1",), experiment="e", progress_every_docs=1000, progress_every_s=3600)
    FileTagger(job).tag_file(str(src), progress=calls.append)
    assert sum(calls) == 2500 and len(calls) == 3


def test_output_is_json_lines_in_dolma_field_order(tmp_path):
    src = write_jsonl(tmp_path / "documents" / "a.jsonl", [{"id": "é", "text": "ünï", "source": "s"}])
    FileTagger(TagJob(("char_length_v1",), experiment="e")).tag_file(str(src))
    line = (tmp_path / "attributes" / "e" / "a.jsonl").read_text(encoding="utf-8")
    assert line == '{"id":"é","attributes":{"e__char_length_v1__length":[[0,3,3.0]]},"source":"s"}\n'
    assert json.loads(line)["id"] == "é"
