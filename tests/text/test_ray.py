"""``--executor ray`` on a local Ray instance (one CPU) writes the files the local executor writes."""

from __future__ import annotations

import pytest

from feedline.text.errors import TextError
from feedline.text.shard import TokenizeJob
from feedline.text.tokenize import run_tokenize
from feedline.text.tokenizer import load_tokenizer
from tests.crash import tree
from tests.text.helpers import write_corpus

pytest.importorskip("ray", reason="Ray is not installed (pip install 'feedline[ray]')")


def test_ray_executor_gives_the_local_files_and_resumes(tmp_path, tokenizer_path, local_ray):
    write_corpus(tmp_path, 3, 30)
    job = TokenizeJob(load_tokenizer(str(tokenizer_path)))
    docs = [str(tmp_path / "documents")]
    run_tokenize(docs, job, str(tmp_path / "local"))
    report = run_tokenize(docs, job, str(tmp_path / "ray"), executor="ray")
    assert len(report.processed) == 3 and report.documents == 90
    assert tree(tmp_path / "ray") == tree(tmp_path / "local")
    again = run_tokenize(docs, job, str(tmp_path / "ray"), executor="ray")
    assert again.processed == [] and "already done" in again.summary()


def test_a_failing_shard_stops_the_ray_run_naming_it(tmp_path, tokenizer_path, local_ray):
    bad = tmp_path / "documents" / "bad.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"id": "q"}\n')
    with pytest.raises(TextError, match=r"bad\.jsonl: document 1 \(id 'q'\) has no 'text' text"):
        run_tokenize([str(bad)], TokenizeJob(load_tokenizer(str(tokenizer_path))), str(tmp_path / "out"),
                     executor="ray")
    assert not (tmp_path / "out" / "bad.ds").exists()
