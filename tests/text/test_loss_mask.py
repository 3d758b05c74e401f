"""Loss masks: ``feedline tokenize --loss-mask`` writes ``X.ds.loss`` (one byte a token), and
``TokenDataset`` reads it, pinned like the ``.ds``, from the manifest or a datatrove-style folder,
locally and over nginx."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from feedline.text import TokenDataset
from feedline.text.errors import TokenFileChangedError, TokenFileError
from tests.cli import run_feedline
from tests.text.helpers import sentences

SEQ = 31


def _qa_docs(path: Path, n: int, seed: int = 7) -> list[dict]:
    """Question/answer documents whose ``answer`` field is the answer's character span, with
    a few whole-document booleans and documents without the field."""
    questions, answers = sentences(seed, n, max_words=12), sentences(seed + 1, n, max_words=12)
    docs = []
    for i, (q, a) in enumerate(zip(questions, answers, strict=True)):
        text = f"{q} {a}"
        doc = {"id": f"q{i}", "text": text, "answer": [[len(q) + 1, len(text)]]}
        if i % 10 == 3:
            doc["answer"] = False
        elif i % 10 == 6:
            doc["answer"] = True
        elif i % 10 == 9:
            del doc["answer"]
        docs.append(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(b"".join(json.dumps(d).encode() + b"\n" for d in docs), mtime=0))
    return docs


def _shard(out: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tokens = np.fromfile(out / "qa.ds", dtype="<u2")
    ends = np.fromfile(out / "qa.ds.index", dtype="<u8").astype(np.int64)
    loss = np.fromfile(out / "qa.ds.loss", dtype=np.uint8)
    return tokens, ends, loss


@pytest.fixture(scope="module")
def qa_root(tmp_path_factory, tokenizer_path) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("qa")
    docs = _qa_docs(root / "documents" / "qa.jsonl.gz", 300)
    run_feedline("tokenize", str(root / "documents"), "--tokenizer", str(tokenizer_path), "--out",
                 str(root / "tokens"), "--loss-mask", "answer", check=True)
    return root / "tokens", docs


def test_the_trained_tokens_are_the_answers_and_their_eos(qa_root, tokenizer_path):
    out, docs = qa_root
    tokens, ends, loss = _shard(out)
    assert loss.size == tokens.size and set(np.unique(loss).tolist()) <= {0, 1}
    decode = Tokenizer.from_file(str(tokenizer_path)).decode
    starts = np.concatenate(([0], ends[:-1]))
    for doc, lo, hi in zip(docs, starts, ends, strict=True):
        ids, mask = tokens[lo:hi], loss[lo:hi].astype(bool)
        value = doc.get("answer", True)
        if isinstance(value, bool):
            assert mask.tolist() == [value] * mask.size
            continue
        start, end = value[0]
        assert decode(ids[:-1][mask[:-1]].tolist()).strip() == doc["text"][start:end].strip()
        assert mask[-1]  # the answer reaches the end: its EOS is trained too
        assert not mask[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shards"][0]["loss"] is True and manifest["parameters"]["loss_mask"] == "answer"


def test_ignore_spans_are_the_complement_and_the_tokens_do_not_change(qa_root, tokenizer_path, tmp_path):
    out, _ = qa_root
    docs = out.parent / "documents"
    run_feedline("tokenize", str(docs), "--tokenizer", str(tokenizer_path), "--out", str(tmp_path / "ign"),
                 "--loss-mask", "answer", "--loss-spans", "ignore", check=True)
    run_feedline("tokenize", str(docs), "--tokenizer", str(tokenizer_path), "--out", str(tmp_path / "plain"),
                 check=True)
    tokens, ends, train = _shard(out)
    other, other_ends, ignore = _shard(tmp_path / "ign")
    assert np.array_equal(tokens, other) and np.array_equal(ends, other_ends)
    assert (tmp_path / "plain" / "qa.ds").read_bytes() == (out / "qa.ds").read_bytes()
    assert not (tmp_path / "plain" / "qa.ds.loss").exists()
    assert "loss" not in json.loads((tmp_path / "plain" / "manifest.json").read_text())["shards"][0]
    starts = np.concatenate(([0], ends[:-1]))
    for i, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
        if i % 10 in (3, 6, 9):
            assert np.array_equal(train[lo:hi], ignore[lo:hi])  # booleans and no field read the same
        else:
            assert np.array_equal(train[lo : hi - 1], 1 - ignore[lo : hi - 1])


@pytest.mark.parametrize("ignore_index", [None, -100])
def test_the_dataset_returns_the_stored_mask_of_each_window(qa_root, ignore_index):
    out, _ = qa_root
    tokens, ends, loss = _shard(out)
    ds = TokenDataset(out, SEQ, labels=True, return_loss_mask=True, return_index=True, ignore_index=ignore_index)
    seen = 0
    for item in ds:
        at = int(item["window_index"]) * (SEQ + 1)
        expected = loss[at + 1 : at + SEQ + 1].astype(bool)
        assert item["loss_mask"].numpy().tolist() == expected.tolist()
        labels = tokens[at + 1 : at + SEQ + 1].astype(np.int64)
        if ignore_index is not None:
            labels = np.where(expected, labels, ignore_index)
        assert item["labels"].numpy().tolist() == labels.tolist()
        seen += 1
    assert seen == tokens.size // (SEQ + 1)
    whole = TokenDataset(out, SEQ, return_loss_mask=True, return_index=True)  # aligned with input_ids
    for item in whole:
        at = int(item["window_index"]) * (SEQ + 1)
        assert item["loss_mask"].numpy().tolist() == loss[at : at + SEQ + 1].astype(bool).tolist()


def test_a_shuffled_run_moves_each_mask_with_its_document(qa_root, tokenizer_path, tmp_path):
    out, _ = qa_root
    run_feedline("tokenize", str(out.parent / "documents"), "--tokenizer", str(tokenizer_path), "--out",
                 str(tmp_path / "shuf"), "--loss-mask", "answer", "--shuffle-documents", "3", check=True)

    def documents(root: Path) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        tokens, ends, loss = _shard(root)
        starts = np.concatenate(([0], ends[:-1]))
        return sorted((tuple(tokens[a:b].tolist()), tuple(loss[a:b].tolist())) for a, b in zip(starts, ends, strict=True))

    assert documents(tmp_path / "shuf") == documents(out)
    assert (tmp_path / "shuf" / "qa.ds").read_bytes() != (out / "qa.ds").read_bytes()


def test_a_rerun_skips_and_a_run_without_the_mask_redoes(qa_root, tokenizer_path, tmp_path):
    out = tmp_path / "tokens"
    shutil.copytree(qa_root[0], out)
    docs = str(qa_root[0].parent / "documents")
    again = run_feedline("tokenize", docs, "--tokenizer", str(tokenizer_path), "--out", str(out),
                         "--loss-mask", "answer", check=True)
    assert "nothing to do" in again.stdout
    plain = run_feedline("tokenize", docs, "--tokenizer", str(tokenizer_path), "--out", str(out), check=True)
    assert "tokenized 1 shards" in plain.stdout
    assert "loss" not in json.loads((out / "manifest.json").read_text())["shards"][0]


@pytest.mark.parametrize(("value", "says"), [
    ("yes", "loss mask 'answer' is a str; give true/false or a list of [start, end] character spans"),
    ([[0, 999]], "loss mask 'answer' span [0, 999] is not [start, end] with 0 <= start <= end <= 9"),
    ([[3, 1]], "span [3, 1] is not [start, end]"),
])
def test_a_bad_loss_field_is_one_line_naming_the_document(tmp_path, tokenizer_path, value, says):
    docs = tmp_path / "documents" / "bad.jsonl"
    docs.parent.mkdir(parents=True)
    docs.write_text(json.dumps({"id": "ok", "text": "robot arm", "answer": True}) + "\n"
                    + json.dumps({"id": "x2", "text": "robot arm", "answer": value}) + "\n")
    result = run_feedline("tokenize", str(docs), "--tokenizer", str(tokenizer_path), "--out", str(tmp_path / "out"),
                          "--loss-mask", "answer")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert f"{docs}: document 2 (id 'x2'): " in line and says in line
    assert not list((tmp_path / "out").glob("bad.ds*"))


def _datatrove_folder(src: Path, dst: Path, *, seed: int = 0) -> list[np.ndarray]:
    """``src``'s token files without the manifest, each with a random ``.ds.loss`` beside it (what
    datatrove's DocumentTokenizer writes with save_loss_metadata)."""
    dst.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    masks = []
    for ds in sorted(src.glob("*.ds")):
        for suffix in ("", ".index", ".metadata"):
            shutil.copy(str(ds) + suffix, str(dst / ds.name) + suffix)
        mask = rng.random(ds.stat().st_size // 2) < 0.7
        (dst / (ds.name + ".loss")).write_bytes(mask.astype(np.uint8).tobytes())
        masks.append(mask)
    return masks


def test_a_datatrove_folder_with_loss_files_reads_them(tokens_root, tmp_path):
    root = tmp_path / "dt"
    masks = _datatrove_folder(tokens_root, root)
    ds = TokenDataset(root, SEQ, labels=True, return_loss_mask=True, mask_after_eos=True, return_index=True)
    eos = json.loads((tokens_root / "manifest.json").read_text())["tokenizer"]["eos_id"]
    file_windows = ds.file_windows[0]
    count = 0
    for item in ds:
        w = int(item["window_index"])
        file = int(np.searchsorted(file_windows, w, side="right")) - 1
        at = (w - int(file_windows[file])) * (SEQ + 1)
        expected = masks[file][at + 1 : at + SEQ + 1] & (item["input_ids"].numpy() != eos)
        assert item["loss_mask"].numpy().tolist() == expected.tolist()
        count += 1
    assert count == ds.windows
    plain = TokenDataset(tokens_root, SEQ, labels=True, return_loss_mask=True)  # no .ds.loss: all true
    assert all(bool(item["loss_mask"].all()) for item in plain)


def test_loss_files_that_do_not_fit_are_one_line_errors(tokens_root, qa_root, tmp_path):
    root = tmp_path / "dt"
    _datatrove_folder(tokens_root, root)
    (root / "part-01.ds.loss").unlink()
    with pytest.raises(TokenFileError, match=r"part-01\.ds\.loss: missing, but part-00\.ds\.loss is there"):
        TokenDataset(root, SEQ, return_loss_mask=True)
    TokenDataset(root, SEQ)  # a reader that asks for no loss mask does not look
    short = tmp_path / "short"
    shutil.copytree(qa_root[0], short)
    data = (short / "qa.ds.loss").read_bytes()
    (short / "qa.ds.loss").write_bytes(data[:-1])
    with pytest.raises(TokenFileError, match=rf"qa\.ds\.loss: {len(data) - 1} bytes, but qa\.ds holds {len(data)} tokens"):
        TokenDataset(short, SEQ, return_loss_mask=True)
    (short / "qa.ds.loss").unlink()
    with pytest.raises(TokenFileError, match=r"qa\.ds\.loss: listed in the manifest but missing"):
        TokenDataset(short, SEQ, return_loss_mask=True)


def test_a_loss_file_replaced_after_open_is_changed_naming_it(qa_root, tmp_path):
    root = tmp_path / "tokens"
    shutil.copytree(qa_root[0], root)
    ds = TokenDataset(root, SEQ, labels=True, return_loss_mask=True)
    path = root / "qa.ds.loss"
    data = path.read_bytes()
    path.unlink()  # a new inode: what an atomic re-write does
    path.write_bytes(bytes(1 - b for b in data))
    with pytest.raises(TokenFileChangedError, match=r"qa\.ds\.loss: changed since the dataset was opened"):
        list(ds)


def test_loss_masks_over_nginx_and_a_replaced_loss_file(qa_root, nginx_server):
    base = Path(nginx_server.root) / "tok-loss"
    shutil.copytree(qa_root[0], base)
    _, _, loss = _shard(base)
    ds = TokenDataset(f"{nginx_server.url}/{base.name}", SEQ, labels=True, return_loss_mask=True, return_index=True)
    for item in ds:
        at = int(item["window_index"]) * (SEQ + 1)
        assert item["loss_mask"].numpy().tolist() == loss[at + 1 : at + SEQ + 1].astype(bool).tolist()
    path = base / "qa.ds.loss"
    path.write_bytes(bytes(1 - b for b in path.read_bytes()))
    os.utime(path, (time.time() + 5, time.time() + 5))  # a new ETag even within a second
    with pytest.raises(TokenFileChangedError, match=r"tok-loss/qa\.ds\.loss: changed since the dataset was opened"):
        list(ds)


def test_the_byte_budget_counts_the_loss_bytes_too(qa_root):
    out, _ = qa_root
    chunk_bytes = 4 * (SEQ + 1) * 3  # two bytes a token and one loss byte
    ds = TokenDataset(out, SEQ, chunk_windows=4, pool_size=4, prefetch_chunks=1, return_loss_mask=True,
                      byte_budget_gb=4 * chunk_bytes / 2**30)
    assert sum(1 for _ in ds) == ds.windows
    metrics = ds.metrics()
    assert metrics["bytes_fetched"] == ds.windows * (SEQ + 1) * 3
    assert 0 < metrics["peak_reserved_bytes"] <= 4 * chunk_bytes
    assert ds.unit_bytes[0] == chunk_bytes
