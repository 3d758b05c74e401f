"""``feedline dedup`` never destroys data it did not write: outputs that are inputs are refused,
names never climb out of ``--out``, and a failed run leaves nothing under its final names.

Real files, real processes (``cwd=`` for relative paths with ``..``), a really truncated zstd
file; the Ray executor's cases are in ``test_ray.py`` (one Ray for the module there).
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
import zstandard

from tests.cli import run_feedline


def _docs(n: int, tag: str) -> bytes:
    return b"".join(
        orjson.dumps({"id": f"{tag}{i}", "text": f"document {i % 7} about {tag} with a few more words"}) + b"\n"
        for i in range(n)
    )


def _tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` with its bytes (symlinks as their target's name)."""
    found: dict[str, bytes] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            key = path.relative_to(root).as_posix()
            found[key] = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return found


def _one_line_error(stderr: str, *needles: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feedline: error: "), stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("case", ["kept-shard", "verdicts", "out-is-the-input", "symlink-in-out"])
def test_an_output_that_is_an_input_is_refused_before_any_work(tmp_path: Path, case: str) -> None:
    data = tmp_path / "D"
    data.mkdir()
    shard = data / "s0.jsonl.zst"
    shard.write_bytes(zstandard.ZstdCompressor().compress(_docs(300, "a")))
    args: list[str] = [str(shard), "--out", str(data)]
    if case == "verdicts":  # a shard named like the verdict file, --out its folder
        shard = data / "verdicts.jsonl"
        shard.write_bytes(_docs(50, "v"))
        args = [str(shard), "--out", str(data)]
    elif case == "out-is-the-input":
        args = [str(shard), "--out", str(shard)]
    elif case == "symlink-in-out":  # out/s0.jsonl.zst already points at the input
        out = tmp_path / "out"
        out.mkdir()
        (out / "s0.jsonl.zst").symlink_to(shard)
        args = [str(shard), "--out", str(out)]
    before = _tree(tmp_path)
    result = run_feedline("dedup", *args)
    assert result.returncode == 1
    if case == "symlink-in-out":
        _one_line_error(result.stderr, str(tmp_path / "out" / "s0.jsonl.zst"), "outside --out")
    else:
        _one_line_error(result.stderr, str(shard), "would replace the input", "choose another --out")
    assert _tree(tmp_path) == before  # the input's bytes unchanged, nothing written anywhere


def test_relative_inputs_with_dotdot_are_named_below_out(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.jsonl").write_bytes(_docs(120, "a"))
    (work / "b.jsonl").write_bytes(_docs(30, "b"))
    before = _tree(tmp_path)
    result = run_feedline("dedup", "../../corpus/a.jsonl", "../b.jsonl", "--out", "out", cwd=work / "sub")
    assert result.returncode == 0, result.stderr
    out = work / "sub" / "out"
    written = {k: v for k, v in _tree(tmp_path).items() if k not in before}
    assert sorted(written) == [f"w/sub/out/{n}" for n in
                               ("corpus/a.jsonl.zst", "dedup.json", "verdicts.jsonl", "w/b.jsonl.zst")]
    assert all(_tree(tmp_path)[k] == v for k, v in before.items())
    summary = orjson.loads((out / "dedup.json").read_bytes())
    assert [s["output"] for s in summary["shards"]] == ["corpus/a.jsonl.zst", "w/b.jsonl.zst"]


def test_a_symlinked_out_is_fine(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(_docs(40, "a"))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    result = run_feedline("dedup", str(tmp_path / "in" / "a.jsonl"), "--out", str(tmp_path / "link"))
    assert result.returncode == 0, result.stderr
    assert sorted(_tree(tmp_path / "real")) == ["a.jsonl.zst", "dedup.json", "verdicts.jsonl"]


@pytest.mark.parametrize("fault", ["truncated-zst", "bad-document"])
def test_a_run_failing_on_a_later_shard_leaves_nothing_in_out(tmp_path: Path, fault: str) -> None:
    (tmp_path / "in").mkdir()
    first = tmp_path / "in" / "a.jsonl"
    first.write_bytes(_docs(200, "a"))
    second = tmp_path / "in" / "b.jsonl.zst"
    whole = zstandard.ZstdCompressor().compress(_docs(400, "b"))
    if fault == "truncated-zst":
        second.write_bytes(whole[: len(whole) // 2])
    else:
        second.write_bytes(zstandard.ZstdCompressor().compress(_docs(100, "b") + b'{"id": "x", "body": 1}\n'))
    before = _tree(tmp_path / "in")
    out = tmp_path / "out"
    result = run_feedline("dedup", str(first), str(second), "--out", str(out))
    assert result.returncode == 1
    _one_line_error(result.stderr, str(second))
    assert _tree(tmp_path / "in") == before
    assert _tree(out) == {}  # no kept shard of the first input, no verdicts, no temps
