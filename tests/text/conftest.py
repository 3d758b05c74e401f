"""A BPE tokenizer trained once per session, and small tokenized corpora built with the real command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import run_feedline
from tests.text.helpers import train_tokenizer, write_corpus


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tokens_root(tmp_path_factory: pytest.TempPathFactory, tokenizer_path: Path) -> Path:
    """Four shards of 150 documents tokenized by ``feedline tokenize``: about 1,300 windows of 32."""
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root, 4, 150)
    out = root / "tokens"
    run_feedline("tokenize", str(root / "documents"), "--tokenizer", str(tokenizer_path), "--out", str(out),
                 check=True)
    return out


@pytest.fixture(scope="session")
def second_root(tmp_path_factory: pytest.TempPathFactory, tokenizer_path: Path) -> Path:
    """Another, smaller corpus (two shards of 60 documents), for mixtures."""
    root = tmp_path_factory.mktemp("corpus2")
    write_corpus(root, 2, 60, seed=50)
    out = root / "tokens"
    run_feedline("tokenize", str(root / "documents"), "--tokenizer", str(tokenizer_path), "--out", str(out),
                 check=True)
    return out
