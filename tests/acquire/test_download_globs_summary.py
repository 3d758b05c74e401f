"""``feedline download``: globs and --include/--exclude on S3 (moto), the progress total, the
summary line (checked against the manifest and nginx's access log), and --dedup output names
(checked against what ``feedline dedup`` writes for the same shards)."""

from __future__ import annotations

import gzip
import json
import os
import re
import time

import orjson
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.download import checkpoint_path, part_path
from feedline.io.jsonl import stream_jsonl
from tests.cli import run_feedline
from tests.crash import kill_when

MiB = 1 << 20
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def jsonl(docs: list[dict], fmt: str = "") -> bytes:
    raw = b"".join(orjson.dumps(d) + b"\n" for d in docs)
    return {"gz": gzip.compress, "zst": zstandard.ZstdCompressor().compress}.get(fmt, lambda b: b)(raw)


def summary(stderr: str) -> dict[str, float]:
    """The numbers of the summary line (the last ``download: N shard(s)`` line of stderr)."""
    line = [x for x in stderr.splitlines() if re.match(r"download: \d+ shards?, ", x)][-1]
    size = r"([\d.]+) (B|KiB|MiB|GiB)"
    m = re.match(rf"download: (\d+) shards?, {size} \(fetched {size}, reused {size}\)(.*); ([\d.]+) s$", line)
    assert m, line
    out = {
        "shards": int(m[1]),
        "bytes": float(m[2]) * UNITS[m[3]],
        "fetched": float(m[4]) * UNITS[m[5]],
        "reused": float(m[6]) * UNITS[m[7]],
        "seconds": float(m[9]),
    }
    for key, pattern in [("documents", r"; (\d+) documents"), ("kept", r"kept (\d+)"),
                         ("exact", r"exact duplicates (\d+)"), ("near", r"near duplicates (\d+)")]:
        found = re.search(pattern, m[8])
        if found:
            out[key] = int(found[1])
    return out


def close(shown: float, exact: int) -> bool:
    """A size printed with one decimal in its unit is within half a unit step of the exact one."""
    unit = max((u for u in UNITS.values() if exact >= u), default=1)
    return abs(shown - exact) <= 0.05 * unit + 0.5


def run_log(nginx_server, tag: str) -> list[tuple[str, int, int]]:
    out = []
    for line in nginx_server.log_lines():
        if f"run={tag} " in line:
            request, rest = line[1:].split('" ', 1)
            status, sent, _rng = rest.split(" ", 2)
            out.append((request.split()[0], int(status), int(sent)))
    return out


def test_summary_line_against_the_manifest_fresh_then_resumed(nginx_server, tmp_path):
    """A fresh run fetches everything; a run killed with -9 and rerun reuses its verified prefix.
    The summary's numbers equal the manifest's, and the rerun's fetched bytes are what nginx sent."""
    big = os.urandom(24 * MiB)
    (nginx_server.root / "sum-big.bin").write_bytes(big)
    old = time.time() - 3600  # published long ago
    os.utime(nginx_server.root / "sum-big.bin", (old, old))
    docs = [{"id": i, "text": f"summary doc {i}"} for i in range(300)]
    (nginx_server.root / "sum-docs.jsonl.gz").write_bytes(jsonl(docs, "gz"))

    def urls(tag: str) -> list[str]:
        return [f"{nginx_server.url}/sum-docs.jsonl.gz?run={tag}", f"{nginx_server.url}/sum-big.bin?run={tag}"]

    fresh = tmp_path / "fresh"
    proc = run_feedline("download", *urls("fresh"), "--out", str(fresh), check=True)
    assert proc.stdout.strip() == str(fresh / "manifest.json")  # stdout: the manifest path alone
    manifest = json.loads((fresh / "manifest.json").read_text())
    got = summary(proc.stderr)
    total = len(big) + (nginx_server.root / "sum-docs.jsonl.gz").stat().st_size
    assert got["shards"] == 2 and manifest["totals"]["bytes"] == total and close(got["bytes"], total)
    assert manifest["totals"]["fetched_bytes"] == total and close(got["fetched"], total)
    assert manifest["totals"]["reused_bytes"] == 0 and got["reused"] == 0
    assert got["documents"] == manifest["totals"]["documents"] == 300 and "kept" not in got
    assert sum(sent for method, _s, sent in run_log(nginx_server, "fresh") if method == "GET") == total

    out = tmp_path / "resumed"
    dest = out / "sum-big.bin"
    kill_when("download", *urls("killed"), "--out", str(out), "--checkpoint-mb", "1", "--workers", "1",
              ready=checkpoint_path(dest).exists, poll_s=0.001, allow_exit=True)
    ckpt = Checkpoint.load(checkpoint_path(dest))
    kept = ckpt.verified_bytes if ckpt and part_path(dest).exists() else (len(big) if dest.exists() else 0)
    docs_kept = (out / "sum-docs.jsonl.gz").stat().st_size if (out / "sum-docs.jsonl.gz").exists() else 0
    proc = run_feedline("download", *urls("rerun"), "--out", str(out), check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    got = summary(proc.stderr)
    totals = manifest["totals"]
    assert totals["reused_bytes"] == kept + docs_kept > 0
    assert totals["fetched_bytes"] + totals["reused_bytes"] == totals["bytes"] == total
    sent = sum(n for method, _s, n in run_log(nginx_server, "rerun") if method == "GET")
    # What the summary calls fetched came over the wire now; so did the kept prefix's samples
    # that a resume compared with the server (the manifest's resume record counts them).
    compared = sum((shard.get("resume") or {}).get("prefix_sample_bytes", 0) for shard in manifest["shards"])
    assert totals["fetched_bytes"] == sent - compared
    assert close(got["fetched"], totals["fetched_bytes"]) and close(got["reused"], totals["reused_bytes"])
    assert got["reused"] > 0 and got["shards"] == 2 and got["documents"] == 300


def test_bar_total_is_the_sum_of_sizes_and_kept_bytes_start_done(nginx_server, s3_server, tmp_path, capsys, monkeypatch):
    """The total comes from HEAD (nginx) and from the listing (an S3 glob) before any byte moves;
    a rerun over complete shards starts the bar at 100%."""
    from feedline.acquire.runner import RunConfig, run, shard_sizes
    from feedline.io.globs import expand_matches

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    sizes = {"t1.bin": 3 * MiB, "t2.bin": MiB}
    for name, size in sizes.items():
        (nginx_server.root / name).write_bytes(os.urandom(size))
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="bar/t3.bin", Body=os.urandom(MiB // 2))
    listed = expand_matches([f"s3://{s3_server.bucket}/bar/*.bin"])
    urls = [f"{nginx_server.url}/{name}" for name in sizes] + [m.path for m in listed]
    config = RunConfig(urls, tmp_path / "out", workers=2, progress=True,
                       sizes={m.path: m.size for m in listed})
    assert shard_sizes([*urls, f"{nginx_server.url}/absent.bin"], config) == {
        urls[0]: 3 * MiB, urls[1]: MiB, urls[2]: MiB // 2, f"{nginx_server.url}/absent.bin": None,
    }
    run(config)
    frames = capsys.readouterr().err.replace("\r", "\n").splitlines()
    bars = [f for f in frames if f.startswith("download:") and "|" in f]
    assert "0%" in bars[0] and "/4.50M" in bars[0]  # the whole total before the first byte
    assert "100%" in bars[-1] and "4.50M/4.50M" in bars[-1]
    run(RunConfig(urls, tmp_path / "out", workers=2, progress=True))
    bars = [f for f in capsys.readouterr().err.replace("\r", "\n").splitlines() if f.startswith("download:") and "|" in f]
    assert "100%" in bars[0] and "4.50M/4.50M" in bars[0]  # all kept: done at the start


def test_s3_globs_with_include_exclude_on_the_command_line(s3_server, tmp_path):
    docs = [{"id": i, "text": f"s3 glob doc {i}"} for i in range(20)]
    client = s3_server.client()
    for key in ["g/a.jsonl.gz", "g/b.jsonl.gz", "g/notes.txt", "g/sub/c.jsonl.gz", "g/sub/skip.jsonl.gz"]:
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=jsonl(docs, "gz"))
    base = f"s3://{s3_server.bucket}/g"
    out = tmp_path / "one"
    run_feedline("download", f"{base}/*.jsonl.gz", "--out", str(out), env=s3_server.env, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["url"] for s in manifest["shards"]] == [f"{base}/a.jsonl.gz", f"{base}/b.jsonl.gz"]

    out = tmp_path / "two"
    proc = run_feedline("download", f"{base}/", "--include", "*.jsonl.gz", "--exclude", "*skip*",
                        "--out", str(out), env=s3_server.env, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["url"] for s in manifest["shards"]] == [f"{base}/{n}" for n in ("a.jsonl.gz", "b.jsonl.gz", "sub/c.jsonl.gz")]
    assert summary(proc.stderr)["documents"] == 60

    for args, message in [
        ([f"{base}/*.zst"], f"{base}/*.zst: matches no files"),
        ([f"{base}/", "--include", "*.zst"], f"{base}/: matches no files (5 listed, all left out"),
    ]:
        out = tmp_path / "none"
        proc = run_feedline("download", *args, "--out", str(out), env=s3_server.env, timeout=60)
        assert proc.returncode == 1
        errors = [line for line in proc.stderr.splitlines() if line.startswith("feedline: error:")]
        assert len(errors) == 1 and errors[0].startswith(f"feedline: error: {message}"), proc.stderr
        assert "Traceback" not in proc.stderr
        assert not out.exists()  # nothing half-made


def test_dedup_names_match_feedline_dedup_and_survive_a_rerun(nginx_server, tmp_path):
    """download --dedup writes dedup/<name>.jsonl.zst: the names and contents feedline dedup
    gives the same shards in the same order. A rerun (every shard kept) writes them again."""
    docs = [{"id": i, "text": f"shared words in document number {i % 30} and some more words"} for i in range(120)]
    shards = {"n-000.jsonl.zst": jsonl(docs[:40], "zst"), "n-001.jsonl.gz": jsonl(docs[40:80], "gz"),
              "n-002.jsonl": jsonl(docs[80:])}
    for name, body in shards.items():
        (nginx_server.root / name).write_bytes(body)
    out = tmp_path / "out"
    urls = [f"{nginx_server.url}/{name}" for name in shards]
    first = run_feedline("download", *urls, "--out", str(out), "--dedup", check=True)
    mine = {p.name: list(stream_jsonl(p)) for p in sorted((out / "dedup").iterdir())}
    theirs_dir = tmp_path / "theirs"
    run_feedline("dedup", *[str(out / name) for name in shards], "--out", str(theirs_dir), check=True)
    theirs = {p.name: list(stream_jsonl(p)) for p in sorted(theirs_dir.glob("*.jsonl.zst"))}
    assert list(mine) == ["n-000.jsonl.zst", "n-001.jsonl.zst", "n-002.jsonl.zst"] == list(theirs)
    assert mine == theirs
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["kept_path"] for s in manifest["shards"]] == [f"dedup/{n}" for n in mine]
    got = summary(first.stderr)
    totals = manifest["totals"]
    assert (got["documents"], got["kept"], got["exact"], got["near"]) == (
        totals["documents"], totals["kept"], totals["exact_dup"], totals["near_dup"]) == (120, 30, 90, 0)

    before = {n: (out / "dedup" / n).read_bytes() for n in mine}
    again = run_feedline("download", *urls, "--out", str(out), "--dedup", check=True)
    assert summary(again.stderr)["fetched"] == 0
    assert {n: (out / "dedup" / n).read_bytes() for n in mine} == before
    assert json.loads((out / "manifest.json").read_text())["totals"] == {**totals, "fetched_bytes": 0,
                                                                           "reused_bytes": totals["bytes"]}
    assert not list(out.glob("*.kept.jsonl.zst"))


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("update"), st.integers(0, 5 * MiB)),
        st.tuples(st.just("adjust"), st.integers(-3 * MiB, 3 * MiB)),
        st.tuples(st.just("add_total"), st.integers(0, 5 * MiB)),
    ),
    max_size=30,
)


@pytest.mark.filterwarnings("ignore:clamping frac")  # random ops run past the total
@settings(max_examples=80, deadline=None)
@given(total=st.integers(0, 50 * MiB), initial=st.integers(0, 10 * MiB), ops=OPS)
def test_bar_counts_done_and_rates_only_received_bytes(total, initial, ops):
    """Whatever mix of received bytes, kept/discarded bytes and late totals: tqdm's count is the
    bytes done, and its rate base (n - initial) is the bytes received now, never the kept ones."""
    import io
    from contextlib import redirect_stderr

    from feedline.run.progress import Progress

    with redirect_stderr(io.StringIO()) as err:
        progress = Progress("download", total=total, unit="B", initial=initial, enabled=True)
        done, received, expected_total = initial, 0, total
        for op, n in ops:
            getattr(progress, op)(n)
            if op == "update":
                done, received = done + n, received + n
            elif op == "adjust":
                done += n
            else:
                expected_total += n
        bar = progress._bar
        assert (bar.n, bar.n - bar.initial, bar.total) == (done, received, expected_total)
        assert (progress.done, progress.received) == (done, received)
        progress.close()
    assert "download" in err.getvalue()


def test_log_line_without_a_terminal_says_share_rate_and_eta():
    from feedline.run.progress import Progress

    progress = Progress("download", total=4 * MiB, unit="B", initial=MiB, enabled=False)
    progress.started -= 2.0  # two seconds in
    progress.update(MiB)
    status = progress.status(progress.started + 2.0)
    assert status == "2.0 MiB of 4.0 MiB (50%), 512.0 KiB/s, ETA 0:00:04"
