"""What a mix may overwrite or delete: foreign files in output.path, an output among the inputs,
a stream that fails half-way (``feedline.curate.mixoutput``), through the real command."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .helpers import feedline_cmd, read_jsonl, run_feedline, write_jsonl


def _small_mix(root: Path, **output) -> Path:
    docs = [{"id": f"d{i}", "text": f"text number {i}"} for i in range(20)]
    write_jsonl(root / "documents" / "a.jsonl", docs)
    config = root / "mix.json"
    config.write_text(json.dumps({"streams": [{"name": "m", "documents": [str(root / "documents" / "*.jsonl")],
                                               "output": {"path": str(root / "out"), **output}}]}))
    return config


def test_foreign_files_in_output_path_are_never_deleted(tmp_path):
    """``m-0001.jsonl.gz`` and ``m-0007.jsonl.gz`` from elsewhere in output.path were deleted as
    "stale shards" with exit 0. Now a file named like one of this run's shards that the stream's
    previous mix did not write is a one-line error before any work; one of another compression
    is left alone with a warning; only shards the previous summary lists are ever removed."""
    config = _small_mix(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    foreign = {name: f"not mine {name}".encode() for name in ("m-0001.jsonl.gz", "m-0007.jsonl.gz")}
    for name, data in foreign.items():
        (out / name).write_bytes(data)
    proc = run_feedline("mix", str(config), check=False)
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line == (f"feedline: error: {out}/m-0001.jsonl.gz is in the way of stream 'm''s shards: it was not "
                    f"written by this stream's previous mix (not listed in {out}/.feedline-mix/m.json); "
                    "move it away or choose another output.path")
    assert sorted(p.name for p in out.iterdir()) == sorted(foreign)  # nothing written, nothing deleted
    assert all((out / name).read_bytes() == data for name, data in foreign.items())

    # another compression: never written by this run, so left alone, and said
    for name in foreign:
        (out / name).rename(out / name.replace(".gz", ".zst"))
    proc = run_feedline("mix", str(config), check=False)
    assert proc.returncode == 0, proc.stderr
    for name, data in foreign.items():
        zst = name.replace(".gz", ".zst")
        assert (out / zst).read_bytes() == data
        assert f"feedline: warning: {out}/{zst}: not written by stream 'm''s previous mix, left alone" in proc.stderr
    assert len(read_jsonl(out / "m-0000.jsonl.gz")) == 20

    # a rerun into more shards, then fewer: the extra shards it wrote itself go, the foreign ones stay
    config.write_text(config.read_text().replace('"path"', '"max_size_in_bytes": 100, "path"'))
    run_feedline("mix", str(config), check=True)
    many = sorted(p.name for p in out.glob("m-*.jsonl.gz"))
    assert len(many) >= 3
    config.write_text(config.read_text().replace('"max_size_in_bytes": 100, ', ""))
    run_feedline("mix", str(config), check=True)
    assert sorted(p.name for p in out.glob("m-*")) == ["m-0000.jsonl.gz", "m-0001.jsonl.zst", "m-0007.jsonl.zst"]


@pytest.mark.parametrize("where", ["documents", "subset", "file"])
def test_output_path_among_the_inputs_is_an_error_before_any_work(tmp_path, where):
    """output.path = the documents folder replaced the stream's own inputs; now it (or the folder
    of an input below it, or an input file) is a one-line error, and the inputs are unchanged."""
    docs = [{"id": f"d{i}", "text": f"text {i}"} for i in range(5)]
    source = write_jsonl(tmp_path / "documents" / "sub" / "m-0000.jsonl.gz", docs)
    before = source.read_bytes()
    output = {"documents": tmp_path / "documents", "subset": source.parent, "file": source}[where]
    config = tmp_path / "mix.json"
    config.write_text(json.dumps({"streams": [{"name": "m", "documents": [str(tmp_path / "documents" / "**" / "*.gz")],
                                               "output": {"path": str(output)}}]}))
    proc = run_feedline("mix", str(config), check=False)
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"feedline: error: stream 'm': output.path {output} ") and str(source) in line
    assert "choose another output.path" in line
    assert source.read_bytes() == before
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "documents", "documents/sub", "documents/sub/m-0000.jsonl.gz", "mix.json"]


def test_a_failed_mix_leaves_the_previous_output_as_it_was(tmp_path):
    """Shards close as they fill; a stream failing after its first shards used to leave them under
    their final names over the previous run's. Now they stay staged and are removed."""
    config = _small_mix(tmp_path)
    run_feedline("mix", str(config), check=True)
    out = tmp_path / "out"
    before = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    docs = [{"id": f"d{i}", "text": f"text number {i} " * 30} for i in range(200)]
    bad = tmp_path / "documents" / "a.jsonl"
    write_jsonl(bad, docs)
    with bad.open("a") as handle:
        handle.write("not json\n")
    config.write_text(config.read_text().replace('"path"', '"max_size_in_bytes": 500, "path"'))
    proc = run_feedline("mix", str(config), check=False)
    assert proc.returncode == 1 and f"{bad}: line 201: invalid JSON" in proc.stderr
    after = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert [p.name for p in (out / ".feedline-mix").iterdir()] == ["m.json"]


def _spawned_workers(parent: int) -> list[int]:
    """The pool workers of ``parent`` (spawned children running ``spawn_main``, not the
    resource tracker)."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except FileNotFoundError:
        return []
    pids = []
    for child in map(int, children):
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                pids.append(child)
        except FileNotFoundError:
            continue
    return pids


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds the workers through /proc")
def test_kill_9_of_a_mix_worker_ends_the_run_naming_its_stream(tmp_path):
    """``feedline mix --processes 2``: a worker killed with ``kill -9`` ends the command within
    seconds with one line naming a stream and the signal; nothing is left under output.path.
    The workers are stopped (SIGSTOP) as soon as they exist, so each holds its stream when one is
    killed, however fast the streams would mix."""
    for name in ("a", "b"):
        write_jsonl(tmp_path / name / "documents" / "x.jsonl", [{"id": f"{name}{i}", "text": "t"} for i in range(50)])
    config = tmp_path / "mix.json"
    config.write_text(json.dumps({"streams": [
        {"name": name, "documents": [str(tmp_path / name / "documents" / "*.jsonl")],
         "output": {"path": str(tmp_path / "out")}} for name in ("a", "b")]}))
    proc = subprocess.Popen(feedline_cmd("mix", str(config), "--processes", "2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        stopped: set[int] = set()
        while len(stopped) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the workers never started"
            for pid in set(_spawned_workers(proc.pid)) - stopped:
                os.kill(pid, signal.SIGSTOP)
                stopped.add(pid)
            time.sleep(0.01)
        time.sleep(1.0)  # the parent hands each stopped worker its stream (it waits in the pipe)
        victim, other = sorted(stopped)
        os.kill(victim, signal.SIGKILL)
        os.kill(other, signal.SIGCONT)
        killed = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert time.monotonic() - killed < 15
    assert proc.returncode == 1
    errors = [line for line in stderr.splitlines() if line.startswith("feedline: error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert re.match(rf"feedline: error: stream '[ab]': worker process {victim} died \(killed by signal 9 "
                    r"\(SIGKILL\)\) while processing it", errors[0]), errors[0]
    out = tmp_path / "out"
    assert not out.exists() or [p for p in out.rglob("*") if p.is_file()] == []
