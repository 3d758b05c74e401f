"""``feedline download`` as a real subprocess: kill -9 at random points, rerun, byte-exact result.

The access log of nginx is the witness for "the rerun fetched only the remainder": each run gets
its own query string (``?run=...``, ignored by nginx, stripped from checkpoints like any token),
so the log lines of the final run can be told apart from those of the killed ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.download import checkpoint_path, part_path
from feedline.acquire.prefix import OVERLAP_BYTES, PREFIX_SAMPLE_BLOCK, PREFIX_SAMPLE_BLOCKS
from tests.cli import run_feedline, start_feedline
from tests.crash import kill_when

BIG = 32 << 20
TRIALS = 20
SLOW_TRIALS = 40


def feedline(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    return start_feedline(*args, env=env, **kw)


def run_ok(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_feedline(*args, env=env, check=True)


@pytest.fixture(scope="module")
def big_file(nginx_server) -> tuple[str, str]:
    data = os.urandom(BIG)
    (nginx_server.root / "kill.bin").write_bytes(data)
    # A published file, stable before anyone fetched it (a resume still compares samples of the
    # prefix with it: nginx's ETag cannot prove identity; see test_download.py).
    old = time.time() - 3600
    os.utime(nginx_server.root / "kill.bin", (old, old))
    return f"{nginx_server.url}/kill.bin", hashlib.sha256(data).hexdigest()


def is_sample(rng: str) -> bool:
    """A prefix block read back before a resume (``bytes=A-B`` of one sample block)."""
    first, _, last = rng.removeprefix("bytes=").partition("-")
    return first.isdigit() and last.isdigit() and int(last) - int(first) + 1 == PREFIX_SAMPLE_BLOCK


def final_run_log(
    nginx_server, tag: str, timeout_s: float = 3.0
) -> list[tuple[str, int, int, str]]:
    deadline = time.monotonic() + timeout_s
    while True:
        lines = [line for line in nginx_server.log_lines() if f"run={tag} " in line]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    out = []
    for line in lines:
        request, rest = line[1:].split('" ', 1)
        status, sent, rng = rest.split(" ", 2)
        out.append((request.split()[0], int(status), int(sent), rng.strip('"')))
    return out


@dataclass
class Kill:
    mode: str
    verified: int  # checkpointed bytes left behind
    on_disk: int


def kill_once(url: str, out: Path, tag: str, rng: random.Random) -> Kill:
    """Start a download and SIGKILL it: at a random byte, a random instant, or right at the end."""
    dest = out / "kill.bin"
    mode = rng.choices(["byte", "instant", "end"], weights=[8, 1, 1])[0]
    target = {"byte": int(rng.uniform(0.03, 0.97) * BIG), "end": BIG}.get(mode, 0)
    started = time.monotonic()
    delay = rng.uniform(0.0, 1.2)

    def ready() -> bool:
        if mode == "instant":
            return time.monotonic() - started >= delay
        try:
            return part_path(dest).stat().st_size >= target
        except FileNotFoundError:
            return False

    kill_when("download", f"{url}?run={tag}", "--out", str(out), "--checkpoint-mb", "2", ready=ready,
              poll_s=0.0005, allow_exit=True)
    ckpt = Checkpoint.load(checkpoint_path(dest))
    on_disk = part_path(dest).stat().st_size if part_path(dest).exists() else 0
    return Kill(mode, ckpt.verified_bytes if ckpt and part_path(dest).exists() else 0, on_disk)


def one_trial(nginx_server, url: str, digest: str, tmp_path: Path, trial: int) -> Kill:
    rng = random.Random(1000 + trial)
    out = tmp_path / f"trial{trial}"
    kills = [kill_once(url, out, f"k{trial}a", rng)]
    if rng.random() < 0.3:  # kill the resuming run too
        kills.append(kill_once(url, out, f"k{trial}b", rng))
    last = kills[-1]
    dest = out / "kill.bin"
    ckpt = Checkpoint.load(checkpoint_path(dest))
    if ckpt is not None and part_path(dest).exists():
        # Whatever the kill hit, the checkpoint only promises bytes that are on disk, intact.
        with open(part_path(dest), "rb") as handle:
            prefix = handle.read(ckpt.verified_bytes)
        assert hashlib.sha256(prefix).hexdigest() == ckpt.sha256_prefix, f"trial {trial}: {last}"
    finished_before = dest.exists() and not part_path(dest).exists()
    tag = f"final{trial}"
    run_ok("download", f"{url}?run={tag}", "--out", str(out), "--checkpoint-mb", "2")
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest, f"trial {trial}: {last}"
    assert not part_path(dest).exists() and not checkpoint_path(dest).exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shards"][0]["sha256"] == digest
    logged = [entry for entry in final_run_log(nginx_server, tag) if entry[0] == "GET"]
    gets = [entry for entry in logged if not is_sample(entry[3])]
    if finished_before:
        assert logged == [], f"trial {trial}: complete file fetched again: {logged}"
    elif last.verified > 0:
        # The prefix was intact, so the rerun asked for the remainder and the last OVERLAP_BYTES
        # before it (compared with the disk), plus a few blocks of the prefix read back.
        first = last.verified - OVERLAP_BYTES
        assert gets == [("GET", 206, BIG - first, f"bytes={first}-")], f"trial {trial}: {last}: {gets}"
        assert len(logged) - len(gets) == PREFIX_SAMPLE_BLOCKS, f"trial {trial}: {last}: {logged}"
    else:
        assert gets == [("GET", 200, BIG, "-")], f"trial {trial}: {last}: {gets}"
    return last


def run_trials(nginx_server, big_file, tmp_path, trials: range) -> None:
    url, digest = big_file
    kills = [one_trial(nginx_server, url, digest, tmp_path, t) for t in trials]
    mid = [k for k in kills if 0 < k.verified < BIG]
    # Many kills must land mid-transfer with a checkpoint behind, or the test proves little
    # (early kills on a loaded machine may beat the first background fsync: verified 0, fine).
    assert len(mid) >= len(kills) // 3, kills


def test_kill_9_at_random_points_then_rerun(nginx_server, big_file, tmp_path):
    run_trials(nginx_server, big_file, tmp_path, range(TRIALS))


@pytest.mark.slow
def test_kill_9_many_more_trials(nginx_server, big_file, tmp_path):
    run_trials(nginx_server, big_file, tmp_path, range(TRIALS, TRIALS + SLOW_TRIALS))


# -- the command as users run it -----------------------------------------------------------------


def shard_bytes(docs: list[dict], fmt: str) -> bytes:
    import gzip

    import orjson
    import zstandard

    raw = b"".join(orjson.dumps(d) + b"\n" for d in docs)
    if fmt == "zst":
        return zstandard.ZstdCompressor().compress(raw)
    if fmt == "gz":
        return gzip.compress(raw)
    return raw


def read_zst_jsonl(path: Path) -> list[dict]:
    from feedline.io.jsonl import stream_jsonl

    return list(stream_jsonl(path))


def test_download_with_dedup_end_to_end(nginx_server, tmp_path):
    from feedline.dedup.engine import DedupConfig, dedup_texts
    from tests.dedup.planted_corpus import make_corpus

    corpus = make_corpus(240, 40, 20, seed=7, j_range=(0.9, 1.0))
    docs = [
        {"id": i, "text": t, "src": "planted"}
        for i, t in zip(corpus.ids, corpus.texts, strict=True)
    ]
    half = len(docs) // 2
    shards = {
        "c-000.jsonl.zst": shard_bytes(docs[:half], "zst"),
        "c-001.jsonl.gz": shard_bytes(docs[half:], "gz"),
    }
    for name, body in shards.items():
        (nginx_server.root / name).write_bytes(body)
    listing = tmp_path / "urls.txt"
    listing.write_text("# corpus\n" + "".join(f"{nginx_server.url}/{n}\n" for n in shards) + "\n")
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("".join(f"{hashlib.sha256(b).hexdigest()}  {n}\n" for n, b in shards.items()))
    out = tmp_path / "out"
    proc = run_ok(
        "download",
        str(listing),
        "--out",
        str(out),
        "--dedup",
        "--workers",
        "2",
        "--expected-sha256",
        str(sums),
    )
    assert proc.stdout.strip() == str(out / "manifest.json")
    assert "download:" in proc.stderr  # not a TTY: log lines instead of a bar

    manifest = json.loads((out / "manifest.json").read_text())
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    expected = [str(v) for v in dedup_texts(corpus.ids, corpus.texts, DedupConfig())]
    assert [v["verdict"] for v in verdicts] == expected  # same engine, same order, across shards
    assert [v["id"] for v in verdicts] == corpus.ids
    for _a, b in corpus.exact_pairs:
        assert verdicts[b]["verdict"].startswith("exact_dup_of:")
    high = [b for _a, b, j in corpus.near_pairs if j >= 0.9]
    assert sum(verdicts[b]["verdict"] != "kept" for b in high) >= 0.95 * len(high)
    # The names feedline dedup gives the same shards (see test_dedup_names_match_feedline_dedup).
    kept = read_zst_jsonl(out / "dedup" / "c-000.jsonl.zst") + read_zst_jsonl(
        out / "dedup" / "c-001.jsonl.zst"
    )
    assert kept == [d for d, v in zip(docs, expected, strict=True) if v == "kept"]
    totals = manifest["totals"]
    assert totals["documents"] == len(docs)
    assert totals["kept"] == expected.count("kept")
    assert totals["exact_dup"] == sum(v.startswith("exact_dup_of:") for v in expected) >= 20
    assert totals["near_dup"] == sum(v.startswith("near_dup_of:") for v in expected) > 20
    for entry, (name, body) in zip(manifest["shards"], shards.items(), strict=True):
        assert entry["path"] == name and entry["url"] == f"{nginx_server.url}/{name}"
        assert (
            entry["sha256"]
            == hashlib.sha256(body).hexdigest()
            == hashlib.sha256((out / name).read_bytes()).hexdigest()
        )
        assert entry["bytes"] == len(body)
        assert entry["kept"] + entry["exact_dup"] + entry["near_dup"] == entry["documents"]
    assert manifest["parameters"]["dedup"]["threshold"] == 0.8
    assert (
        manifest["verdicts"]["sha256"]
        == hashlib.sha256((out / "verdicts.jsonl").read_bytes()).hexdigest()
    )


def test_counts_and_skipped_bad_lines_without_dedup(nginx_server, tmp_path):
    docs = [{"id": f"x{i}", "text": f"document {i}"} for i in range(500)]
    (nginx_server.root / "plain.jsonl").write_bytes(
        shard_bytes(docs[:100], "") + b"{not json\n" + shard_bytes(docs[100:], "")
    )
    (nginx_server.root / "other.jsonl.zst").write_bytes(shard_bytes(docs, "zst"))
    (nginx_server.root / "blob.bin").write_bytes(b"\x00" * 1000)
    out = tmp_path / "out"
    urls = [f"{nginx_server.url}/{n}" for n in ("plain.jsonl", "other.jsonl.zst", "blob.bin")]
    run_ok(
        "download",
        *urls,
        "--out",
        str(out),
        "--skip-bad-lines",
        "--manifest",
        str(tmp_path / "m" / "run.json"),
    )
    manifest = json.loads((tmp_path / "m" / "run.json").read_text())
    got = {
        Path(s["path"]).name: (s["documents"], s["bad_lines"], s["kept"])
        for s in manifest["shards"]
    }
    assert got == {
        "plain.jsonl": (500, 1, None),
        "other.jsonl.zst": (500, 0, None),
        "blob.bin": (None, 0, None),
    }
    assert manifest["shards"][0]["path"] == "../out/plain.jsonl"
    assert manifest["verdicts"] is None


def test_bad_line_fails_with_one_line_and_no_manifest(nginx_server, tmp_path):
    import zstandard

    (nginx_server.root / "broken.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(b'{"id": 1}\n{"id": \n')
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "feedline",
            "download",
            f"{nginx_server.url}/broken.jsonl.zst",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("feedline: error:")]
    assert len(errors) == 1 and "broken.jsonl.zst: line 2: invalid JSON" in errors[0]
    assert "Traceback" not in proc.stderr
    assert not (out / "manifest.json").exists()


def test_expected_hash_mismatch_fails_and_keeps_bytes_aside(nginx_server, tmp_path):
    (nginx_server.root / "tampered.bin").write_bytes(os.urandom(10_000))
    sums = tmp_path / "sums"
    sums.write_text(f"{'0' * 64}  {nginx_server.url}/tampered.bin\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "feedline",
            "download",
            f"{nginx_server.url}/tampered.bin",
            "--out",
            str(out),
            "--expected-sha256",
            str(sums),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "does not match the expected" in proc.stderr
    assert (out / "tampered.bin.corrupt").exists() and not (out / "tampered.bin").exists()
    assert not (out / "manifest.json").exists()


def test_s3_shard_and_no_token_in_outputs(nginx_server, s3_server, tmp_path):
    docs = [{"id": i, "text": f"t {i}"} for i in range(50)]
    s3_server.client().put_object(
        Bucket=s3_server.bucket, Key="cli/s.jsonl.gz", Body=shard_bytes(docs, "gz")
    )
    (nginx_server.root / "tok.jsonl").write_bytes(shard_bytes(docs, ""))
    out = tmp_path / "out"
    run_ok(
        "download",
        f"s3://{s3_server.bucket}/cli/s.jsonl.gz",
        f"{nginx_server.url}/tok.jsonl?token=SECRET123",
        "--out",
        str(out),
        env=s3_server.env,
    )
    text = (out / "manifest.json").read_text()
    assert "SECRET123" not in text and "testing" not in text
    manifest = json.loads(text)
    assert [s["documents"] for s in manifest["shards"]] == [50, 50]
    assert manifest["shards"][0]["url"] == f"s3://{s3_server.bucket}/cli/s.jsonl.gz"


def test_user_errors_are_one_line(tmp_path):
    for args, message in [
        (["not-a-url-or-file"], "neither a URL"),
        (["http://127.0.0.1:9/a.bin", "--bands", "4"], "--bands/--rows only apply with --dedup"),
        (["http://127.0.0.1:9/a/", "--workers", "1"], "HTTP has no listing"),
        (["http://127.0.0.1:9/a/*.bin"], "http://127.0.0.1:9/a/*.bin: HTTP has no listing"),
        (["http://127.0.0.1:9/a/%2E%2E", "--workers", "1"], "cannot name a local file"),
        (["http://127.0.0.1:9/a.bin", "--workers", "0"], "--workers must be an integer >= 1, got 0"),
        (["http://127.0.0.1:9/a.bin", "--dedup", "--num-perm", "0"], "--num-perm must be an integer >= 1, got 0"),
    ]:
        proc = run_feedline("download", *args, "--out", str(tmp_path), timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert (
            proc.stderr.strip().splitlines()[-1].startswith("feedline: error:")
            and message in proc.stderr
        )


def test_python_api_names_its_keywords(tmp_path):
    from feedline.acquire.download import download_shard
    from feedline.acquire.errors import DownloadError
    from feedline.acquire.runner import RunConfig

    with pytest.raises(DownloadError, match=r"^workers must be an integer >= 1, got 0$"):
        RunConfig(["http://127.0.0.1:9/a.bin"], tmp_path, workers=0)
    with pytest.raises(DownloadError, match=r"checkpoint_bytes \(10\) must be at least buffer_bytes \(20\)"):
        download_shard("http://127.0.0.1:9/a.bin", tmp_path / "a.bin", checkpoint_bytes=10, buffer_bytes=20)


def test_progress_bar_on_a_terminal_counts_every_byte(nginx_server, tmp_path, capsys):
    from feedline.acquire.runner import RunConfig, run

    sizes = {"p1.bin": 3 << 20, "p2.bin": 1 << 20}
    for name, size in sizes.items():
        (nginx_server.root / name).write_bytes(os.urandom(size))
    urls = [f"{nginx_server.url}/{name}" for name in sizes]
    manifest = run(RunConfig(urls, tmp_path / "out", workers=2, progress=True))
    err = capsys.readouterr().err
    assert "download" in err and "4.00M" in err  # tqdm's final byte count over both shards
    assert json.loads(manifest.read_text())["totals"]["bytes"] == sum(sizes.values())


@pytest.mark.parametrize(
    "fractions", [(0.5,), pytest.param((0.2, 0.8, 0.95), marks=pytest.mark.slow)]
)
def test_kill_9_of_an_s3_download_then_rerun(s3_server, tmp_path, fractions):
    """The same promise on S3 (moto server): resume from the checkpoint, pinned to the ETag."""
    data = os.urandom(12 << 20)
    key = f"kill/s{len(fractions)}.bin"
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=data)
    url = f"s3://{s3_server.bucket}/{key}"
    digest = hashlib.sha256(data).hexdigest()
    for trial, fraction in enumerate(fractions):
        # A late kill point can lose the race with the end of the download (the .part file is
        # renamed between two polls): then the trial starts again in a fresh folder.
        for attempt in range(5):
            out = tmp_path / f"s3-{trial}-{attempt}"
            dest = out / key.rpartition("/")[2]

            def ready(dest: Path = dest, fraction: float = fraction) -> bool:
                try:
                    done = part_path(dest).stat().st_size
                except FileNotFoundError:
                    return False
                return done >= fraction * len(data) and checkpoint_path(dest).exists()

            kill_when("download", url, "--out", str(out), "--checkpoint-mb", "2", env=s3_server.env,
                      ready=ready, poll_s=0.001, allow_exit=True)
            if part_path(dest).exists():
                break
        ckpt = Checkpoint.load(checkpoint_path(dest))
        assert ckpt is not None and 0 < ckpt.verified_bytes < len(data)
        run_ok("download", url, "--out", str(out), "--checkpoint-mb", "2", env=s3_server.env)
        assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
        shard = json.loads((out / "manifest.json").read_text())["shards"][0]
        assert (shard["reused_bytes"], shard["fetched_bytes"], shard["restarts"]) == (
            ckpt.verified_bytes,
            len(data) - ckpt.verified_bytes,
            0,
        )


def test_credentials_never_printed(nginx_server, tmp_path):
    """Passwords and query tokens stay out of errors and of the -vv log (urllib3's included)."""
    secret = "PASSWORD77"
    token = "TOKEN88"
    host = nginx_server.url.split("://", 1)[1]
    cases = [
        # two URLs that would save to one name
        [f"http://alice:{secret}@{host}/a/x.bin?token={token}", f"http://{host}/b/x.bin?sig={token}"],
        # a URL with no file name
        [f"http://alice:{secret}@{host}/dir/?token={token}"],
    ]
    for urls in cases:
        proc = run_feedline("download", *urls, "--out", str(tmp_path / "o"), timeout=60)
        assert proc.returncode == 1 and "feedline: error:" in proc.stderr, proc.stderr
        assert secret not in proc.stderr and token not in proc.stderr, proc.stderr
    (nginx_server.root / "logged.jsonl").write_bytes(b'{"id": 1, "text": "x"}\n')
    proc = run_ok(
        "-vv",
        "download",
        f"http://alice:{secret}@{host}/logged.jsonl?token={token}&run=1",
        "--out",
        str(tmp_path / "ok"),
    )
    assert "urllib3" in proc.stderr and "logged.jsonl" in proc.stderr  # the debug log did run
    assert secret not in proc.stderr and token not in proc.stderr, proc.stderr


def test_null_byte_in_url_is_a_one_line_error(tmp_path):
    proc = run_feedline("download", "http://127.0.0.1:9/a%00b.bin", "--out", str(tmp_path), timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().startswith("feedline: error:") and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_failed_shard_still_gets_a_manifest_of_the_others(nginx_server, tmp_path):
    docs = [{"id": i, "text": f"t {i}"} for i in range(7)]
    (nginx_server.root / "good.jsonl").write_bytes(shard_bytes(docs, ""))
    out = tmp_path / "out"
    proc = run_feedline("download", f"{nginx_server.url}/good.jsonl", f"{nginx_server.url}/gone.jsonl", "--out", str(out), timeout=120)
    assert proc.returncode == 1 and "1 of 2 shards failed" in proc.stderr, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is False
    assert [s["path"] for s in manifest["shards"]] == ["good.jsonl"]
    assert manifest["shards"][0]["sha256"] == hashlib.sha256(shard_bytes(docs, "")).hexdigest()
    assert [f["url"] for f in manifest["failed"]] == [f"{nginx_server.url}/gone.jsonl"]
    assert "404" in manifest["failed"][0]["error"]
    assert sorted(p.name for p in out.iterdir()) == ["good.jsonl", "manifest.json"]
