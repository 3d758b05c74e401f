"""``feedline dedup`` end to end on real .jsonl / .jsonl.gz / .jsonl.zst files."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
import zstandard

from feedline.cli import main
from feedline.dedup.engine import DedupConfig, dedup_texts
from tests.cli import run_feedline

from .planted_corpus import make_corpus


def _write_shards(root: Path) -> tuple[list[dict], list[Path]]:
    corpus = make_corpus(400, 120, 40, seed=21)
    docs = [
        {"id": doc_id, "text": text, "meta": {"n": i}}
        for i, (doc_id, text) in enumerate(zip(corpus.ids, corpus.texts, strict=True))
    ]
    lines = [orjson.dumps(d) for d in docs]
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    paths = [
        root / "a" / "part-0.jsonl",
        root / "a" / "part-1.jsonl.gz",
        root / "b" / "part-0.jsonl.zst",
    ]
    paths[0].write_bytes(b"\n".join(lines[:200]) + b"\n")
    paths[1].write_bytes(gzip.compress(b"\n".join(lines[200:400]) + b"\n"))
    paths[2].write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines[400:]) + b"\n"))
    return docs, paths


def _read_zst(path: Path) -> list[dict]:
    with open(path, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read()
    return [orjson.loads(line) for line in data.splitlines()]


def test_cli_end_to_end(tmp_path: Path) -> None:
    docs, _paths = _write_shards(tmp_path / "in")
    out = tmp_path / "out"
    result = run_feedline("dedup", str(tmp_path / "in" / "**" / "*.jsonl*"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "kept" in result.stdout
    expected = dedup_texts([d["id"] for d in docs], [d["text"] for d in docs], DedupConfig())
    verdict_lines = [orjson.loads(x) for x in (out / "verdicts.jsonl").read_bytes().splitlines()]
    assert [v["id"] for v in verdict_lines] == [d["id"] for d in docs]
    assert [v["verdict"] for v in verdict_lines] == [str(v) for v in expected]
    assert {v["shard"] for v in verdict_lines} == {
        "a/part-0.jsonl.zst",
        "a/part-1.jsonl.zst",
        "b/part-0.jsonl.zst",
    }
    # kept documents, byte-for-byte the same objects, in order, split by shard
    kept = (
        _read_zst(out / "a" / "part-0.jsonl.zst")
        + _read_zst(out / "a" / "part-1.jsonl.zst")
        + _read_zst(out / "b" / "part-0.jsonl.zst")
    )
    assert kept == [d for d, v in zip(docs, expected, strict=True) if v.kept]
    summary = orjson.loads((out / "dedup.json").read_bytes())
    totals = summary["totals"]
    assert totals["documents"] == len(docs)
    assert totals["kept"] == len(kept)
    assert totals["near_dup"] == sum(v.kind == "near_dup" for v in expected) > 30
    assert totals["exact_dup"] == sum(v.kind == "exact_dup" for v in expected) >= 40
    assert summary["parameters"] == {**DedupConfig().to_dict()}
    assert [s["documents"] for s in summary["shards"]] == [200, 200, len(docs) - 400]
    assert not list(out.rglob("*.tmp"))
    # a rerun gives identical verdicts (same seed)
    assert (
        main(["dedup", str(tmp_path / "in" / "**" / "*.jsonl*"), "--out", str(tmp_path / "o2")])
        == 0
    )
    again = orjson.loads((tmp_path / "o2" / "dedup.json").read_bytes())
    assert again["verdicts_sha256"] == summary["verdicts_sha256"]


def test_cli_explicit_banding_and_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_shards(tmp_path / "in")
    args = ["dedup", str(tmp_path / "in" / "a" / "*"), "--out", str(tmp_path / "o")]
    assert main([*args, "--bands", "32", "--rows", "4", "--seed", "9", "--threshold", "0.7"]) == 0
    summary = orjson.loads((tmp_path / "o" / "dedup.json").read_bytes())
    assert summary["parameters"]["bands"] == 32 and summary["parameters"]["seed"] == 9
    assert "32x4 bands" in capsys.readouterr().out


def test_cli_errors_leave_no_partial_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.jsonl"
    good.write_bytes(b'{"id": "1", "text": "some text here"}\n')
    bad = tmp_path / "z-bad.jsonl"
    bad.write_bytes(b'{"id": "2", "text": "fine"}\n{"id": "3", "text": \n')
    out = tmp_path / "out"
    rc = run_feedline("dedup", str(good), str(bad), "--out", str(out))
    assert rc.returncode == 1
    err = rc.stderr.strip().splitlines()
    assert len(err) == 1 and "z-bad.jsonl" in err[0] and "line 2" in err[0]
    assert not (out / "dedup.json").exists() and not (out / "verdicts.jsonl").exists()
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))
    # skipping bad lines finishes
    assert main(["dedup", str(good), str(bad), "--out", str(out), "--skip-bad-lines"]) == 0
    assert orjson.loads((out / "dedup.json").read_bytes())["totals"]["documents"] == 2

    notext = tmp_path / "notext.jsonl"
    notext.write_bytes(b'{"id": "1", "body": "x"}\n')
    rc = run_feedline("dedup", str(notext), "--out", str(tmp_path / "o3"))
    assert rc.returncode == 1 and "text" in rc.stderr and "notext.jsonl" in rc.stderr
    assert main(["dedup", str(notext), "--out", str(tmp_path / "o4"), "--text-field", "body"]) == 0

    rc = run_feedline("dedup", str(tmp_path / "missing*.jsonl"), "--out", str(out))
    assert rc.returncode == 1 and "matches no file" in rc.stderr
    rc = run_feedline("dedup", str(good), "--out", str(out), "--bands", "3")
    assert rc.returncode == 1 and "--bands and --rows" in rc.stderr


def test_inputs_keep_their_order_and_must_be_local_jsonl(tmp_path: Path) -> None:
    from feedline.dedup.cli import expand_inputs
    from feedline.dedup.errors import DedupError

    _docs, paths = _write_shards(tmp_path)
    # pattern order decides "first occurrence"; a folder stands for its JSONL shards
    assert expand_inputs([str(tmp_path / "b"), str(tmp_path / "a" / "*")]) == [paths[2], paths[0], paths[1]]
    with pytest.raises(DedupError, match="reads local shards"):
        expand_inputs(["s3://bucket/shards/*.jsonl.zst"])
    (tmp_path / "a" / "notes.txt").write_text("x")
    with pytest.raises(DedupError, match=r"notes\.txt: not a JSON-lines shard"):
        expand_inputs([str(tmp_path / "a" / "*")])


def test_json_gz_shards_are_json_lines_too(tmp_path: Path) -> None:
    """c4's ``*.json.gz`` shards: accepted, and named as ``feedline download --dedup`` names them."""
    docs, paths = _write_shards(tmp_path / "in")
    c4 = tmp_path / "in" / "a" / "c4-train.00000-of-01024.json.gz"
    paths[1].rename(c4)
    out = tmp_path / "out"
    result = run_feedline("dedup", str(paths[0]), str(c4), str(paths[2]), "--out", str(out))
    assert result.returncode == 0, result.stderr
    kept = _read_zst(out / "a" / "c4-train.00000-of-01024.jsonl.zst")
    expected = dedup_texts([d["id"] for d in docs], [d["text"] for d in docs], DedupConfig())
    kept_ids = {d["id"] for d, v in zip(docs[200:400], expected[200:400], strict=True) if str(v) == "kept"}
    assert kept_ids and {d["id"] for d in kept} == kept_ids


def test_include_and_exclude_filter_what_a_glob_lists(tmp_path: Path) -> None:
    """``--include``/``--exclude`` as in ``feedline download``: exclude wins; a pattern that
    leaves nothing is a one-line error and writes nothing."""
    _docs, paths = _write_shards(tmp_path / "in")
    pattern = str(tmp_path / "in" / "**" / "*")
    out = tmp_path / "out"
    result = run_feedline("dedup", pattern, "--include", "a/*", "--exclude", "*.gz", "--out", str(out))
    assert result.returncode == 0, result.stderr
    shards = {orjson.loads(x)["shard"] for x in (out / "verdicts.jsonl").read_bytes().splitlines()}
    assert shards == {"part-0.jsonl.zst"}  # a/part-0.jsonl only, named below its own folder
    empty = tmp_path / "empty"
    result = run_feedline("dedup", pattern, "--include", "c/*", "--out", str(empty))
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (empty / "dedup.json").exists()


def test_shards_sharing_a_stem_keep_their_full_names(tmp_path: Path) -> None:
    """``a/part-0.jsonl`` and ``a/part-0.jsonl.gz`` would both be ``a/part-0.jsonl.zst``; the second
    would replace the first's kept documents, so both keep their full names instead."""
    docs, paths = _write_shards(tmp_path / "in")
    twin = paths[1].with_name("part-0.jsonl.gz")
    paths[1].rename(twin)
    out = tmp_path / "out"
    result = run_feedline("dedup", str(paths[0]), str(twin), str(paths[2]), "--out", str(out))
    assert result.returncode == 0, result.stderr
    expected = dedup_texts([d["id"] for d in docs], [d["text"] for d in docs], DedupConfig())
    kept = [d["id"] for d, v in zip(docs, expected, strict=True) if str(v) == "kept"]
    names = ["a/part-0.jsonl.jsonl.zst", "a/part-0.jsonl.gz.jsonl.zst", "b/part-0.jsonl.zst"]
    assert [d["id"] for name in names for d in _read_zst(out / name)] == kept
    assert {orjson.loads(x)["shard"] for x in (out / "verdicts.jsonl").read_bytes().splitlines()} == set(names)
