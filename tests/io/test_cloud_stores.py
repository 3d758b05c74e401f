"""gs:// and az:// roots (gcsfs, adlfs) against gcp-storage-emulator and Azurite on 127.0.0.1.

What the emulators lack is said where a test leans on it: gcp-storage-emulator answers a range
past the object's end with a short 206 instead of a 416 (feedline's length check catches it),
and ignores ``generation=`` on downloads; faults neither server makes on demand (a 503, a 403)
come from the fault proxy in front of them.
"""

from __future__ import annotations

import time

import pytest

from feedline.io import open_store
from feedline.io.errors import (
    AccessDeniedError,
    NotFoundError,
    ObjectChangedError,
    RangeError,
)
from tests.servers import run_fault_proxy

pytestmark = pytest.mark.server  # the servers are fixtures asked for by name

DATA = bytes(range(256)) * 40


def _root(kind: str, request: pytest.FixtureRequest, prefix: str) -> tuple[str, dict, object]:
    if kind == "gs":
        server = request.getfixturevalue("gcs_server")
        return f"gs://{server.bucket}/{prefix}", dict(server.storage_options), server.filesystem()
    server = request.getfixturevalue("azure_server")
    return f"az://{server.container}/{prefix}", dict(server.storage_options), server.filesystem()


@pytest.mark.parametrize("kind", ["gs", "az"])
def test_stat_list_ranges_and_fingerprints(kind, request):
    root, options, fs = _root(kind, request, "basic")
    bucket_path = root.split("://", 1)[1]
    fs.pipe(f"{bucket_path}/a/one.bin", DATA)
    fs.pipe(f"{bucket_path}/two.bin", b"x" * 10)
    started = time.monotonic()
    with open_store(root, **options) as store:
        info = store.stat("a/one.bin")
        assert time.monotonic() - started < 10  # no 60 s bucket-type probe over gRPC
        assert info.size == len(DATA)
        assert info.fingerprint and info.fingerprint.startswith(f"{kind}:")
        listed = {i.path: i for i in store.list()}
        assert sorted(listed) == ["a/one.bin", "two.bin"]
        assert listed["a/one.bin"].fingerprint == info.fingerprint  # stat and list agree
        assert store.read_range("a/one.bin", 300, 310) == DATA[300:310]
        assert store.read_ranges("a/one.bin", [(0, 4), (1000, 1100), (5, 5)]) == [
            DATA[:4], DATA[1000:1100], b""]
        assert store.read_bytes("two.bin") == b"x" * 10
        with store.open("a/one.bin") as handle:
            handle.seek(2000)
            assert handle.read(16) == DATA[2000:2016]
        body = store.open_from("a/one.bin", 100, store.validator("a/one.bin"))
        buffer = bytearray(len(DATA))
        got = 0
        while n := body.readinto(memoryview(buffer)[got:]):
            got += n
        body.close()
        assert bytes(buffer[:got]) == DATA[100:]
        assert body.validator.etag == store.validator("a/one.bin").etag
        # gcp-storage-emulator answers a range past the end with a short 206, not a 416.
        with pytest.raises(RangeError, match="past the object's end"):
            store.read_range("two.bin", 5, 20)
        with pytest.raises(NotFoundError, match=r"nope\.bin: no such object"):
            store.stat("nope.bin")

        # The same size, other bytes: a new generation (GCS) or ETag (Azure).
        fs.pipe(f"{bucket_path}/a/one.bin", bytes(reversed(DATA)))
        fs.invalidate_cache()
        again = store.stat("a/one.bin")
        assert again.size == info.size and again.fingerprint != info.fingerprint
        if kind == "az":  # (GCS pins by generation, which the emulator ignores: see below)
            with pytest.raises(ObjectChangedError):
                store.read_ranges_pinned("a/one.bin", [(0, 8)], info)
        assert store.read_ranges_pinned("a/one.bin", [(0, 8)], again) == [bytes(reversed(DATA))[:8]]
        assert store.validator("a/one.bin") != store.validator("two.bin")


def test_gcs_generation_is_the_fingerprint(gcs_server):
    fs = gcs_server.filesystem()
    fs.pipe(f"{gcs_server.bucket}/gen/obj.bin", b"abc")
    with open_store(f"gs://{gcs_server.bucket}/gen", **gcs_server.storage_options) as store:
        info = store.stat("obj.bin")
        generation = fs.info(f"{gcs_server.bucket}/gen/obj.bin")["generation"]
        assert info.fingerprint == f"gs:{generation}" and info.version_id == generation
        assert store.validator("obj.bin").etag == info.fingerprint


@pytest.mark.parametrize("kind", ["gs", "az"])
def test_faults_through_the_proxy(kind, request):
    """A 503 (neither emulator sends one on demand) is ridden out; a 403 is one denied line."""
    root, options, fs = _root(kind, request, "faults")
    bucket_path = root.split("://", 1)[1]
    fs.pipe(f"{bucket_path}/f.bin", DATA)
    if kind == "gs":
        server = request.getfixturevalue("gcs_server")
        upstream = server.endpoint_url
    else:
        server = request.getfixturevalue("azure_server")
        upstream = server.endpoint_url
    with run_fault_proxy(upstream) as proxy:
        if kind == "gs":
            options = {**options, "endpoint_url": proxy.url}
        else:
            options = {"connection_string": server.connection_string(proxy.url)}
        with open_store(root, **options) as store:
            assert store.read_range("f.bin", 10, 20) == DATA[10:20]
            proxy.add_fault("status", code=503)
            assert store.read_range("f.bin", 30, 40) == DATA[30:40]
            gets = [r for r in proxy.requests if r[0] == "GET"]
            assert len(gets) >= 3  # the first read, the 503 and its retry
            if kind == "gs":  # (Azure sends its range as x-ms-range, which the proxy passes on)
                assert all(r[2] for r in gets if "alt=media" in r[1])
            proxy.add_fault("status", code=403, count=10)
            with pytest.raises(AccessDeniedError, match="access denied"):
                store.stat("other.bin")


def test_missing_bucket_and_bad_url_are_one_line(gcs_server, azure_server):
    with open_store("gs://no-such-bucket-here/x", **gcs_server.storage_options) as store, \
            pytest.raises(NotFoundError):
        store.stat("a")
    with open_store("az://nocontainer/x", **azure_server.storage_options) as store, \
            pytest.raises(NotFoundError):
        store.stat("a")


def test_gcs_pinned_reads_name_the_generation(gcs_server):
    """Pinned reads ask for the generation they were pinned to, and a 404 for it (what GCS
    answers once that generation is replaced) is a change, not a missing file. The emulator
    serves the newest bytes whatever ``generation=`` says, so the proxy gives that 404."""
    fs = gcs_server.filesystem()
    fs.pipe(f"{gcs_server.bucket}/pin/obj.bin", DATA)
    with run_fault_proxy(gcs_server.endpoint_url) as proxy:
        options = {**gcs_server.storage_options, "endpoint_url": proxy.url}
        with open_store(f"gs://{gcs_server.bucket}/pin", **options) as store:
            pin = store.stat("obj.bin")
            proxy.clear()
            assert store.read_ranges_pinned("obj.bin", [(0, 4), (100, 200)], pin) == [
                DATA[:4], DATA[100:200]]
            reads = [r for r in proxy.requests if "alt=media" in r[1]]
            assert len(reads) == 2 and all(f"generation={pin.version_id}" in r[1] for r in reads)
            assert len(proxy.requests) == 2  # no stat after the reads
            proxy.add_fault("status", code=404)
            with pytest.raises(ObjectChangedError, match=f"generation {pin.version_id} is gone"):
                store.read_ranges_pinned("obj.bin", [(0, 4)], pin)
