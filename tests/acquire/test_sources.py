"""acquire.sources: a download's source on its store, against real nginx, moto S3 and files.

The protocol (If-Range, pinned reads, fingerprints) is the stores' open_from, tested in tests/io;
here: the checkpoint is the validator, errors say what to do, and a run shares one store per
folder."""

from __future__ import annotations

import hashlib
import os

import pytest

from feedline.acquire.checkpoint import Checkpoint
from feedline.acquire.errors import DownloadError
from feedline.acquire.sources import FolderStores, Source, open_source
from feedline.io import RangeError, TransientError
from tests.io.bodies import read_all
from tests.io.http.access_log import requests_for
from tests.io.http.misbehaving import Answer, run_misbehaving

PAYLOAD = os.urandom(1_000_000)
HALF = len(PAYLOAD) // 2


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


def test_a_checkpoint_resumes_with_if_range(nginx_server, served) -> None:
    source = open_source(f"{nginx_server.url}/{served}")
    info = source.stat()
    assert info.size == len(PAYLOAD) and info.etag and info.last_modified and source.coarse_validators
    body = source.open(0, None)
    assert (body.start, body.total, body.why_restart) == (0, len(PAYLOAD), "")
    assert read_all(body) == PAYLOAD
    body = source.open(HALF, checkpoint(source, HALF))
    assert (body.start, body.total, body.etag) == (HALF, len(PAYLOAD), info.etag)
    assert read_all(body) == PAYLOAD[HALF:]
    assert requests_for(nginx_server, served, 4) == [
        ("HEAD", 200, "-"), ("GET", 200, "-"), ("HEAD", 200, "-"), ("GET", 206, f"bytes={HALF}-")
    ]
    source.close()


def test_a_checkpoint_of_another_object_is_never_spliced(nginx_server, served) -> None:
    source = open_source(f"{nginx_server.url}/{served}")
    body = source.open(HALF, checkpoint(source, HALF, etag='"another-object"'))
    assert body.start == 0 and "200" in body.why_restart  # If-Range failed: the whole new object
    assert read_all(body) == PAYLOAD


def test_http_errors_tell_retry_from_fail(nginx_server, fault_proxy, served) -> None:
    with pytest.raises(DownloadError, match="404"):
        open_source(f"{nginx_server.url}/absent.bin").open(0, None)
    with pytest.raises(DownloadError, match="404"):
        open_source(f"{nginx_server.url}/absent.bin").stat()
    fault_proxy.add_fault("status", code=503, count=1)
    with pytest.raises(TransientError, match="503"):  # the downloader retries it
        open_source(f"{fault_proxy.url}/{served}").open(0, None)
    source = open_source(f"{nginx_server.url}/{served}")
    with pytest.raises(RangeError) as info:  # the downloader decides: complete, or start over
        source.open(len(PAYLOAD) + 5, checkpoint(source, 0))
    assert info.value.total == len(PAYLOAD)


def test_a_recompressed_body_is_a_download_error() -> None:
    """FAKE server: nginx honours Accept-Encoding: identity; only a misconfigured proxy does this."""
    with run_misbehaving() as server:
        server.answers["/z.bin"] = Answer(200, {"Content-Encoding": "gzip"}, b"\x1f\x8b not really")
        with pytest.raises(DownloadError, match="Content-Encoding 'gzip'"):
            open_source(f"{server.url}/z.bin").open(0, None)


def test_http_source_url_hides_credentials(nginx_server, served) -> None:
    host = nginx_server.url.split("//", 1)[1]
    source = open_source(f"http://user:pw@{host}/{served}?token=t0k")
    assert source.url == f"http://{host}/{served}"


def test_s3_source_restarts_on_a_new_etag(s3_server) -> None:
    s3 = s3_server.client()
    s3.put_object(Bucket=s3_server.bucket, Key="src/obj.bin", Body=PAYLOAD)
    source = open_source(f"s3://{s3_server.bucket}/src/obj.bin", s3_server.storage_options)
    assert not source.coarse_validators
    ckpt = checkpoint(source, HALF)
    assert read_all(source.open(HALF, ckpt)) == PAYLOAD[HALF:]
    s3.put_object(Bucket=s3_server.bucket, Key="src/obj.bin", Body=PAYLOAD[::-1])
    body = source.open(HALF, ckpt)
    assert body.start == 0 and "changed" in body.why_restart
    assert read_all(body) == PAYLOAD[::-1]
    with pytest.raises(DownloadError, match="no such object"):
        open_source(f"s3://{s3_server.bucket}/src/absent.bin", s3_server.storage_options).open(0, None)


def test_local_source_offset_past_the_end_is_a_range_error_with_the_size(tmp_path) -> None:
    """Like an HTTP 416: the downloader decides (complete, or start over), never retries it."""
    (tmp_path / "obj.bin").write_bytes(os.urandom(1000))
    source = open_source(str(tmp_path / "obj.bin"))
    ckpt = Checkpoint(url=source.url, expected_size=None, verified_bytes=1500, sha256_prefix="",
                      etag=source.stat().etag)
    with pytest.raises(RangeError) as info:
        source.open(1500, ckpt)
    assert info.value.total == 1000


def test_a_url_without_an_object_is_a_download_error() -> None:
    with pytest.raises(DownloadError, match="not the URL of an object"):
        open_source("s3://bucket-only")
    with pytest.raises(DownloadError, match="not the URL of an object"), FolderStores() as stores:
        stores.source("s3://bucket-only")


def test_a_run_opens_one_store_per_folder_and_closes_them(tmp_path, nginx_server) -> None:
    (tmp_path / "a").mkdir()
    urls = [str(tmp_path / "a" / "1.bin"), str(tmp_path / "a" / "2.bin"), f"{nginx_server.url}/x.bin"]
    with FolderStores() as stores:
        sources = [stores.source(url) for url in urls]
        assert sources[0].store is sources[1].store and sources[2].store is not sources[0].store
        assert [s.name for s in sources] == ["1.bin", "2.bin", "x.bin"]
        http = sources[2].store
        closed: list[bool] = []
        real_close = http.close
        http.close = lambda: (closed.append(True), real_close())  # type: ignore[method-assign]
        sources[2].close()  # a shared store stays open for the other shards
        assert not closed
    assert closed == [True]
    owned = open_source(f"{nginx_server.url}/x.bin")
    assert owned.owned and isinstance(owned, Source)


def test_hub_objects_resume_against_their_content_hash(tmp_path):
    """hf:// objects carry no ETag, only a content hash (LFS sha256 / blob id): a resume checks
    it. The Hub is unreachable from CI, so a memory filesystem whose info() reports a blob id
    stands in for HfFileSystem, behind the same FsspecStore the hf:// scheme uses."""
    import hashlib
    import os

    import fsspec

    from feedline.acquire.download import download_shard
    from feedline.acquire.sources import Source
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
            download_shard("hf://datasets/o/n/x.bin", dest, source=Source(store, "x.bin"),
                           checkpoint_bytes=1 << 20, on_bytes=kill_after(3 << 20))
        result = download_shard("hf://datasets/o/n/x.bin", dest, source=Source(store, "x.bin"),
                                checkpoint_bytes=1 << 20)
        assert dest.read_bytes() == data and result.reused_bytes >= 1 << 20 and result.restarts == 0
        assert result.etag.startswith("hf:") and result.etag.endswith(hashlib.sha1(data).hexdigest())

        dest2 = tmp_path / "again" / "x.bin"
        with pytest.raises(Killed):
            download_shard("hf://datasets/o/n/x.bin", dest2, source=Source(store, "x.bin"),
                           checkpoint_bytes=1 << 20, on_bytes=kill_after(3 << 20))
        new = os.urandom(len(data))  # same size, new content: only the hash tells
        fs.pipe_file(f"{root}/x.bin", new)
        result = download_shard("hf://datasets/o/n/x.bin", dest2, source=Source(store, "x.bin"),
                                checkpoint_bytes=1 << 20)
        assert dest2.read_bytes() == new and result.reused_bytes == 0 and result.restarts == 1
    finally:
        fs.rm(f"/hub{os.getpid()}", recursive=True)
