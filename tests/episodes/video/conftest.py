"""One MP4 corpus (tests/episodes/mp4_factory) for every video test, built once per run.

Tests never change it: a test that replaces or damages files works on ``root``, a private copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.episodes import mp4_factory as factory


@pytest.fixture(scope="session")
def corpus_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mp4-corpus")
    factory.build_corpus(folder)
    return folder


@pytest.fixture
def root(corpus_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the corpus and a private FEEDLINE_HOME per test."""
    monkeypatch.setenv("FEEDLINE_HOME", str(tmp_path / "home"))
    return Path(shutil.copytree(corpus_src, tmp_path / "root"))
