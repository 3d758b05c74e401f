"""docs/text.md's training loop runs as written, on a corpus tokenized with the real command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import feedline
from tests.cli import run_feedline
from tests.text.helpers import write_corpus

DOC = Path(__file__).resolve().parents[2] / "docs" / "text.md"


def test_the_tiny_language_model_of_the_docs_trains(tmp_path, tokenizer_path):
    write_corpus(tmp_path, 2, 300)
    run_feedline("tokenize", str(tmp_path / "documents"), "--tokenizer", str(tokenizer_path), "--out",
                 str(tmp_path / "tokens"), check=True)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    loop = blocks[-1]
    assert "ds.track(loader)" in loop
    script = tmp_path / "train.py"
    script.write_text(loop)
    src = str(Path(feedline.__file__).resolve().parents[1])  # this checkout, whatever the cwd
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"epoch 1: \d+ steps, loss", done.stdout)


def test_the_docs_table_lists_each_row_of_the_token_readers_own_with_its_default():
    from feedline.text.settings import TextSettings

    text = DOC.read_text()
    for row in TextSettings.rows():
        if row.concept is not None:
            continue  # the floor's rows are listed in prose above the table
        found = re.search(rf"^\s*\| `{row.keyword}` \| `([^`]+)` \|", text, flags=re.M)
        assert found, f"docs/text.md has no table row for {row.keyword}"
        assert found.group(1) == repr(row.default).replace("'", '"'), row.keyword
