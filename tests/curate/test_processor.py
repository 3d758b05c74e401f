from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from feedline.curate.errors import CurateError
from feedline.curate.processor import run_tag
from feedline.curate.registry import import_tagger_modules
from feedline.curate.runtime import TagJob
from tests.crash import assert_complete_subset, kill_when, temp_files, tree

from .helpers import (
    cut,
    feedline_cmd,
    make_corpus,
    make_text,
    read_jsonl,
    run_feedline,
    tree_bytes,
    write_jsonl,
    write_multiframe_zst,
)

PLUGIN = str(Path(__file__).with_name("plugin_taggers.py"))
import_tagger_modules([PLUGIN])


def glob_of(root: Path) -> str:
    return str(root / "documents" / "*.jsonl.gz")


def test_rerun_skips_done_files_and_all_done_is_a_noop(tmp_path):
    make_corpus(tmp_path, files=3, docs=10)
    job = TagJob(("char_length_v1",), experiment="e")
    first = run_tag([glob_of(tmp_path)], job)
    assert len(first.processed) == 3 and first.documents == 30
    markers = sorted((tmp_path / "attributes" / ".feedline-tag" / "e").iterdir())
    assert [m.name for m in markers] == [f"shard_{i:03d}.jsonl.gz.done" for i in range(3)]
    (tmp_path / "attributes" / ".feedline-tag" / "e" / "shard_001.jsonl.gz.done").unlink()
    second = run_tag([glob_of(tmp_path)], job)
    assert [Path(r.source).name for r in second.processed] == ["shard_001.jsonl.gz"]
    assert len(second.done_before) == 2
    third = run_tag([glob_of(tmp_path)], job)
    assert third.processed == [] and "all 3 files already done" in third.summary()
    # a different tagger set in the same experiment is a different job: everything reruns
    fourth = run_tag([glob_of(tmp_path)], TagJob(("char_length_v1", "doc_count_v1"), experiment="e"))
    assert len(fourth.processed) == 3


def test_marker_records_the_file_and_a_marker_of_the_old_format_is_not_done(tmp_path):
    make_corpus(tmp_path, files=2, docs=4)
    job = TagJob(("char_length_v1",), experiment="e")
    run_tag([glob_of(tmp_path)], job)
    folder = tmp_path / "attributes" / ".feedline-tag" / "e"
    marker = json.loads((folder / "shard_000.jsonl.gz.done").read_text())
    assert marker["source"] == str(tmp_path / "documents" / "shard_000.jsonl.gz") and marker["documents"] == 4
    # the format before the digest: the job's signature itself, under "job"
    (folder / "shard_001.jsonl.gz.done").write_text(json.dumps({"job": job.signature(), "documents": 4}))
    again = run_tag([glob_of(tmp_path)], job)
    assert [Path(r.source).name for r in again.processed] == ["shard_001.jsonl.gz"]
    assert "job" not in json.loads((folder / "shard_001.jsonl.gz.done").read_text())


def test_cli_all_done_says_so(tmp_path):
    make_corpus(tmp_path, files=2, docs=3)
    meta = tmp_path / "meta"
    args = ("tag", "--documents", glob_of(tmp_path), "--taggers", "char_length_v1", "--metadata", str(meta))
    first = run_feedline(*args)
    assert "tagged 2 files (6 documents)" in first.stdout
    assert sorted(p.name for p in meta.iterdir()) == ["shard_000.jsonl.gz.done", "shard_001.jsonl.gz.done"]
    again = run_feedline(*args)
    assert again.returncode == 0
    assert f"all 2 files already done (markers in {meta}); nothing to do" in again.stdout


def test_retries_only_on_retryable_failure(tmp_path, monkeypatch):
    make_corpus(tmp_path, files=2, docs=3)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FEEDLINE_TEST_STATE", str(state))
    monkeypatch.setenv("FEEDLINE_TEST_FLAKY_TIMES", "1")
    job = TagJob(("test_flaky_v1",), experiment="f", tagger_modules=(PLUGIN,))
    report = run_tag([glob_of(tmp_path)], job, retries=1)
    assert sorted(r.attempts for r in report.processed) == [2, 2]
    shutil.rmtree(tmp_path / "attributes")
    for f in state.iterdir():
        f.unlink()
    with pytest.raises(CurateError, match=r"transient failure 1 .*after 1 attempts"):
        run_tag([glob_of(tmp_path)], job, retries=0)
    # a plain error is never retried, even with retries left
    write_jsonl(tmp_path / "documents" / "shard_009.jsonl.gz", [{"id": "bad-1", "text": "x"}])
    report = run_tag([glob_of(tmp_path)], TagJob(("test_broken_v1",), experiment="b", tagger_modules=(PLUGIN,)),
                     retries=3, skip_on_failure=True)
    (failed,) = report.failed
    assert failed.attempts == 1 and "cannot tag bad-1" in failed.error


def test_a_tagger_error_spanning_lines_is_one_cli_line(tmp_path):
    """A library error's multi-line message becomes one line naming the file, line and tagger; the
    rest is one ``-v`` away."""
    write_jsonl(tmp_path / "documents" / "shard_000.jsonl.gz", [{"id": "ok-1", "text": "x"}, {"id": "bad-1", "text": "y"}])
    args = ("tag", "--documents", glob_of(tmp_path), "--taggers", "test_chatty_v1", "--tagger-modules", PLUGIN,
            "--experiment", "c")
    proc = run_feedline(*args, check=False)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("feedline: error: ") and "shard_000.jsonl.gz" in proc.stderr
    assert "cannot tag bad-1" in proc.stderr and "(+2 more lines: rerun with -v to see them)" in proc.stderr
    verbose = run_feedline("-v", *args, check=False)
    assert verbose.returncode == 1 and "detail: the model said no" in verbose.stderr
    assert "hint: see above" in verbose.stderr
    assert not (tmp_path / "attributes" / "c" / "shard_000.jsonl.gz").exists()


def test_skip_on_failure_reports_and_abort_names_the_file(tmp_path):
    make_corpus(tmp_path, files=3, docs=5)
    broken = tmp_path / "documents" / "shard_001.jsonl.gz"
    broken.write_bytes(broken.read_bytes()[:-30])
    args = ("tag", "--documents", glob_of(tmp_path), "--taggers", "char_length_v1", "--experiment", "s")
    proc = run_feedline(*args, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("feedline: error: ")
    assert "shard_001.jsonl.gz: truncated gzip stream" in proc.stderr and "--skip-on-failure" in proc.stderr
    proc = run_feedline(*args, "--skip-on-failure", check=False)
    assert proc.returncode == 3
    # files finished before the abort stay done; the rest are tagged now; the broken one is reported
    assert "1 FAILED and skipped" in proc.stdout
    tagged = int(proc.stdout.split("tagged ")[1].split(" files")[0])
    already = int(proc.stdout.split("; ")[1].split(" already done")[0])
    assert tagged + already == 2
    assert "shard_001.jsonl.gz: truncated gzip stream" in proc.stdout
    attrs = tmp_path / "attributes" / "s"
    assert sorted(p.name for p in attrs.iterdir()) == ["shard_000.jsonl.gz", "shard_002.jsonl.gz"]


def test_truncated_multi_frame_zst_fails_tag_and_writes_no_marker(tmp_path):
    """A multi-frame .jsonl.zst cut at 70% once read as a shorter valid file: tagged, exit 0,
    ``.done``. It must fail, say so in one line naming the file, and leave nothing behind."""
    import random

    rng = random.Random(3)
    rows = [{"id": f"z-{i}", "text": make_text(rng), "source": "s"} for i in range(400)]
    src = write_multiframe_zst(tmp_path / "documents" / "cut.jsonl.zst", rows, frames=6)
    cut(src, 0.7)
    proc = run_feedline("tag", "--documents", str(src), "--taggers", "char_length_v1", "--experiment", "t",
                        check=False)
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("feedline: error: ") and "cut.jsonl.zst: truncated zstd stream" in line
    assert "download it again" in line and line.count(str(src)) == 1
    attrs = tmp_path / "attributes"  # holds the default marker folder, .feedline-tag/t/, too
    left = [p for p in attrs.rglob("*") if p.is_file()] if attrs.exists() else []
    assert left == [], "no .done marker, no attribute file, no temp file"


def test_kill_9_mid_run_then_resume_gives_identical_output(tmp_path):
    reference, victim = tmp_path / "ref", tmp_path / "victim"
    make_corpus(reference, files=5, docs=15, seed=11)
    shutil.copytree(reference / "documents", victim / "documents")
    env = dict(os.environ, FEEDLINE_TEST_SLEEP="0.03")
    common = ("--taggers", "test_slow_v1", "gopher_v1", "pii_regex_v2", "--experiment", "k",
              "--tagger-modules", PLUGIN)
    run_feedline("tag", "--documents", glob_of(reference), *common, env=env)
    expected = tree_bytes(reference / "attributes")
    assert len(expected) == 5

    markers = victim / "attributes" / ".feedline-tag" / "k"

    def finished() -> int:
        # only complete markers: a marker being written when the kill lands is a hidden temp file
        return len(list(markers.glob("*.done"))) if markers.exists() else 0

    kill_when("tag", "--documents", glob_of(victim), *common, env=env, ready=lambda: finished() >= 2, poll_s=0.02)
    done_before = finished()
    assert 2 <= done_before < 5, "the run was not interrupted mid-way"
    # every attribute file in place is complete; partial ones only exist as hidden temp files
    in_place = tree(victim / "attributes")
    assert in_place
    assert_complete_subset(in_place, expected)

    resumed = run_feedline("tag", "--documents", glob_of(victim), *common, env=env)
    assert f"tagged {5 - done_before} files" in resumed.stdout and f"{done_before} already done" in resumed.stdout
    assert tree(victim / "attributes") == expected
    assert temp_files(victim / "attributes") == []


def test_spawn_pool_gives_the_same_output(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    make_corpus(one, files=4, docs=20, seed=5)
    shutil.copytree(one / "documents", two / "documents")
    taggers = ("--taggers", "char_length_with_paragraphs_v1", "whitespace_tokenizer_v1", "c4_v2", "test_slow_v1",
               "--experiment", "p", "--tagger-modules", PLUGIN)  # user modules are imported in every worker
    env = dict(os.environ, FEEDLINE_TEST_SLEEP="0")
    run_feedline("tag", "--documents", glob_of(one), *taggers, env=env)
    out = run_feedline("tag", "--documents", glob_of(two), *taggers, "--processes", "2", env=env)
    assert "tagged 4 files (80 documents)" in out.stdout
    assert tree_bytes(one / "attributes") == tree_bytes(two / "attributes")
    assert len(read_jsonl(two / "attributes" / "p" / "shard_003.jsonl.gz")) == 20


def test_bad_arguments_are_one_line_errors(tmp_path):
    make_corpus(tmp_path, files=1, docs=2)
    for args, message in [
        (("--taggers", "nope_v1"), "unknown tagger 'nope_v1'"),
        (("--taggers", "char_length_v1", "--experiment", "a__b"), "invalid experiment name"),
        (("--taggers", "char_length_v1", "--processes", "0"), "--processes must be an integer >= 1, got 0"),
        (("--taggers", "char_length_v1", "--retries", "-1"), "--retries must be an integer >= 0, got -1"),
    ]:
        proc = run_feedline("tag", "--documents", glob_of(tmp_path), *args, check=False)
        assert proc.returncode == 1 and proc.stderr.strip() == f"feedline: error: {proc.stderr.strip()[17:]}"
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_feedline("tag", "--documents", str(tmp_path / "nothing" / "*.gz"), "--taggers", "char_length_v1",
                        check=False)
    assert "matches no files" in proc.stderr


def test_python_api_names_its_keywords(tmp_path):
    make_corpus(tmp_path, files=1, docs=2)
    job = TagJob(("char_length_v1",), experiment="k")
    with pytest.raises(CurateError, match=r"^processes must be an integer >= 1, got 0$"):
        run_tag([glob_of(tmp_path)], job, processes=0)
    with pytest.raises(CurateError, match=r"^retries must be an integer >= 0, got True$"):
        run_tag([glob_of(tmp_path)], job, retries=True)


def test_list_taggers_includes_plugins():
    out = run_feedline("list-taggers", "--tagger-modules", PLUGIN).stdout
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "gopher_v1" in lines and "Gopher rule inputs" in lines["gopher_v1"]
    assert "minhash_near_dup_v1" in lines and "test_slow_v1" in lines


def test_same_file_name_under_two_document_roots(tmp_path):
    make_corpus(tmp_path / "a", files=1, docs=3, prefix="x")
    make_corpus(tmp_path / "b", files=1, docs=4, prefix="x")
    meta = tmp_path / "meta"
    report = run_tag([str(tmp_path / "*" / "documents" / "*.gz")], TagJob(("char_length_v1",), experiment="e"),
                     metadata=str(meta))
    assert len(report.processed) == 2 and report.documents == 7
    assert len(list(meta.rglob("*.done"))) == 2
    assert len(read_jsonl(tmp_path / "b" / "attributes" / "e" / "x_000.jsonl.gz")) == 4


def _no_temps(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*.tmp")]


@pytest.mark.parametrize("death", ["exit", "kill"])
def test_a_dead_worker_ends_tag_naming_the_file_and_a_rerun_resumes(tmp_path, death):
    """A worker that calls ``os._exit(3)`` or is killed with ``kill -9`` while tagging a file:
    the spawn pool used to replace it and wait forever for that file. Now the run stops within
    seconds with one line naming the file and the status, leaves no temp file, and keeps the
    files already done, so a rerun tags only the rest."""
    make_corpus(tmp_path, files=4, docs=6)
    victim = tmp_path / "documents" / "shard_002.jsonl.gz"
    pid_file = tmp_path / "worker.pid"
    env = dict(os.environ, FEEDLINE_TEST_VICTIM="shard2-3", FEEDLINE_TEST_DEATH=death,
               FEEDLINE_TEST_PID=str(pid_file))
    args = ("tag", "--documents", glob_of(tmp_path), "--taggers", "test_dies_v1", "--tagger-modules", PLUGIN,
            "--experiment", "d", "--processes", "2")
    started = time.monotonic()
    proc = subprocess.Popen(feedline_cmd(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if death == "kill":
            deadline = time.monotonic() + 60
            while not (pid_file.exists() and pid_file.read_text()):
                assert time.monotonic() < deadline and proc.poll() is None, "the victim never started"
                time.sleep(0.05)
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGKILL)
            started = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - started < 20
    assert proc.returncode == 1
    errors = [line for line in stderr.splitlines() if line.startswith("feedline: error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    status = "exit status 3" if death == "exit" else f"worker process {pid} died (killed by signal 9 (SIGKILL))"
    assert errors[0].startswith(f"feedline: error: {victim}: worker process ") and status in errors[0]
    assert _no_temps(tmp_path) == []
    markers = tmp_path / "attributes" / ".feedline-tag" / "d"
    done = sorted(p.name for p in markers.glob("*.done"))
    assert done and "shard_002.jsonl.gz.done" not in done
    assert not (tmp_path / "attributes" / "d" / "shard_002.jsonl.gz").exists()

    resumed = run_feedline(*args)
    assert f"tagged {4 - len(done)} files" in resumed.stdout and f"{len(done)} already done" in resumed.stdout
    assert len(list(markers.glob("*.done"))) == 4 and _no_temps(tmp_path) == []
