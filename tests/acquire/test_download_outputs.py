"""``feedline download --dedup`` never replaces a shard with its own outputs, and a dedup that
fails on a later shard leaves no kept shard, verdicts or manifest: real nginx, real processes."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
import zstandard

from tests.cli import run_feedline


def _shard(tag: str, n: int = 200) -> bytes:
    docs = b"".join(
        orjson.dumps({"id": f"{tag}{i}", "text": f"record {i % 9} of {tag} with a handful of words"}) + b"\n"
        for i in range(n)
    )
    return zstandard.ZstdCompressor().compress(docs)


def _tree(root: Path) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


@pytest.mark.parametrize("case", ["out-is-the-dedup-folder", "shard-named-verdicts", "manifest-is-a-shard"])
def test_an_output_that_would_replace_a_shard_is_refused_before_any_download(
    nginx_server, tmp_path: Path, case: str
) -> None:
    name = "verdicts.jsonl" if case == "shard-named-verdicts" else "a.jsonl.zst"
    body = _shard("a")
    (nginx_server.root / name).write_bytes(body)
    root = tmp_path / "X"
    if case == "out-is-the-dedup-folder":
        # --out is where --dedup puts kept shards, and it already holds the shard (an earlier
        # download there): the kept a.jsonl.zst would replace the downloaded a.jsonl.zst
        out = root / "dedup"
        out.mkdir(parents=True)
        (out / name).write_bytes(body)
        args = ["--out", str(out), "--manifest", str(root / "manifest.json"), "--dedup"]
        target, advice = out / name, "choose another --out or --manifest"
    elif case == "shard-named-verdicts":
        out = root
        args = ["--out", str(out), "--dedup"]
        target, advice = out / name, "choose another --manifest"
    else:
        out = root
        args = ["--out", str(out), "--manifest", str(out / name)]
        target, advice = out / name, "choose another --manifest"
    before = _tree(tmp_path)
    result = run_feedline("download", f"{nginx_server.url}/{name}", *args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [f"feedline: error: output {target} would replace the input {out / name}; {advice}"]
    assert _tree(tmp_path) == before  # nothing downloaded, the file already there unchanged


def test_dedup_failing_on_a_later_shard_leaves_no_kept_shard(nginx_server, tmp_path: Path) -> None:
    good = _shard("g")
    whole = _shard("t", 400)
    (nginx_server.root / "g.jsonl.zst").write_bytes(good)
    (nginx_server.root / "t.jsonl.zst").write_bytes(whole[: len(whole) // 2])  # served truncated
    out = tmp_path / "out"
    result = run_feedline("download", f"{nginx_server.url}/g.jsonl.zst", f"{nginx_server.url}/t.jsonl.zst",
                          "--out", str(out), "--dedup")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"feedline: error: {out / 't.jsonl.zst'}: truncated"), result.stderr
    # the verified downloads are there; no kept shard of the good one, no verdicts, no manifest
    assert sorted(_tree(out)) == ["g.jsonl.zst", "t.jsonl.zst"]
    assert (out / "g.jsonl.zst").read_bytes() == good
