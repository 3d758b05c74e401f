"""acquire.sources: where a download's bytes come from, against real nginx, moto S3 and files.

A source answers "the object from byte N, if it is still the object of this checkpoint" and says
honestly when it could not (the body then starts at 0 and says why)."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.errors import DownloadError
from feedline.acquire.sources import HttpSource, StoreSource, open_source
from feedline.io import RangeError, TransientError
from tests.io.http.access_log import requests_for
from tests.io.http.misbehaving import Answer, run_misbehaving

PAYLOAD = os.urandom(1_000_000)
HALF = len(PAYLOAD) // 2


def read_all(body) -> bytes:
    out = bytearray()
    buffer = memoryview(bytearray(64 << 10))
    while True:
        n = body.readinto(buffer)
        if not n:
            break
        out += buffer[:n]
    body.close()
    return bytes(out)


def checkpoint(source, offset: int, **validators) -> Checkpoint:
    info = source.stat()
    fields = {"etag": info.etag, "last_modified": info.last_modified, **validators}
    return Checkpoint(url=source.url, expected_size=info.size, verified_bytes=offset,
                      sha256_prefix=hashlib.sha256(PAYLOAD[:offset]).hexdigest(), **fields)


@pytest.fixture
def served(nginx_server, request) -> str:
    """PAYLOAD under a name of the test's own: its access-log lines are only its requests."""
    name = f"src-{request.node.name}.bin"
    (nginx_server.root / name).write_bytes(PAYLOAD)
    return name


def test_http_fresh_and_resumed_reads(nginx_server, served) -> None:
    source = open_source(f"{nginx_server.url}/{served}")
    assert isinstance(source, HttpSource)
    info = source.stat()
    assert info.size == len(PAYLOAD) and info.etag and info.last_modified
    body = source.open(0, None)
    assert (body.start, body.total, body.why_restart) == (0, len(PAYLOAD), "")
    assert read_all(body) == PAYLOAD
    body = source.open(HALF, checkpoint(source, HALF))
    assert (body.start, body.total, body.etag) == (HALF, len(PAYLOAD), info.etag)
    assert read_all(body) == PAYLOAD[HALF:]
    assert requests_for(nginx_server, served, 4) == [
        ("HEAD", 200, "-"), ("GET", 200, "-"), ("HEAD", 200, "-"), ("GET", 206, f"bytes={HALF}-")
    ]


def test_http_resume_without_a_strong_validator_starts_at_zero(nginx_server, served) -> None:
    """A weak ETag cannot guard If-Range: no Range is sent at all."""
    source = open_source(f"{nginx_server.url}/{served}")
    body = source.open(HALF, checkpoint(source, HALF, etag='W/"weak"', last_modified=None))
    assert body.start == 0 and read_all(body) == PAYLOAD
    assert requests_for(nginx_server, served, 2) == [("HEAD", 200, "-"), ("GET", 200, "-")]


def test_http_changed_object_is_never_spliced(nginx_server, served) -> None:
    source = open_source(f"{nginx_server.url}/{served}")
    body = source.open(HALF, checkpoint(source, HALF, etag='"another-object"'))
    assert body.start == 0 and "200" in body.why_restart  # If-Range failed: the whole new object
    assert read_all(body) == PAYLOAD


def test_http_server_ignoring_range_restarts(nginx_server, served) -> None:
    source = open_source(f"{nginx_server.norange_url}/{served}")
    body = source.open(HALF, checkpoint(source, HALF))
    assert body.start == 0 and "ignores Range" in body.why_restart
    assert read_all(body) == PAYLOAD


def test_http_offset_past_the_end_is_a_range_error_with_the_size(nginx_server, served) -> None:
    source = open_source(f"{nginx_server.url}/{served}")
    with pytest.raises(RangeError) as info:
        source.open(len(PAYLOAD) + 5, checkpoint(source, 0))
    assert info.value.total == len(PAYLOAD)


def test_http_errors(nginx_server, fault_proxy, served) -> None:
    with pytest.raises(DownloadError, match="404"):
        open_source(f"{nginx_server.url}/absent.bin").open(0, None)
    with pytest.raises(DownloadError, match="404"):
        open_source(f"{nginx_server.url}/absent.bin").stat()
    fault_proxy.add_fault("status", code=503, count=1)
    with pytest.raises(TransientError, match="503"):  # the downloader retries it
        open_source(f"{fault_proxy.url}/{served}").open(0, None)
    fault_proxy.add_fault("drop", after_bytes=1000, count=1)
    body = open_source(f"{fault_proxy.url}/{served}").open(0, None)
    total = body.total
    # a cut body just ends: the downloader compares what it got with ``total`` and resumes
    assert read_all(body) == PAYLOAD[:1000] and total == len(PAYLOAD)


def test_a_recompressed_body_is_refused() -> None:
    """FAKE server: nginx honours Accept-Encoding: identity; only a misconfigured proxy does this."""
    with run_misbehaving() as server:
        server.answers["/z.bin"] = Answer(200, {"Content-Encoding": "gzip"}, b"\x1f\x8b not really")
        with pytest.raises(DownloadError, match="Content-Encoding 'gzip'"):
            open_source(f"{server.url}/z.bin").open(0, None)
        assert server.seen[0]["accept-encoding"] == "identity"


def test_http_source_url_hides_credentials(nginx_server, served) -> None:
    host = nginx_server.url.split("//", 1)[1]
    source = open_source(f"http://user:pw@{host}/{served}?token=t0k")
    assert source.url == f"http://{host}/{served}"


def test_s3_source_resumes_pinned_to_the_etag(s3_server) -> None:
    s3 = s3_server.client()
    s3.put_object(Bucket=s3_server.bucket, Key="src/obj.bin", Body=PAYLOAD)
    source = open_source(f"s3://{s3_server.bucket}/src/obj.bin", s3_server.storage_options)
    assert isinstance(source, StoreSource)
    ckpt = checkpoint(source, HALF)
    body = source.open(HALF, ckpt)
    assert (body.start, body.total) == (HALF, len(PAYLOAD)) and body.version_id
    assert read_all(body) == PAYLOAD[HALF:]
    s3.put_object(Bucket=s3_server.bucket, Key="src/obj.bin", Body=PAYLOAD[::-1])
    body = source.open(HALF, ckpt)
    assert body.start == 0 and "changed" in body.why_restart
    assert read_all(body) == PAYLOAD[::-1]
    with pytest.raises(DownloadError, match="no such object"):
        open_source(f"s3://{s3_server.bucket}/src/absent.bin", s3_server.storage_options).open(0, None)


def test_local_source_detects_a_replaced_file(tmp_path) -> None:
    path = tmp_path / "obj.bin"
    path.write_bytes(PAYLOAD)
    source = open_source(str(path))
    ckpt = checkpoint(source, HALF)
    assert read_all(source.open(HALF, ckpt)) == PAYLOAD[HALF:]
    path.write_bytes(PAYLOAD[::-1])
    later = time.time() + 5
    os.utime(path, (later, later))
    body = source.open(HALF, ckpt)
    assert body.start == 0 and read_all(body) == PAYLOAD[::-1]


def test_store_source_offset_past_the_end_is_a_range_error_with_the_size(tmp_path) -> None:
    """Like an HTTP 416: the downloader decides (complete, or start over), never retries it."""
    (tmp_path / "obj.bin").write_bytes(os.urandom(1000))
    source = open_source(str(tmp_path / "obj.bin"))
    assert isinstance(source, StoreSource)
    ckpt = Checkpoint(url=source.url, expected_size=None, verified_bytes=1500, sha256_prefix="",
                      etag=source.stat().etag)
    with pytest.raises(RangeError) as info:
        source.open(1500, ckpt)
    assert info.value.total == 1000


def test_a_url_without_an_object_is_a_download_error() -> None:
    with pytest.raises(DownloadError, match="not the URL of an object"):
        open_source("s3://bucket-only")


def test_hub_objects_resume_against_their_content_hash(tmp_path):
    """hf:// objects carry no ETag, only a content hash (LFS sha256 / blob id): a resume checks
    it. The Hub is unreachable from CI, so a memory filesystem whose info() reports a blob id
    stands in for HfFileSystem, behind the same FsspecStore the hf:// scheme uses."""
    import hashlib
    import os

    import fsspec

    from feedline.acquire.download import download_shard
    from feedline.acquire.sources import StoreSource
    from feedline.io import FsspecStore

    class HubLike(type(fsspec.filesystem("memory"))):  # type: ignore[misc]
        def info(self, path, **kwargs):
            out = dict(super().info(path, **kwargs))
            if out.get("type") == "file":
                out["blob_id"] = hashlib.sha1(self.cat_file(path)).hexdigest()
            return out

    fs = HubLike(skip_instance_cache=True)
    root = f"/hub{os.getpid()}/datasets/o/n"
    data = os.urandom(5 << 20)
    fs.pipe_file(f"{root}/x.bin", data)
    store = FsspecStore(fs, root, protocol="hf")

    class Killed(Exception):
        pass

    def kill_after(limit: int):
        seen = [0]

        def on_bytes(n: int) -> None:
            seen[0] += n
            if seen[0] >= limit:
                raise Killed

        return on_bytes

    dest = tmp_path / "x.bin"
    try:
        with pytest.raises(Killed):
            download_shard("hf://datasets/o/n/x.bin", dest, source=StoreSource(store, "x.bin"),
                           checkpoint_bytes=1 << 20, on_bytes=kill_after(3 << 20))
        result = download_shard("hf://datasets/o/n/x.bin", dest, source=StoreSource(store, "x.bin"),
                                checkpoint_bytes=1 << 20)
        assert dest.read_bytes() == data and result.reused_bytes >= 1 << 20 and result.restarts == 0
        assert result.etag.startswith("hf:") and result.etag.endswith(hashlib.sha1(data).hexdigest())

        dest2 = tmp_path / "again" / "x.bin"
        with pytest.raises(Killed):
            download_shard("hf://datasets/o/n/x.bin", dest2, source=StoreSource(store, "x.bin"),
                           checkpoint_bytes=1 << 20, on_bytes=kill_after(3 << 20))
        new = os.urandom(len(data))  # same size, new content: only the hash tells
        fs.pipe_file(f"{root}/x.bin", new)
        result = download_shard("hf://datasets/o/n/x.bin", dest2, source=StoreSource(store, "x.bin"),
                                checkpoint_bytes=1 << 20)
        assert dest2.read_bytes() == new and result.reused_bytes == 0 and result.restarts == 1
    finally:
        fs.rm(f"/hub{os.getpid()}", recursive=True)
