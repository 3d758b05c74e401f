"""download_shard against real nginx, moto S3 and the fault proxy: every resume rule, byte-exact."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path

import pytest

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.download import (
    checkpoint_path,
    corrupt_path,
    download_shard,
    part_path,
)
from feedline.acquire.errors import DownloadError
from feedline.acquire.prefix import OVERLAP_BYTES, PREFIX_SAMPLE_BLOCK, PREFIX_SAMPLE_BLOCKS
from feedline.io import HttpRangeClient
from feedline.io.atomic import temp_path
from feedline.io.redact import redact_url
from feedline.io.retry import RetryPolicy

SIZE = 6 << 20
MiB = 1 << 20
FAST_RETRY = RetryPolicy(attempts=4, base_s=0.01, max_s=0.05)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def serve(nginx_server, name: str, size: int = SIZE, seed: int = 0) -> bytes:
    data = os.urandom(size) if seed == 0 else hashlib.sha256(bytes([seed])).digest() * (size // 32)
    (nginx_server.root / name).write_bytes(data)
    return data


def log_for(nginx_server, name: str) -> list[tuple[str, int, int, str]]:
    """(request, status, body bytes, Range header) of every logged request for ``name``."""
    out = []
    for line in nginx_server.log_lines():
        request, rest = line[1:].split('" ', 1)
        status, sent, rng = rest.split(" ", 2)
        if f"/{name} " in request or f"/{name}?" in request:
            out.append((request, int(status), int(sent), rng.strip('"')))
    return out


def transfers(nginx_server, name: str) -> list[tuple[str, int, int, str]]:
    """The GETs for ``name`` without the prefix blocks read back before a resume."""
    return [e for e in log_for(nginx_server, name) if e[0].startswith("GET") and not _is_sample(e[3])]


def _is_sample(rng: str) -> bool:
    match = re.fullmatch(r"bytes=(\d+)-(\d+)", rng)
    return match is not None and int(match[2]) - int(match[1]) + 1 == PREFIX_SAMPLE_BLOCK


def samples(nginx_server, name: str) -> int:
    return sum(1 for e in log_for(nginx_server, name) if e[0].startswith("GET") and _is_sample(e[3]))


#: Bytes a resume compares with the server before appending: the overlap and the random blocks.
COMPARED = OVERLAP_BYTES + PREFIX_SAMPLE_BLOCKS * PREFIX_SAMPLE_BLOCK


def leave_partial(
    url: str, dest: Path, data: bytes, verified: int, *, tail: bytes = b""
) -> Checkpoint:
    """The state a killed run leaves: ``verified`` fsynced bytes (+ an unverified tail) and a checkpoint."""
    head = HttpRangeClient().head(url)
    part_path(dest).write_bytes(data[:verified] + tail)
    ckpt = Checkpoint(
        url=redact_url(url),
        expected_size=head.size,
        verified_bytes=verified,
        sha256_prefix=sha(data[:verified]),
        etag=head.etag,
        last_modified=head.last_modified,
    )
    ckpt.save(checkpoint_path(dest))
    return ckpt


def assert_done(dest: Path, data: bytes, result) -> None:
    assert dest.read_bytes() == data
    assert result.sha256 == sha(data)
    assert result.size == len(data)
    assert not checkpoint_path(dest).exists()
    assert not part_path(dest).exists()


def test_fresh_download_is_one_plain_get(nginx_server, tmp_path):
    data = serve(nginx_server, "fresh.bin")
    dest = tmp_path / "fresh.bin"
    result = download_shard(f"{nginx_server.url}/fresh.bin", dest, checkpoint_bytes=MiB)
    assert_done(dest, data, result)
    assert (result.reused_bytes, result.fetched_bytes, result.restarts) == (0, SIZE, 0)
    assert log_for(nginx_server, "fresh.bin") == [("GET /fresh.bin HTTP/1.1", 200, SIZE, "-")]


def test_resume_fetches_only_the_remainder_with_if_range(nginx_server, tmp_path):
    data = serve(nginx_server, "resume.bin")
    url = f"{nginx_server.url}/resume.bin"
    dest = tmp_path / "resume.bin"
    verified = 2 * MiB + 12345
    leave_partial(url, dest, data, verified)
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert (result.reused_bytes, result.fetched_bytes, result.restarts) == (
        verified,
        SIZE - verified,
        0,
    )
    # One ranged GET from a little before the offset (its first bytes are compared with the
    # disk), and the random blocks of the prefix read back beside it.
    first = verified - OVERLAP_BYTES
    assert transfers(nginx_server, "resume.bin") == [
        ("GET /resume.bin HTTP/1.1", 206, SIZE - first, f"bytes={first}-")
    ]
    assert samples(nginx_server, "resume.bin") == PREFIX_SAMPLE_BLOCKS
    assert result.resume["prefix_sample_bytes"] == COMPARED


def test_temp_of_a_checkpoint_save_killed_midway_is_removed_on_resume(nginx_server, tmp_path):
    """A kill -9 inside Checkpoint.save leaves its temp (never a half checkpoint): the next run,
    holding the shard's lock, clears it and still resumes from the intact checkpoint."""
    data = serve(nginx_server, "stale.bin")
    url = f"{nginx_server.url}/stale.bin"
    dest = tmp_path / "stale.bin"
    leave_partial(url, dest, data, 3 * MiB)
    stale = temp_path(checkpoint_path(dest))
    stale.write_text('{"verified_bytes": 4')  # what the killed save had written so far
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert result.reused_bytes == 3 * MiB
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stale.bin"]  # no temp, no lock left


def test_unverified_tail_longer_than_checkpoint_is_dropped(nginx_server, tmp_path):
    data = serve(nginx_server, "tail.bin")
    url = f"{nginx_server.url}/tail.bin"
    dest = tmp_path / "tail.bin"
    verified = 3 * MiB
    leave_partial(url, dest, data, verified, tail=b"\x00" * 777_777)  # written, never checkpointed
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert result.reused_bytes == verified
    assert transfers(nginx_server, "tail.bin")[-1] == (
        "GET /tail.bin HTTP/1.1",
        206,
        SIZE - verified + OVERLAP_BYTES,
        f"bytes={verified - OVERLAP_BYTES}-",
    )


def test_corrupted_prefix_restarts_from_zero(nginx_server, tmp_path):
    data = serve(nginx_server, "corrupt.bin")
    url = f"{nginx_server.url}/corrupt.bin"
    dest = tmp_path / "corrupt.bin"
    leave_partial(url, dest, data, 4 * MiB)
    with open(part_path(dest), "r+b") as handle:  # one flipped byte inside the verified prefix
        handle.seek(1_000_000)
        byte = handle.read(1)
        handle.seek(1_000_000)
        handle.write(bytes([byte[0] ^ 0x01]))
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert (result.reused_bytes, result.restarts) == (0, 1)
    assert log_for(nginx_server, "corrupt.bin")[-1] == ("GET /corrupt.bin HTTP/1.1", 200, SIZE, "-")


@pytest.mark.parametrize("claimed", [5 * MiB, 1 * MiB, SIZE + 10])
def test_tampered_checkpoint_offset_restarts_from_zero(nginx_server, tmp_path, claimed):
    name = f"tamper{claimed}.bin"
    data = serve(nginx_server, name)
    url = f"{nginx_server.url}/{name}"
    dest = tmp_path / name
    leave_partial(url, dest, data, 3 * MiB)
    raw = json.loads(checkpoint_path(dest).read_text())
    raw["verified_bytes"] = claimed  # hash still of the first 3 MiB
    checkpoint_path(dest).write_text(json.dumps(raw))
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert (result.reused_bytes, result.restarts) == (0, 1)
    assert log_for(nginx_server, name)[-1] == (f"GET /{name} HTTP/1.1", 200, SIZE, "-")


def test_replaced_source_new_etag_never_splices(nginx_server, tmp_path):
    old = serve(nginx_server, "replaced.bin")
    url = f"{nginx_server.url}/replaced.bin"
    dest = tmp_path / "replaced.bin"
    ckpt = leave_partial(url, dest, old, 2 * MiB)
    new = os.urandom(SIZE)  # same size: only the validator tells them apart
    (nginx_server.root / "replaced.bin").write_bytes(new)
    later = time.time() + 5
    os.utime(nginx_server.root / "replaced.bin", (later, later))
    assert HttpRangeClient().head(url).etag != ckpt.etag
    result = download_shard(url, dest)
    assert_done(dest, new, result)
    assert result.restarts == 1
    # If-Range did its job: the ranged request was answered with the whole new object.
    assert transfers(nginx_server, "replaced.bin")[-1] == (
        "GET /replaced.bin HTTP/1.1",
        200,
        SIZE,
        f"bytes={2 * MiB - OVERLAP_BYTES}-",
    )
    assert samples(nginx_server, "replaced.bin") == 0  # no read-back once the server said 200


def test_server_ignoring_range_restarts_with_the_same_body(nginx_server, tmp_path):
    data = serve(nginx_server, "norange.bin")
    url = f"{nginx_server.norange_url}/norange.bin"
    dest = tmp_path / "norange.bin"
    leave_partial(url, dest, data, 2 * MiB)
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert (result.reused_bytes, result.fetched_bytes, result.restarts) == (0, SIZE, 1)
    gets = [e for e in log_for(nginx_server, "norange.bin") if e[0].startswith("GET")]
    assert gets == [("GET /norange/norange.bin HTTP/1.1", 200, SIZE, f"bytes={2 * MiB - OVERLAP_BYTES}-")]


def test_last_modified_validator_when_there_is_no_etag(nginx_server, tmp_path):
    data = serve(nginx_server, "noetag.bin")
    url = f"{nginx_server.noetag_url}/noetag.bin"
    dest = tmp_path / "noetag.bin"
    ckpt = leave_partial(url, dest, data, MiB)
    assert ckpt.etag is None and ckpt.last_modified
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert result.reused_bytes == MiB
    assert transfers(nginx_server, "noetag.bin")[-1][1:] == (
        206, SIZE - MiB + OVERLAP_BYTES, f"bytes={MiB - OVERLAP_BYTES}-"
    )


def test_complete_part_before_rename_is_compared_and_finishes(nginx_server, tmp_path):
    data = serve(nginx_server, "whole.bin")
    url = f"{nginx_server.url}/whole.bin"
    dest = tmp_path / "whole.bin"
    leave_partial(url, dest, data, SIZE)  # killed after the last byte, before the rename
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert (result.reused_bytes, result.fetched_bytes, result.restarts) == (SIZE, 0, 0)
    # The re-read of the prefix's last bytes is all that is fetched: it ends at the object's end.
    last = transfers(nginx_server, "whole.bin")[-1]
    assert last[1:] == (206, OVERLAP_BYTES, f"bytes={SIZE - OVERLAP_BYTES}-")


def test_416_for_an_offset_past_the_object_restarts(nginx_server, tmp_path):
    data = serve(nginx_server, "shrunk.bin")
    url = f"{nginx_server.url}/shrunk.bin"
    dest = tmp_path / "shrunk.bin"
    longer = data + b"x" * 5000  # a checkpoint that claims more than the object holds
    leave_partial(url, dest, longer, len(longer))
    raw = json.loads(checkpoint_path(dest).read_text())
    raw["expected_size"] = len(longer)
    checkpoint_path(dest).write_text(json.dumps(raw))
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert result.restarts == 1
    # The re-read before the claimed offset reaches the real end: its size differs, so byte 0.
    assert [e[1] for e in transfers(nginx_server, "shrunk.bin")][-2:] == [206, 200]


def test_drop_mid_body_retries_from_the_verified_offset(nginx_server, fault_proxy, tmp_path):
    data = serve(nginx_server, "drop.bin")
    fault_proxy.add_fault("drop", after_bytes=2_500_000, count=2)
    dest = tmp_path / "drop.bin"
    result = download_shard(
        f"{fault_proxy.url}/drop.bin", dest, retry=FAST_RETRY, checkpoint_bytes=MiB
    )
    assert_done(dest, data, result)
    assert result.restarts == 0 and result.fetched_bytes == SIZE
    ranges = [rng for method, path, rng in fault_proxy.requests if method == "GET"]
    # Each retry re-reads (and compares) the last OVERLAP_BYTES before the byte it resumes at.
    # (the proxy cuts each body after 2 500 000 bytes, the re-read bytes included).
    second = 2_500_000 - OVERLAP_BYTES
    assert [r for r in ranges if r is None or not _is_sample(r)] == [
        None, f"bytes={second}-", f"bytes={second + 2_500_000 - OVERLAP_BYTES}-"
    ]


def test_503_is_retried(nginx_server, fault_proxy, tmp_path):
    data = serve(nginx_server, "busy.bin")
    fault_proxy.add_fault("status", code=503, count=2)
    dest = tmp_path / "busy.bin"
    result = download_shard(f"{fault_proxy.url}/busy.bin", dest, retry=FAST_RETRY)
    assert_done(dest, data, result)
    assert len(fault_proxy.requests) == 3


def test_persistent_drops_give_up_and_leave_a_resumable_checkpoint(
    nginx_server, fault_proxy, tmp_path
):
    data = serve(nginx_server, "flaky.bin")
    fault_proxy.add_fault("drop", after_bytes=0, count=100)
    dest = tmp_path / "flaky.bin"
    url = f"{fault_proxy.url}/flaky.bin"
    with pytest.raises(DownloadError, match="rerun to resume"):
        download_shard(url, dest, retry=RetryPolicy(attempts=3, base_s=0.01, max_s=0.02))
    fault_proxy.clear()
    fault_proxy.add_fault("drop", after_bytes=3_000_000)
    with pytest.raises(DownloadError):
        download_shard(url, dest, retry=RetryPolicy(attempts=1), checkpoint_bytes=MiB)
    ckpt = Checkpoint.load(checkpoint_path(dest))
    assert ckpt is not None and ckpt.verified_bytes == 3_000_000
    fault_proxy.clear()
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert result.reused_bytes == 3_000_000
    gets = [r for m, _path, r in fault_proxy.requests if m == "GET" and r and not _is_sample(r)]
    assert gets[-1] == f"bytes={3_000_000 - OVERLAP_BYTES}-"


def test_missing_object_fails_at_once(nginx_server, tmp_path):
    started = time.monotonic()
    with pytest.raises(DownloadError, match="404"):
        download_shard(f"{nginx_server.url}/missing.bin", tmp_path / "missing.bin")
    assert time.monotonic() - started < 2


def test_expected_sha256_mismatch_keeps_bytes_aside(nginx_server, tmp_path):
    data = serve(nginx_server, "wrong.bin")
    dest = tmp_path / "wrong.bin"
    with pytest.raises(DownloadError, match="does not match the expected"):
        download_shard(f"{nginx_server.url}/wrong.bin", dest, expected_sha256="ab" * 32)
    assert not dest.exists() and not checkpoint_path(dest).exists() and not part_path(dest).exists()
    assert corrupt_path(dest).read_bytes() == data


def test_expected_sha256_match_and_completed_file_is_not_fetched_again(nginx_server, tmp_path):
    data = serve(nginx_server, "again.bin")
    url = f"{nginx_server.url}/again.bin"
    dest = tmp_path / "again.bin"
    first = download_shard(url, dest, expected_sha256=sha(data).upper())
    assert_done(dest, data, first)
    before = len(log_for(nginx_server, "again.bin"))
    second = download_shard(url, dest, expected_sha256=sha(data))
    assert second.already_complete and second.sha256 == sha(data) and second.fetched_bytes == 0
    assert [e[0].split()[0] for e in log_for(nginx_server, "again.bin")[before:]] == ["HEAD"]


def test_checkpoint_never_ahead_of_the_data(nginx_server, tmp_path):
    """Every checkpoint written during a transfer describes bytes that are on disk."""
    data = serve(nginx_server, "cadence.bin")
    dest = tmp_path / "cadence.bin"
    seen: list[tuple[int, bool]] = []

    def on_bytes(_n: int) -> None:
        ckpt = Checkpoint.load(checkpoint_path(dest))
        if ckpt is not None:
            prefix = part_path(dest).read_bytes()[: ckpt.verified_bytes]
            seen.append((ckpt.verified_bytes, sha(prefix) == ckpt.sha256_prefix))
        time.sleep(0.01)  # give the background checkpoint thread its turn on a loaded machine

    download_shard(
        f"{nginx_server.url}/cadence.bin",
        dest,
        checkpoint_bytes=MiB,
        on_bytes=on_bytes,
        fsync=False,
    )
    assert dest.read_bytes() == data
    # at most one per MiB (a checkpoint is skipped while the previous fsync still runs)
    assert seen and {v for v, _ in seen} <= {k * MiB for k in range(1, SIZE // MiB)}
    assert all(ok for _, ok in seen)


# -- S3 (moto server) --------------------------------------------------------------------------


def put_s3(s3_server, key: str, data: bytes) -> str:
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=data)
    return f"s3://{s3_server.bucket}/{key}"


def test_s3_download_and_resume(s3_server, tmp_path):
    data = os.urandom(3 * MiB + 5)
    url = put_s3(s3_server, "shards/a.bin", data)
    dest = tmp_path / "a.bin"
    first = download_shard(url, dest, storage_options=s3_server.storage_options)
    assert_done(dest, data, first)
    dest.unlink()
    # leave a verified prefix behind, pinned to the object's ETag
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    etag = fs.info(f"{s3_server.bucket}/shards/a.bin")["ETag"]
    part_path(dest).write_bytes(data[: 2 * MiB])
    Checkpoint(url, len(data), 2 * MiB, sha(data[: 2 * MiB]), etag=etag).save(checkpoint_path(dest))
    resumed = download_shard(url, dest, storage_options=s3_server.storage_options)
    assert_done(dest, data, resumed)
    assert (resumed.reused_bytes, resumed.fetched_bytes, resumed.restarts) == (
        2 * MiB,
        len(data) - 2 * MiB,
        0,
    )


def test_s3_replaced_object_restarts(s3_server, tmp_path):
    old = os.urandom(2 * MiB)
    url = put_s3(s3_server, "shards/b.bin", old)
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    etag = fs.info(f"{s3_server.bucket}/shards/b.bin")["ETag"]
    dest = tmp_path / "b.bin"
    part_path(dest).write_bytes(old[:MiB])
    Checkpoint(url, len(old), MiB, sha(old[:MiB]), etag=etag).save(checkpoint_path(dest))
    new = os.urandom(2 * MiB)
    put_s3(s3_server, "shards/b.bin", new)
    result = download_shard(url, dest, storage_options=s3_server.storage_options)
    assert_done(dest, new, result)
    assert (result.reused_bytes, result.restarts) == (0, 1)


def test_s3_missing_object(s3_server, tmp_path):
    with pytest.raises(DownloadError, match="no such object"):
        download_shard(
            f"s3://{s3_server.bucket}/nope.bin",
            tmp_path / "nope.bin",
            storage_options=s3_server.storage_options,
        )


def test_second_writer_on_the_same_dest_is_refused(nginx_server, tmp_path):
    from feedline.io import LockTimeout, process_lock

    serve(nginx_server, "locked.bin", size=1000)
    dest = tmp_path / "locked.bin"
    with process_lock(tmp_path / ".locked.bin.lock", 1), pytest.raises(LockTimeout):
        download_shard(f"{nginx_server.url}/locked.bin", dest)


def test_connection_reset_mid_body_resumes_at_the_exact_byte(nginx_server, tmp_path):
    """A reset raises mid-read (unlike a clean close, which is a short body): nothing is lost."""
    from feedline.acquire.sources import open_source
    from feedline.io import TransientError

    data = serve(nginx_server, "reset.bin")
    real = open_source(f"{nginx_server.url}/reset.bin")
    cut = 1_234_567

    class ResetOnce:
        url = real.url
        resets = 0
        coarse_validators = False  # this test is about the reset, not the read-back

        def stat(self):
            return real.stat()

        def open(self, offset, ckpt):
            body = real.open(offset, ckpt)
            if self.resets:
                return body
            self.resets += 1
            inner, seen = body.reader, [0]

            def reader(view):
                if seen[0] >= cut:
                    raise TransientError("connection reset by peer")
                got = inner(view[: cut - seen[0]])
                seen[0] += got
                return got

            body.reader = reader
            return body

    dest = tmp_path / "reset.bin"
    result = download_shard(real.url, dest, source=ResetOnce(), retry=FAST_RETRY)
    assert_done(dest, data, result)
    gets = [e for e in log_for(nginx_server, "reset.bin") if e[0].startswith("GET")]
    assert gets[-1] == ("GET /reset.bin HTTP/1.1", 206, SIZE - cut, f"bytes={cut}-")


@pytest.mark.timeout(60)
def test_trickling_server_is_retried_then_fails_in_bounded_time(nginx_server, fault_proxy, tmp_path):
    data = serve(nginx_server, "trickle.bin", size=MiB)
    url = f"{fault_proxy.url}/trickle.bin"
    dest = tmp_path / "trickle.bin"
    options = {"timeout_s": 0.5, "min_bytes_per_s": 1000}
    fault_proxy.add_fault("trickle", bytes_per_s=4, count=100)
    began = time.monotonic()
    with pytest.raises(DownloadError, match="too slow"):
        download_shard(url, dest, storage_options=options, retry=FAST_RETRY)
    assert time.monotonic() - began < 20
    fault_proxy.clear()
    fault_proxy.add_fault("trickle", bytes_per_s=4, count=1)
    result = download_shard(url, dest, storage_options=options, retry=FAST_RETRY)
    assert_done(dest, data, result)


@pytest.mark.parametrize(
    "content",
    ["[1, 2]", "5", "null", '"text"', '{"schema": 1, "url": "u", "expected_size": 1, '
     '"verified_bytes": 1, "sha256_prefix": "x", "etag": 5}'],
)
def test_checkpoint_that_is_valid_json_but_not_a_checkpoint_restarts(nginx_server, tmp_path, content):
    data = serve(nginx_server, "notobj.bin", size=MiB)
    dest = tmp_path / "notobj.bin"
    part_path(dest).write_bytes(data[:1000])
    checkpoint_path(dest).write_text(content)
    result = download_shard(f"{nginx_server.url}/notobj.bin", dest)
    assert_done(dest, data, result)
    assert result.reused_bytes == 0


def test_failed_download_leaves_no_empty_part_and_no_lock(nginx_server, fault_proxy, tmp_path):
    dest = tmp_path / "missing.bin"
    with pytest.raises(DownloadError, match="404"):
        download_shard(f"{nginx_server.url}/missing.bin", dest)
    serve(nginx_server, "busy503.bin", size=MiB)
    fault_proxy.add_fault("status", code=503, count=100)
    busy = tmp_path / "busy503.bin"
    with pytest.raises(DownloadError, match="giving up"):
        download_shard(f"{fault_proxy.url}/busy503.bin", busy, retry=FAST_RETRY)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_successful_download_leaves_no_lock_file(nginx_server, tmp_path):
    data = serve(nginx_server, "nolock.bin", size=MiB)
    dest = tmp_path / "shard-0.bin"
    result = download_shard(f"{nginx_server.url}/nolock.bin", dest)
    assert_done(dest, data, result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0.bin"]


@pytest.mark.parametrize(
    ("case", "root"),
    [
        ("same-second", "url"),  # replaced 0.8 s after the old version, within its mtime second
        ("mtime-restored", "url"),  # replaced days later by rsync -t / touch -d: same mtime
        ("same-second", "noetag_url"),  # Last-Modified is the only validator
        ("differs-after-offset", "url"),  # same prefix: the kept bytes are the new file's too
    ],
)
def test_same_size_replacement_the_validator_cannot_tell_never_splices(
    nginx_server, fault_proxy, tmp_path, case, root
):
    """nginx's ETag is mtime seconds + size and Last-Modified has whole seconds: a same-size file
    put in place within the same second (or with its mtime restored) keeps both, so If-Range
    matches. The resume compares the prefix's last bytes and random blocks of it with the
    server's: the new file is downloaded whole, never the old prefix joined to its tail."""
    name = f"swap-{case}-{root}.bin"
    path = nginx_server.root / name
    old = serve(nginx_server, name)
    second = int(time.time()) - 3600
    os.utime(path, ns=(second * 10**9 + 100_000_000,) * 2)
    origin = nginx_server.url if root == "url" else nginx_server.noetag_url
    url = f"{fault_proxy.url}{origin.removeprefix(nginx_server.url)}/{name}"
    dest = tmp_path / name
    fault_proxy.add_fault("drop", after_bytes=3 * MiB)  # the interrupted first run
    with pytest.raises(DownloadError):
        download_shard(url, dest, retry=RetryPolicy(attempts=1), checkpoint_bytes=MiB)
    ckpt = Checkpoint.load(checkpoint_path(dest))
    assert ckpt is not None and ckpt.verified_bytes >= MiB
    before = HttpRangeClient().head(url)
    new = old[: ckpt.verified_bytes] + os.urandom(SIZE - ckpt.verified_bytes) if case == "differs-after-offset" else os.urandom(SIZE)
    path.write_bytes(new)
    stamp = second * 10**9 + (100_000_000 if case != "same-second" else 900_000_000)
    os.utime(path, ns=(stamp, stamp))
    after = HttpRangeClient().head(url)
    assert (after.etag, after.last_modified, after.size) == (before.etag, before.last_modified, before.size)
    fault_proxy.clear()
    result = download_shard(url, dest)
    assert_done(dest, new, result)
    if case == "differs-after-offset":  # nothing to catch: the kept prefix is the new one's
        assert result.reused_bytes == ckpt.verified_bytes and result.restarts == 0
        assert result.resume["prefix_sample_bytes"] == COMPARED
    else:
        assert result.restarts == 1 and result.fetched_bytes == SIZE


def test_resume_records_what_it_relied_on(nginx_server, tmp_path):
    data = serve(nginx_server, "relied.bin")
    url = f"{nginx_server.url}/relied.bin"
    dest = tmp_path / "relied.bin"
    ckpt = leave_partial(url, dest, data, 3 * MiB)
    result = download_shard(url, dest)
    assert_done(dest, data, result)
    assert result.reused_bytes == 3 * MiB
    assert result.resume == {
        "validator": f"If-Range ETag {ckpt.etag}",
        "verified_prefix_bytes": 3 * MiB,
        "prefix_sample_bytes": COMPARED,
        "expected_sha256": False,
    }


class Counter:
    """What a progress bar is told: bytes received, kept from earlier, thrown away."""

    def __init__(self) -> None:
        self.received = 0
        self.reused: list[int] = []
        self.discarded = 0

    def kwargs(self) -> dict:
        def on_bytes(n: int) -> None:
            self.received += n

        def on_discard(n: int) -> None:
            self.discarded += n

        return {"on_bytes": on_bytes, "on_reused": self.reused.append, "on_discard": on_discard}

    @property
    def on_disk(self) -> int:
        return sum(self.reused) + self.received - self.discarded


def test_progress_callbacks_add_up_to_the_file_on_resume_restart_and_reuse(nginx_server, tmp_path):
    """reused + received - discarded is always the file's size, so a bar fed by them ends at its
    total: resume (kept prefix reported once), a replaced source (the kept prefix is thrown away)
    and a complete file kept (reported as reused, nothing received)."""
    from feedline.acquire.download import reusable_bytes

    data = serve(nginx_server, "counted.bin")
    url = f"{nginx_server.url}/counted.bin"
    dest = tmp_path / "counted.bin"
    leave_partial(url, dest, data, 2 * MiB + 7)
    assert reusable_bytes(dest, SIZE) == 2 * MiB + 7  # the bar's starting estimate, from the files alone
    counter = Counter()
    download_shard(url, dest, **counter.kwargs())
    assert counter.reused == [2 * MiB + 7] and counter.received == SIZE - 2 * MiB - 7
    assert counter.discarded == 0 and counter.on_disk == SIZE

    assert reusable_bytes(dest, SIZE) == SIZE and reusable_bytes(dest, SIZE + 1) == 0
    counter = Counter()
    download_shard(url, dest, **counter.kwargs())
    assert (counter.reused, counter.received, counter.on_disk) == ([SIZE], 0, SIZE)

    dest2 = tmp_path / "replaced" / "counted.bin"
    dest2.parent.mkdir()
    leave_partial(url, dest2, data, 3 * MiB)
    new = os.urandom(SIZE)
    (nginx_server.root / "counted.bin").write_bytes(new)
    later = time.time() + 5
    os.utime(nginx_server.root / "counted.bin", (later, later))
    counter = Counter()
    result = download_shard(url, dest2, **counter.kwargs())
    assert result.restarts == 1 and dest2.read_bytes() == new
    assert counter.reused == [3 * MiB] and counter.discarded == 3 * MiB
    assert counter.received == SIZE and counter.on_disk == SIZE


def test_reusable_bytes_ignores_what_a_resume_would_not_keep(tmp_path):
    from feedline.acquire.download import reusable_bytes

    dest = tmp_path / "x.bin"
    assert reusable_bytes(dest, 100) == 0  # nothing there
    part_path(dest).write_bytes(b"x" * 10)
    checkpoint_path(dest).write_text('{"verified_bytes": 50}')  # claims more than the part holds
    assert reusable_bytes(dest, 100) == 0
    checkpoint_path(dest).write_text("[1, 2]")  # not a checkpoint
    assert reusable_bytes(dest, 100) == 0
    checkpoint_path(dest).write_text('{"verified_bytes": 8}')
    assert reusable_bytes(dest, 100) == 8 and reusable_bytes(dest, 5) == 0
