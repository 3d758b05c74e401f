"""Documents and attributes on S3 (moto server): tag, resume and mix through feedline.io."""

from __future__ import annotations

import json
import shutil

import boto3

from feedline.curate.processor import run_tag
from feedline.curate.runtime import TagJob

from .helpers import make_corpus, read_jsonl, run_feedline


def test_tag_and_mix_on_s3(tmp_path, s3_server, monkeypatch):
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    local = tmp_path / "local"
    paths = make_corpus(local, files=2, docs=12, seed=4)
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    for path in paths:
        s3.upload_file(str(path), s3_server.bucket, f"curate/documents/{path.name}")
    base = f"s3://{s3_server.bucket}/curate"
    job = TagJob(("char_length_v1", "pii_regex_v2"), experiment="e")
    report = run_tag([f"{base}/documents/*.jsonl.gz"], job, processes=2)
    assert report.documents == 24
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=s3_server.bucket, Prefix="curate/attributes")["Contents"])
    assert keys == [
        "curate/attributes/.feedline-tag/e/shard_000.jsonl.gz.done",
        "curate/attributes/.feedline-tag/e/shard_001.jsonl.gz.done",
        "curate/attributes/e/shard_000.jsonl.gz",
        "curate/attributes/e/shard_001.jsonl.gz",
    ]
    again = run_tag([f"{base}/documents/*.jsonl.gz"], job)
    assert "all 2 files already done" in again.summary()
    # the same bytes as a local run
    run_tag([str(local / "documents" / "*.gz")], job)
    fetched = tmp_path / "fetched.jsonl.gz"
    s3.download_file(s3_server.bucket, "curate/attributes/e/shard_001.jsonl.gz", str(fetched))
    assert fetched.read_bytes() == (local / "attributes" / "e" / "shard_001.jsonl.gz").read_bytes()

    config = tmp_path / "mix.json"
    config.write_text(json.dumps({"streams": [{
        "name": "s3mix", "documents": [f"{base}/documents/*.jsonl.gz"], "attributes": ["e"],
        "filter": {"exclude": ["$.attributes[?(@.e__pii_regex_v2__doc[0][2] > 0)]"]},
        "output": {"path": str(tmp_path / "out"), "max_size_in_bytes": 10**9},
    }]}))
    run_feedline("mix", str(config), env=s3_server.env)
    kept = read_jsonl(tmp_path / "out" / "s3mix-0000.jsonl.gz")
    expected = [r["id"] for p in paths for r, a in zip(read_jsonl(p), read_jsonl(local / "attributes" / "e" / p.name),
                                                          strict=True)
                if a["attributes"]["e__pii_regex_v2__doc"][0][2] <= 0]
    assert [r["id"] for r in kept] == expected and 0 < len(kept) < 24
    shutil.rmtree(tmp_path / "out")
