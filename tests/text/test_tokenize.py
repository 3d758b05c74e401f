"""``feedline tokenize`` as a user runs it: a real process, real files, real ``kill -9``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from tests.cli import run_feedline
from tests.crash import assert_complete_subset, assert_same_tree, kill_when, temp_files, tree
from tests.text.helpers import sentences, write_corpus, write_docs


def _tokenize(docs: Path | str, tokenizer: Path, out: Path, *extra: str, check: bool = True):
    return run_feedline("tokenize", str(docs), "--tokenizer", str(tokenizer), "--out", str(out), *extra,
                        check=check)


def _docs(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in gzip.decompress(path.read_bytes()).splitlines()]


def test_every_shard_holds_its_documents_tokens_and_eos(tmp_path, tokenizer_path):
    shards = write_corpus(tmp_path, 3, 40)
    result = _tokenize(tmp_path / "documents", tokenizer_path, tmp_path / "out")
    assert "tokenized 3 shards (120 documents" in result.stdout and "tokens/s" in result.stdout
    reference = Tokenizer.from_file(str(tokenizer_path))
    eos = reference.token_to_id("<|endoftext|>")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["tokenizer"]["eos_id"] == eos and manifest["tokenizer"]["dtype"] == "uint16"
    for shard, record in zip(shards, manifest["shards"], strict=True):
        expected = [reference.encode(t).ids + [eos] for t in _docs(shard)]
        tokens = np.fromfile(tmp_path / "out" / record["path"], "<u2")
        ends = np.fromfile(tmp_path / "out" / (record["path"] + ".index"), "<u8")
        assert tokens.tolist() == [i for doc in expected for i in doc]
        assert ends.tolist() == np.cumsum([len(d) for d in expected]).tolist()
        assert record["documents"] == 40 and record["tokens"] == tokens.size == record["bytes"] // 2
    assert manifest["documents"] == 120 and manifest["tokens"] == sum(s["tokens"] for s in manifest["shards"])


def test_a_rerun_skips_finished_shards_and_writes_the_same_files(tmp_path, tokenizer_path):
    write_corpus(tmp_path, 2, 20)
    _tokenize(tmp_path / "documents", tokenizer_path, tmp_path / "out")
    before = tree(tmp_path / "out")
    again = _tokenize(tmp_path / "documents", tokenizer_path, tmp_path / "out")
    assert "all 2 shards already done" in again.stdout
    assert tree(tmp_path / "out") == before
    # another EOS changes every shard: the markers no longer vouch for them
    other = _tokenize(tmp_path / "documents", tokenizer_path, tmp_path / "out", "--eos-token", "<pad>")
    assert "tokenized 2 shards" in other.stdout
    assert tree(tmp_path / "out") != before


def test_processes_give_the_files_one_process_gives(tmp_path, tokenizer_path):
    write_corpus(tmp_path, 4, 30)
    _tokenize(tmp_path / "documents", tokenizer_path, tmp_path / "one")
    _tokenize(tmp_path / "documents", tokenizer_path, tmp_path / "two", "--processes", "2")
    assert_same_tree(tmp_path / "two", tmp_path / "one")


def test_shuffle_documents_is_a_seeded_permutation_within_each_shard(tmp_path, tokenizer_path):
    (shard,) = write_corpus(tmp_path, 1, 50)
    _tokenize(shard, tokenizer_path, tmp_path / "plain")
    _tokenize(shard, tokenizer_path, tmp_path / "a", "--shuffle-documents", "7")
    _tokenize(shard, tokenizer_path, tmp_path / "b", "--shuffle-documents", "7")
    _tokenize(shard, tokenizer_path, tmp_path / "c", "--shuffle-documents", "8")

    def documents(folder: Path) -> list[tuple[int, ...]]:
        tokens = np.fromfile(folder / "part-00.ds", "<u2")
        ends = np.fromfile(folder / "part-00.ds.index", "<u8").astype(int)
        return [tuple(d) for d in np.split(tokens, ends[:-1])]

    plain, a = documents(tmp_path / "plain"), documents(tmp_path / "a")
    assert a != plain and sorted(a) == sorted(plain)
    assert documents(tmp_path / "b") == a and documents(tmp_path / "c") != a
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["parameters"]["shuffle_documents"] == 7


def test_bad_input_is_one_line_naming_the_file_and_nothing_is_written(tmp_path, tokenizer_path):
    good = write_docs(tmp_path / "docs" / "a.jsonl", sentences(1, 5))
    no_text = tmp_path / "docs" / "b.jsonl"
    no_text.write_text('{"id": "x1", "text": "fine"}\n{"id": "x2", "body": "no text here"}\n')
    out = tmp_path / "out"
    result = _tokenize(no_text, tokenizer_path, out, check=False)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line == f"feedline: error: {no_text}: document 2 (id 'x2') has no 'text' text"
    assert not (out / "b.ds").exists() and temp_files(tmp_path) == []

    truncated = tmp_path / "docs" / "c.jsonl.gz"
    truncated.write_bytes(gzip.compress(good.read_bytes() * 50, mtime=0)[:-40])
    result = _tokenize(truncated, tokenizer_path, out, check=False)
    assert result.returncode == 1 and str(truncated) in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (out / "c.ds").exists() and not (out / "manifest.json").exists() and temp_files(tmp_path) == []

    result = _tokenize(good, tmp_path / "nope" / "tokenizer.json", out, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == f"feedline: error: {tmp_path / 'nope' / 'tokenizer.json'}: no such tokenizer file " \
                                    "(give a tokenizer.json path or a Hub name)"
    assert not out.exists() or not any(out.glob("*.ds"))


def test_kill_9_then_rerun_gives_the_files_of_an_uninterrupted_run(tmp_path, tokenizer_path):
    write_corpus(tmp_path, 8, 400, max_words=200)
    docs = tmp_path / "documents"
    _tokenize(docs, tokenizer_path, tmp_path / "full", "--processes", "2")
    full = tree(tmp_path / "full")
    out = tmp_path / "out"

    def some_shards_done() -> bool:
        markers = out / ".feedline-tokenize"
        return markers.exists() and len(list(markers.glob("*.done"))) >= 2

    killed = kill_when("tokenize", str(docs), "--tokenizer", str(tokenizer_path), "--out", str(out),
                       "--processes", "2", ready=some_shards_done)
    assert killed.returncode == -9
    left = tree(out)
    assert "manifest.json" not in left  # written last, only when every shard is done
    assert_complete_subset(left, full)
    rerun = _tokenize(docs, tokenizer_path, out, "--processes", "2")
    assert "already done" in rerun.stdout and not rerun.stdout.startswith("all")
    assert_same_tree(out, tmp_path / "full")


def test_documents_over_http_tokenize_like_local_ones(tmp_path, tokenizer_path, nginx_server):
    (shard,) = write_corpus(tmp_path, 1, 30)
    served = Path(nginx_server.root) / "text-docs" / shard.name
    served.parent.mkdir(parents=True, exist_ok=True)
    served.write_bytes(shard.read_bytes())
    _tokenize(shard, tokenizer_path, tmp_path / "local")
    _tokenize(f"{nginx_server.url}/text-docs/{shard.name}", tokenizer_path, tmp_path / "http")
    got = tmp_path / "http" / "text-docs" / "part-00.ds"  # a URL keeps its path below the host
    assert got.read_bytes() == (tmp_path / "local" / "part-00.ds").read_bytes()
    assert Path(f"{got}.index").read_bytes() == (tmp_path / "local" / "part-00.ds.index").read_bytes()


def test_progress_counts_tokens_per_second_with_shards_and_documents(tmp_path, tokenizer_path, monkeypatch, caplog):
    import logging

    from feedline.run.progress import Progress
    from feedline.text import tokenize as module
    from feedline.text.shard import TokenizeJob
    from feedline.text.tokenizer import load_tokenizer

    class EveryUpdate(Progress):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "enabled": False, "log_every_s": 0.0})

    monkeypatch.setattr(module, "Progress", EveryUpdate)
    write_corpus(tmp_path, 2, 20)
    with caplog.at_level(logging.INFO, logger="feedline.progress"):
        report = module.run_tokenize([str(tmp_path / "documents")], TokenizeJob(load_tokenizer(str(tokenizer_path))),
                                     str(tmp_path / "out"))
    lines = [r.getMessage() for r in caplog.records if r.name == "feedline.progress"]
    assert lines and all(line.startswith("tokenize: ") and " tok/s" in line for line in lines)
    assert lines[-1].startswith(f"tokenize: {report.tokens:,} tok in ") and lines[-1].endswith("2/2 shards, 40 documents")
