"""The datatrove oracle: datatrove reads feedline's files and cuts the same windows, and its own
DocumentTokenizer writes the same tokens and index for the same corpus and tokenizer.

datatrove pins libraries feedline's venv resolves differently, so it runs from a side venv:
``make venv-datatrove`` builds ``.venv-datatrove`` (``make test`` does it first), or
FEEDLINE_DATATROVE_PYTHON names another interpreter that has it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from feedline.text import TokenDataset
from tests.cli import run_feedline
from tests.text.helpers import write_corpus

ROOT = Path(__file__).resolve().parents[2]
ORACLE = Path(__file__).with_name("datatrove_oracle.py")


def datatrove_python() -> str | None:
    found = os.environ.get("FEEDLINE_DATATROVE_PYTHON") or str(ROOT / ".venv-datatrove" / "bin" / "python")
    if not os.path.exists(found):
        return None
    probe = subprocess.run([found, "-c", "import datatrove, torch, tokenizers"], capture_output=True)
    return found if probe.returncode == 0 else None


pytestmark = pytest.mark.skipif(
    datatrove_python() is None,
    reason="datatrove's side venv is missing: `make venv-datatrove` builds .venv-datatrove (make test does), "
           "or set FEEDLINE_DATATROVE_PYTHON to a Python with datatrove and torch",
)


def _oracle(*args: str) -> str:
    done = subprocess.run([datatrove_python(), str(ORACLE), *args], capture_output=True, text=True, timeout=300)  # type: ignore[list-item]
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_datatrove_cuts_the_windows_of_feedlines_files(tokens_root, tmp_path):
    seq_len = 63
    _oracle("windows", str(tokens_root), str(seq_len), str(tmp_path / "dt.npz"))
    expected = np.load(tmp_path / "dt.npz")
    ds = TokenDataset(tokens_root, seq_len, return_positions=True, return_index=True)
    got = {int(i["window_index"]): i for i in ds}
    assert len(got) == len(expected["input_ids"])
    for w in range(len(got)):
        assert got[w]["input_ids"].numpy().tolist() == expected["input_ids"][w].tolist()
        assert got[w]["positions"].numpy().tolist() == expected["positions"][w].tolist()


def test_datatroves_tokenizer_writes_the_same_tokens_and_index(tmp_path, tokenizer_path):
    (shard,) = write_corpus(tmp_path, 1, 300)
    dt_ds = Path(_oracle("tokenize", str(shard), str(tokenizer_path), str(tmp_path / "dt")).split()[0])
    run_feedline("tokenize", str(shard), "--tokenizer", str(tokenizer_path), "--out", str(tmp_path / "fl"),
                 check=True)
    ours = tmp_path / "fl" / "part-00.ds"
    assert ours.read_bytes() == dt_ds.read_bytes()
    assert Path(str(ours) + ".index").read_bytes() == Path(str(dt_ds) + ".index").read_bytes()
    ours_meta = Path(str(ours) + ".metadata").read_text().splitlines()
    dt_meta = Path(str(dt_ds) + ".metadata").read_text().splitlines()
    assert ours_meta[1:] == dt_meta[1:] and ours_meta[0].rsplit("|", 1)[1] == dt_meta[0].rsplit("|", 1)[1]


def test_datatroves_loss_file_is_the_one_tokenize_writes_and_the_dataset_reads(tmp_path, tokenizer_path):
    """datatrove's ``no_loss_ranges`` are ``--loss-mask no_loss_ranges --loss-spans ignore``: the
    same ``.ds.loss`` bytes (ranges that stop before the text's end: datatrove cuts the tokens of
    one that reaches it), and ``TokenDataset`` returns them from datatrove's folder."""
    import json

    from tests.text.helpers import sentences

    docs = []
    for i, (q, a) in enumerate(zip(sentences(3, 200, max_words=15), sentences(4, 200, max_words=15), strict=True)):
        text = f"{q} {a} end."
        docs.append({"id": f"d{i}", "text": text, **({"no_loss_ranges": [[0, len(q)]]} if i % 3 else {})})
    source = tmp_path / "qa.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in docs))
    dt_ds = Path(_oracle("tokenize", str(source), str(tokenizer_path), str(tmp_path / "dt"), "loss").split()[0])
    run_feedline("tokenize", str(source), "--tokenizer", str(tokenizer_path), "--out", str(tmp_path / "fl"),
                 "--loss-mask", "no_loss_ranges", "--loss-spans", "ignore", check=True)
    ours = tmp_path / "fl" / "qa.ds"
    assert ours.read_bytes() == dt_ds.read_bytes()
    loss = Path(str(dt_ds) + ".loss").read_bytes()
    assert Path(str(ours) + ".loss").read_bytes() == loss and 0 < loss.count(0) < len(loss)
    ds = TokenDataset(dt_ds.parent, 31, labels=True, return_loss_mask=True, return_index=True)
    mask = np.frombuffer(loss, np.uint8).astype(bool)
    for item in ds:
        at = int(item["window_index"]) * 32
        assert item["loss_mask"].numpy().tolist() == mask[at + 1 : at + 32].tolist()
