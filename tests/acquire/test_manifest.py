"""emit_manifest: contents, relative paths, verdict file hash, all-or-nothing writes."""

from __future__ import annotations

import hashlib
import json

import pytest

from feedline.acquire.manifest import (
    MANIFEST_SCHEMA,
    VERDICTS_NAME,
    ShardEntry,
    emit_manifest,
    read_manifest,
)


def entries(tmp_path) -> list[ShardEntry]:
    return [
        ShardEntry(
            "https://h/a.jsonl.zst", str(tmp_path / "a.jsonl.zst"), "aa" * 32, 100, 10, 7, 2, 1
        ),
        ShardEntry(
            "https://h/b.bin", str(tmp_path / "sub" / "b.bin"), "bb" * 32, 50, reused_bytes=20, fetched_bytes=30
        ),
    ]


def test_manifest_contents_and_verdicts(tmp_path):
    verdicts = [("d1", "a.jsonl.zst", "kept"), ("d2", "a.jsonl.zst", "exact_dup_of:d1")]
    path = emit_manifest(
        tmp_path / "manifest.json",
        entries(tmp_path),
        parameters={"dedup": {"threshold": 0.8}},
        verdicts=verdicts,
        started_at=0.0,
    )
    manifest = read_manifest(path)
    assert manifest["schema"] == MANIFEST_SCHEMA
    assert manifest["parameters"] == {"dedup": {"threshold": 0.8}}
    assert [s["path"] for s in manifest["shards"]] == ["a.jsonl.zst", "sub/b.bin"]
    assert manifest["shards"][0]["documents"] == 10 and manifest["shards"][1]["documents"] is None
    assert manifest["totals"] == {
        "shards": 2,
        "bytes": 150,
        "fetched_bytes": 30,
        "reused_bytes": 20,
        "documents": 10,
        "kept": 7,
        "exact_dup": 2,
        "near_dup": 1,
        "bad_lines": 0,
    }
    raw = (tmp_path / VERDICTS_NAME).read_bytes()
    lines = [json.loads(line) for line in raw.splitlines()]
    assert lines == [{"id": d, "shard": s, "verdict": v} for d, s, v in verdicts]
    assert manifest["verdicts"] == {
        "path": VERDICTS_NAME,
        "documents": 2,
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def test_failure_while_writing_verdicts_leaves_the_previous_run_intact(tmp_path):
    first = emit_manifest(
        tmp_path / "manifest.json", entries(tmp_path), parameters={}, verdicts=[("x", "a", "kept")]
    )
    before = first.read_bytes(), (tmp_path / VERDICTS_NAME).read_bytes()

    def broken():
        yield ("y", "a", "kept")
        raise RuntimeError("disk went away")

    with pytest.raises(RuntimeError):
        emit_manifest(
            tmp_path / "manifest.json", entries(tmp_path), parameters={}, verdicts=broken()
        )
    assert (first.read_bytes(), (tmp_path / VERDICTS_NAME).read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", VERDICTS_NAME]


def test_no_dedup_means_no_verdicts(tmp_path):
    path = emit_manifest(tmp_path / "m.json", entries(tmp_path), parameters={"dedup": None})
    assert read_manifest(path)["verdicts"] is None
    assert not (tmp_path / VERDICTS_NAME).exists()
