"""The one shard loop: ``download --dedup`` and ``feedline dedup`` name and judge documents alike.

A document without an ``id`` is ``<output name>:<line>``, the 1-based line of the input shard
(blank and skipped bad lines counted), whichever command read it; the line is the one
``sed -n '<line>p'`` prints from the decompressed shard.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import zstandard

from feedline.dedup.engine import DedupConfig, Deduplicator
from feedline.dedup.shards import ShardDocuments, dedup_shard, doc_id
from feedline.io.lines import LineReader, open_input
from tests.cli import run_feedline


def _corpus() -> dict[str, bytes]:
    """Three id-less shards (plain, gzip, zstd) with repeats within and across them, a blank
    line and a bad line, so document numbers and line numbers differ."""
    texts = [f"the same words about topic number {i % 7} and then a few more words" for i in range(30)]
    lines = [orjson.dumps({"text": t, "n": i}) for i, t in enumerate(texts)]
    plain = b"\n".join(lines[:10]) + b"\n"
    with_gaps = b"\n".join([*lines[10:14], b"", *lines[14:17], b"{not json", *lines[17:20]]) + b"\n"
    tail = b"\n".join([lines[3], *lines[20:]]) + b"\n"  # an exact repeat of shard 0's line 4
    return {
        "p-000.jsonl": plain,
        "p-001.jsonl.gz": gzip.compress(with_gaps),
        "p-002.json.zst": zstandard.ZstdCompressor().compress(tail),
    }


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _input_line(path: Path, line: int) -> bytes:
    """``sed -n '<line>p'`` of a (possibly compressed) shard."""
    with open_input(str(path)) as handle:
        return list(LineReader(handle, str(path)))[line - 1].rstrip(b"\n")


def test_download_dedup_and_feedline_dedup_write_the_same_verdicts(nginx_server, tmp_path: Path) -> None:
    corpus = _corpus()
    for name, body in corpus.items():
        (nginx_server.root / name).write_bytes(body)
    down = tmp_path / "down"
    urls = [f"{nginx_server.url}/{name}" for name in corpus]
    run_feedline("download", *urls, "--out", str(down), "--dedup", "--skip-bad-lines", check=True)
    alone = tmp_path / "alone"
    run_feedline("dedup", *[str(down / name) for name in corpus], "--out", str(alone), "--skip-bad-lines",
                 check=True)

    downloaded, deduped = _lines(down / "verdicts.jsonl"), _lines(alone / "verdicts.jsonl")
    assert [(r["id"], r["verdict"]) for r in downloaded] == [(r["id"], r["verdict"]) for r in deduped]
    assert len(deduped) == 31  # 30 documents and one repeated; the blank and the bad line skipped
    kept_names = {"p-000.jsonl": "p-000.jsonl.zst", "p-001.jsonl.gz": "p-001.jsonl.zst",
                  "p-002.json.zst": "p-002.jsonl.zst"}
    # the shard field stays each command's own: the downloaded file, the kept shard
    assert [kept_names[r["shard"]] for r in downloaded] == [r["shard"] for r in deduped]
    for row in deduped:
        name, _, line = row["id"].rpartition(":")
        assert name == row["shard"]
        source = next(src for src, kept in kept_names.items() if kept == name)
        assert orjson.loads(_input_line(down / source, int(line)))["text"]
    ids = [r["id"] for r in deduped]
    assert "p-001.jsonl.zst:6" in ids and "p-001.jsonl.zst:5" not in ids  # line 5 is blank
    assert "p-001.jsonl.zst:9" not in ids and "p-001.jsonl.zst:12" in ids  # 9 is the bad line
    assert {r["id"]: r["verdict"] for r in deduped}["p-002.jsonl.zst:1"] == "exact_dup_of:p-000.jsonl.zst:4"
    for name in kept_names.values():
        assert (down / "dedup" / name).read_bytes() == (alone / name).read_bytes()


def test_a_document_keeps_its_own_id_and_counts_add_up(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"id": 7, "text": "a b c d e f"}\n\n{"text": "a b c d e f"}\n{"id": "x", "text": "q"}\n')
    assert doc_id({"id": 7}, "s.jsonl.zst", 1) == "7" and doc_id({}, "s.jsonl.zst", 3) == "s.jsonl.zst:3"
    blobs: list[bytes] = []
    with Deduplicator(DedupConfig()) as dedup:
        counts = dedup_shard(dedup, ShardDocuments(path), "s.jsonl.zst", tmp_path / "out" / "s.jsonl.zst",
                             blobs.append, label="s.jsonl")
    rows = [orjson.loads(line) for line in b"".join(blobs).splitlines()]
    assert [(r["id"], r["shard"], r["verdict"]) for r in rows] == [
        ("7", "s.jsonl", "kept"), ("s.jsonl.zst:3", "s.jsonl", "exact_dup_of:7"), ("x", "s.jsonl", "kept")]
    assert counts.to_dict() == {"documents": 3, "kept": 2, "exact_dup": 1, "near_dup": 0, "bad_lines": 0}
    kept = zstandard.ZstdDecompressor().decompress((tmp_path / "out" / "s.jsonl.zst").read_bytes(),
                                                    max_output_size=1 << 20)
    assert [orjson.loads(line)["id"] for line in kept.splitlines()] == [7, "x"]
