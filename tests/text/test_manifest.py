"""The manifest: written without time stamps (a rerun writes the same bytes), read back, refused by name."""

from __future__ import annotations

import json

import pytest

from feedline.text.errors import TokenFileError
from feedline.text.manifest import ShardRecord, manifest_bytes, parse_manifest, write_manifest

TOKENIZER = {"name": "tok.json", "sha256": "ab" * 32, "eos_token": "<|endoftext|>", "eos_id": 0,
             "vocab_size": 300, "dtype": "uint16"}
SHARDS = [ShardRecord("a.ds", "docs/a.jsonl.gz", 3, 40), ShardRecord("sub/b.ds", "docs/sub/b.jsonl", 2, 10)]


def test_round_trip_and_totals(tmp_path):
    path = tmp_path / "manifest.json"
    write_manifest(str(path), TOKENIZER, {"shuffle_documents": None}, SHARDS)
    body = json.loads(path.read_text())
    assert body["tokens"] == 50 and body["documents"] == 5 and body["shards"][1]["bytes"] == 20
    manifest = parse_manifest(path.read_bytes(), str(path))
    assert manifest.shards == tuple(SHARDS) and manifest.token_bytes == 2 and manifest.tokens == 50
    assert path.read_bytes() == manifest_bytes(TOKENIZER, {"shuffle_documents": None}, SHARDS)
    assert manifest_bytes({**TOKENIZER, "dtype": "uint32"}, {}, SHARDS).count(b'"bytes": 40') == 1


@pytest.mark.parametrize(("data", "problem"), [
    (b"{not json", "not a JSON manifest"),
    (b'{"format": "other"}', "not a feedline tokenize manifest"),
    (b'{"format": "feedline-tokens", "version": 9}', "manifest version 9"),
    (b'{"format": "feedline-tokens", "version": 1, "tokenizer": {}, "parameters": {}, "shards": [{"path": "a"}]}',
     "damaged manifest"),
])
def test_foreign_or_damaged_manifests_are_refused_by_name(data, problem):
    with pytest.raises(TokenFileError, match=problem) as info:
        parse_manifest(data, "s3://b/tokens/manifest.json")
    assert str(info.value).startswith("s3://b/tokens/manifest.json: ")
