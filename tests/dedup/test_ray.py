"""``feedline dedup --executor ray`` against the one-process engine as oracle, on one real Ray.

Ray starts once for the module (``num_cpus=2``); in-process runs use it, subprocess runs join it
through ``--ray-address``. The corpus spreads planted exact and near duplicates over three shards
(plain, gzip, zstd), plus a near-duplicate chain A~B~C where C is not similar to A: the engine
keeps C, which a plain union-find over similar pairs would drop.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
import zstandard

from feedline.cli import main
from feedline.dedup.lsh import LSHIndex
from feedline.dedup.minhash import MinHasher
from tests.crash import kill_when

from .planted_corpus import make_corpus, oracle_jaccard

ray = pytest.importorskip("ray")

SHARDS = ("a/part-0.jsonl", "a/part-1.jsonl.gz", "b/part-0.jsonl.zst")
OUTPUTS = ("a/part-0.jsonl.zst", "a/part-1.jsonl.zst", "b/part-0.jsonl.zst")


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _chain(text: str) -> tuple[str, str]:
    """B: 5 words of A replaced (J(A,B) ~ 0.85); C: 5 more of B (J(B,C) ~ 0.85, J(A,C) ~ 0.73)."""
    words = text.split()
    b = list(words)
    for i, pos in enumerate(range(10, 60, 10)):
        b[pos] = f"chainb{i}"
    c = list(b)
    for i, pos in enumerate(range(70, 120, 10)):
        c[pos] = f"chainc{i}"
    return " ".join(b), " ".join(c)


def _documents() -> list[dict]:
    corpus = make_corpus(500, 120, 50, seed=5)
    docs: list[dict] = [{"id": i, "text": t, "n": k} for k, (i, t) in enumerate(zip(corpus.ids, corpus.texts, strict=True))]
    b, c = _chain(docs[3]["text"])
    docs.insert(300, {"id": "chain-b", "text": b})
    docs.append({"id": "chain-c", "text": c})
    docs.insert(10, {"id": "empty-1", "text": ""})
    docs.insert(400, {"id": "empty-2", "text": "   "})
    for doc in docs[460:480]:  # documents without an id get <output name>:<line>
        del doc["id"]
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("ray-corpus")
    docs = _documents()
    cut = [0, 250, 450, len(docs)]
    for name, lo, hi in zip(SHARDS, cut, cut[1:], strict=False):
        data = b"".join(orjson.dumps(d) + b"\n" for d in docs[lo:hi])
        path = root / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".gz"):
            data = gzip.compress(data)
        elif name.endswith(".zst"):
            data = zstandard.ZstdCompressor().compress(data)
        path.write_bytes(data)
    return root, docs


def _inputs(root: Path) -> list[str]:
    return [str(root / "in" / name) for name in SHARDS]


@pytest.fixture(scope="module")
def engine_out(corpus: tuple[Path, list[dict]]) -> dict[str, Path]:
    """The one-process engine's outputs, per verify mode: the oracle."""
    root, _ = corpus
    outs = {}
    for verify in ("exact", "estimate"):
        out = root / f"engine-{verify}"
        assert main(["dedup", *_inputs(root), "--out", str(out), "--verify", verify]) == 0
        outs[verify] = out
    return outs


def _assert_same_outputs(expected: Path, got: Path) -> None:
    assert (got / "verdicts.jsonl").read_bytes() == (expected / "verdicts.jsonl").read_bytes()
    for name in OUTPUTS:
        assert (got / name).read_bytes() == (expected / name).read_bytes(), name
    want = orjson.loads((expected / "dedup.json").read_bytes())
    have = orjson.loads((got / "dedup.json").read_bytes())
    for key in ("parameters", "shards", "totals", "verdicts_sha256"):
        assert have[key] == want[key], key
    assert not [p for p in got.rglob("*.tmp") if ".dedup-work" not in p.parts]


def _verdicts(out: Path) -> dict[str, str]:
    return {r["id"]: r["verdict"] for r in map(orjson.loads, (out / "verdicts.jsonl").read_bytes().splitlines())}


@pytest.mark.parametrize("verify", ["exact", "estimate"])
def test_ray_verdicts_and_kept_shards_equal_the_engine(
    ray_address: str, corpus: tuple[Path, list[dict]], engine_out: dict[str, Path], verify: str
) -> None:
    root, docs = corpus
    out = root / f"ray-{verify}"
    assert main(["dedup", *_inputs(root), "--out", str(out), "--executor", "ray", "--verify", verify]) == 0
    _assert_same_outputs(engine_out[verify], out)
    verdicts = _verdicts(out)
    assert len(verdicts) == len(docs)
    summary = orjson.loads((out / "dedup.json").read_bytes())
    assert summary["totals"]["exact_dup"] >= 50 and summary["totals"]["near_dup"] >= 40
    assert summary["executor"]["stages"]["signatures"] == {**summary["executor"]["stages"]["signatures"], "run": 3, "reused": 0}
    if verify == "exact":
        # the chain: B is a near duplicate of A across shards, C is kept (not similar to A)
        a = docs[3]
        b_text, c_text = _chain(a["text"])
        assert oracle_jaccard(a["text"], b_text) >= 0.8 > oracle_jaccard(a["text"], c_text)
        assert oracle_jaccard(b_text, c_text) >= 0.8
        assert verdicts["chain-b"] == f"near_dup_of:{a['id']}"
        assert verdicts["chain-c"] == "kept"
        assert verdicts["empty-2"] == "exact_dup_of:empty-1"


def test_stage_one_signatures_are_the_engines_bit_for_bit(
    ray_address: str, corpus: tuple[Path, list[dict]], engine_out: dict[str, Path]
) -> None:
    root, docs = corpus
    out = root / "ray-exact"
    if not (out / "dedup.json").exists():
        assert main(["dedup", *_inputs(root), "--out", str(out), "--executor", "ray"]) == 0
    texts = [d["text"] for d in docs[:250]]
    hasher = MinHasher(128, 5, 1)
    batch = hasher.shingle_batch(texts)
    keys = LSHIndex(16, 8, 1).band_keys(hasher.signatures_from_shingles(batch))
    sig = out / ".dedup-work" / "sig" / "s00000"
    docs_ = np.load(sig / "band_doc.npy")
    bands = np.load(sig / "band_band.npy")
    got = np.load(sig / "band_key.npy")
    assert len(got) == 16 * int((batch.counts() > 0).sum())
    assert (keys[docs_, bands] == got).all()
    exact = np.load(sig / "exact_key.npy")
    assert (batch.exact_keys[np.load(sig / "exact_doc.npy")] == exact).all()


def test_http_inputs_through_nginx(
    ray_address: str, corpus: tuple[Path, list[dict]], engine_out: dict[str, Path], nginx_server
) -> None:
    root, _ = corpus
    served = nginx_server.root / "ray-dedup"
    for name in SHARDS:
        (served / name).parent.mkdir(parents=True, exist_ok=True)
        (served / name).write_bytes((root / "in" / name).read_bytes())
    urls = [f"{nginx_server.url}/ray-dedup/{name}" for name in SHARDS]
    out = root / "ray-http"
    assert main(["dedup", *urls, "--out", str(out), "--executor", "ray"]) == 0
    assert (out / "verdicts.jsonl").read_bytes() == (engine_out["exact"] / "verdicts.jsonl").read_bytes()
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (engine_out["exact"] / name).read_bytes()
    params = orjson.loads((out / ".dedup-work" / "params.json").read_bytes())
    assert all(i["etag"] for i in params["inputs"])


def test_resume_after_kill_9_reuses_finished_stages(
    ray_address: str, corpus: tuple[Path, list[dict]], engine_out: dict[str, Path], tmp_path: Path
) -> None:
    root, _ = corpus
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["dedup", *_inputs(root), "--out", str(out), "--executor", "ray", "--work-dir", str(work)]
    markers = [work / "sig" / f"s{s:05d}.done.json" for s in range(3)]
    kill_when(*args, "--ray-address", ray_address, ready=lambda: all(m.exists() for m in markers), poll_s=0.02)
    assert not (out / "dedup.json").exists(), "the run finished before it was killed"
    stamps = {p: p.stat().st_mtime_ns for p in (work / "sig").rglob("*") if p.is_file()}
    assert main([*args, "--ray-address", ray_address]) == 0
    _assert_same_outputs(engine_out["exact"], out)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # stage 1 not recomputed
    stages = orjson.loads((out / "dedup.json").read_bytes())["executor"]["stages"]
    assert stages["signatures"]["reused"] == 3 and stages["signatures"]["run"] == 0
    # a rerun of the finished run recomputes nothing
    assert main(args) == 0
    stages = orjson.loads((out / "dedup.json").read_bytes())["executor"]["stages"]
    assert all(s["run"] == 0 for s in stages.values())


def test_a_work_dir_from_before_the_line_number_ids_redoes_only_the_id_tasks(
    ray_address: str, corpus: tuple[Path, list[dict]], engine_out: dict[str, Path], tmp_path: Path
) -> None:
    """Markers written before ids of id-less documents were ``<output name>:<line>`` do not say
    so: a rerun redoes the signature and write tasks (which store and write ids), reuses the
    rest, and writes the engine's verdicts."""
    root, _ = corpus
    out = tmp_path / "out"
    args = ["dedup", *_inputs(root), "--out", str(out), "--executor", "ray", "--ray-address", ray_address]
    assert main(args) == 0
    for marker in [*(out / ".dedup-work" / "sig").glob("*.done.json"), *(out / ".dedup-work" / "write").glob("*.done.json")]:
        old = orjson.loads(marker.read_bytes())
        del old["doc_ids"]
        marker.write_bytes(orjson.dumps(old))
    assert main(args) == 0
    _assert_same_outputs(engine_out["exact"], out)
    stages = orjson.loads((out / "dedup.json").read_bytes())["executor"]["stages"]
    assert {name: (s["run"], s["reused"]) for name, s in stages.items() if name in ("signatures", "write")} == {
        "signatures": (3, 0), "write": (3, 0)}
    assert all(s["run"] == 0 for name, s in stages.items() if name not in ("signatures", "write"))


def test_a_work_dir_made_with_other_parameters_is_refused(
    ray_address: str, corpus: tuple[Path, list[dict]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = corpus
    args = ["dedup", _inputs(root)[0], "--out", str(tmp_path / "out"), "--executor", "ray"]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--seed", "2"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "different parameters" in err and "seed 1 -> 2" in err and ".dedup-work" in err


def test_bad_document_is_one_line_naming_the_file_and_no_output(
    ray_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.jsonl"
    bad = tmp_path / "bad.jsonl"
    good.write_bytes(b'{"text": "one two three four five six"}\n')
    bad.write_bytes(b'{"text": "fine"}\n{"body": "no text"}\n')
    out = tmp_path / "out"
    assert main(["dedup", str(good), str(bad), "--out", str(out), "--executor", "ray"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"feedline: error: {bad}: document 2 has no string field 'text' (use --text-field)"]
    assert not list(out.glob("*.zst")) and not (out / "dedup.json").exists()


def test_no_duplicates_and_an_empty_shard_equal_the_engine(ray_address: str, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(
        b'{"id": "x", "text": "alpha beta gamma delta epsilon zeta"}\n{"id": "y", "text": "one two"}\n'
    )
    (tmp_path / "in" / "b.jsonl").write_bytes(b"")
    inputs = [str(tmp_path / "in" / "a.jsonl"), str(tmp_path / "in" / "b.jsonl")]
    assert main(["dedup", *inputs, "--out", str(tmp_path / "engine")]) == 0
    assert main(["dedup", *inputs, "--out", str(tmp_path / "ray"), "--executor", "ray", "--partitions", "3"]) == 0
    for name in ("verdicts.jsonl", "a.jsonl.zst", "b.jsonl.zst"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "engine" / name).read_bytes()
    # a deleted output makes its write task run again; another --out is refused for this work dir
    (tmp_path / "ray" / "a.jsonl.zst").unlink()
    assert main(["dedup", *inputs, "--out", str(tmp_path / "ray"), "--executor", "ray"]) == 0
    assert (tmp_path / "ray" / "a.jsonl.zst").read_bytes() == (tmp_path / "engine" / "a.jsonl.zst").read_bytes()
    work = str(tmp_path / "ray" / ".dedup-work")
    assert main(["dedup", *inputs, "--out", str(tmp_path / "other"), "--executor", "ray", "--work-dir", work]) != 0


def test_without_ray_the_cli_names_the_extra(tmp_path: Path) -> None:
    # Ray is installed in the dev venv, so its absence is simulated: sys.modules["ray"] = None
    # makes `import ray` raise ImportError exactly as on a machine without it. A subprocess, so
    # this test's own Ray stays untouched.
    shard = tmp_path / "a.jsonl"
    shard.write_bytes(b'{"text": "x"}\n')
    out = tmp_path / "out"
    script = (
        "import sys; sys.modules['ray'] = None\n"
        "from feedline.cli import main\n"
        f"sys.exit(main(['dedup', {str(shard)!r}, '--out', {str(out)!r}, '--executor', 'ray']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert proc.stderr.strip() == "feedline: error: --executor ray needs Ray: pip install 'feedline[ray]'"
    assert not out.exists()


def test_no_output_replaces_an_input_or_leaves_out_or_survives_a_failure(ray_address: str, tmp_path: Path) -> None:
    """The three output rules under Ray, in one case to start as few processes as possible: an
    output equal to an input is refused before any task, names of ``..`` inputs stay below
    --out, and a run failing on its second shard leaves no kept shard under its final name."""
    from tests.cli import run_feedline
    from tests.dedup.test_outputs import _docs, _one_line_error, _tree

    data = tmp_path / "D"
    data.mkdir()
    shard = data / "s0.jsonl.zst"
    shard.write_bytes(zstandard.ZstdCompressor().compress(_docs(300, "a")))
    before = _tree(tmp_path)
    ray_args = ["--executor", "ray", "--ray-address", ray_address]
    result = run_feedline("dedup", str(shard), "--out", str(data), *ray_args)
    assert result.returncode == 1
    _one_line_error(result.stderr, str(shard), "would replace the input", "choose another --out")
    assert _tree(tmp_path) == before

    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.jsonl").write_bytes(_docs(120, "a"))
    (work / "b.jsonl").write_bytes(_docs(30, "b"))
    result = run_feedline("dedup", "../../corpus/a.jsonl", "../b.jsonl", "--out", "out", *ray_args,
                          "--work-dir", str(tmp_path / "work1"), cwd=work / "sub")
    assert result.returncode == 0, result.stderr
    out = work / "sub" / "out"
    assert sorted(_tree(out)) == ["corpus/a.jsonl.zst", "dedup.json", "verdicts.jsonl", "w/b.jsonl.zst"]
    assert not (work / "sub" / "corpus").exists()
    summary = orjson.loads((out / "dedup.json").read_bytes())
    assert [s["output"] for s in summary["shards"]] == ["corpus/a.jsonl.zst", "w/b.jsonl.zst"]

    whole = zstandard.ZstdCompressor().compress(_docs(400, "t"))
    truncated = data / "t.jsonl.zst"
    truncated.write_bytes(whole[: len(whole) // 2])
    failed_out = tmp_path / "out2"
    result = run_feedline("dedup", str(tmp_path / "corpus" / "a.jsonl"), str(truncated), "--out", str(failed_out),
                          *ray_args, "--work-dir", str(tmp_path / "work2"))
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]  # after Ray's own connection lines
    assert last.startswith(f"feedline: error: {truncated}: truncated"), result.stderr
    assert _tree(failed_out) == {}
    assert truncated.read_bytes() == whole[: len(whole) // 2]
