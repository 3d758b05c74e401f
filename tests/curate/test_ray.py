"""The Ray executor on a local Ray instance (one per module, one CPU) gives the local output."""

from __future__ import annotations

import shutil

import pytest

from feedline.curate.errors import CurateError
from feedline.curate.processor import run_tag
from feedline.curate.runtime import TagJob

from .helpers import make_corpus, tree_bytes, write_jsonl

pytest.importorskip("ray", reason="Ray is not installed (pip install 'feedline[ray]')")


def test_ray_executor_gives_identical_outputs(tmp_path, local_ray):
    local, remote = tmp_path / "local", tmp_path / "ray"
    make_corpus(local, files=3, docs=25, seed=9)
    shutil.copytree(local / "documents", remote / "documents")
    job = TagJob(("gopher_v1", "pii_regex_v2", "random_number_v1", "minhash_near_dup_v1"), experiment="r")
    run_tag([str(local / "documents" / "*.gz")], job)
    report = run_tag([str(remote / "documents" / "*.gz")], job, executor="ray")
    assert len(report.processed) == 3 and report.documents == 75
    assert tree_bytes(remote / "attributes") == tree_bytes(local / "attributes")
    again = run_tag([str(remote / "documents" / "*.gz")], job, executor="ray")
    assert again.processed == [] and "already done" in again.summary()


def test_ray_failures_are_skipped_and_reported(tmp_path, local_ray):
    make_corpus(tmp_path, files=2, docs=5)
    write_jsonl(tmp_path / "documents" / "shard_009.jsonl.gz", [{"id": "x"}])  # no text
    report = run_tag([str(tmp_path / "documents" / "*.gz")], TagJob(("char_length_v1",), experiment="r"),
                     executor="ray", skip_on_failure=True)
    assert len(report.processed) == 2
    (failed,) = report.failed
    assert failed.source.endswith("shard_009.jsonl.gz") and "line 1: not a valid document row" in failed.error


def test_ray_failure_stops_the_run_with_one_line_naming_the_file(tmp_path, local_ray):
    make_corpus(tmp_path, files=3, docs=5)
    bad = tmp_path / "documents" / "shard_000.jsonl.gz"
    write_jsonl(bad, [{"id": "x"}])  # no text
    with pytest.raises(CurateError) as err:
        run_tag([str(tmp_path / "documents" / "*.gz")], TagJob(("char_length_v1",), experiment="r"),
                executor="ray")
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{bad}: line 1: not a valid document row")
    assert not (tmp_path / "attributes" / ".feedline-tag" / "r" / "shard_000.jsonl.gz.done").exists()
