"""io.fsspec_store: FsspecStore.open_from against moto's S3 server and fsspec's memory store."""

from __future__ import annotations

import os

import pytest

from feedline.io import NotFoundError, ObjectValidator, RangeError, open_store

PAYLOAD = os.urandom(1_000_000)
HALF = len(PAYLOAD) // 2


def read_all(body) -> bytes:
    out = bytearray()
    buffer = memoryview(bytearray(64 << 10))
    while n := body.readinto(buffer):
        out += buffer[:n]
    body.close()
    return bytes(out)


def test_s3_resumes_only_the_object_of_the_etag(s3_server) -> None:
    s3 = s3_server.client()
    s3.put_object(Bucket=s3_server.bucket, Key="from/obj.bin", Body=PAYLOAD)
    with open_store(f"s3://{s3_server.bucket}/from", **s3_server.storage_options) as store:
        seen = store.validator("obj.bin")
        assert seen.size == len(PAYLOAD) and seen.etag
        body = store.open_from("obj.bin", HALF, seen)
        assert (body.start, body.total, body.why_restart) == (HALF, len(PAYLOAD), "")
        assert body.version_id and body.validator.etag == seen.etag
        assert read_all(body) == PAYLOAD[HALF:]
        s3.put_object(Bucket=s3_server.bucket, Key="from/obj.bin", Body=PAYLOAD[::-1])
        body = store.open_from("obj.bin", HALF, seen)  # a new ETag: from 0, with the reason
        assert body.start == 0 and "changed" in body.why_restart and body.etag != seen.etag
        assert read_all(body) == PAYLOAD[::-1]
        with pytest.raises(NotFoundError, match="no such object"):
            store.open_from("absent.bin")
        with pytest.raises(RangeError) as info:
            store.open_from("obj.bin", len(PAYLOAD) + 1, store.validator("obj.bin"))
        assert info.value.total == len(PAYLOAD)


def test_memory_store_compares_its_etag_or_fingerprint() -> None:
    with open_store(f"memory://feedline-open-from-{os.getpid()}") as store:
        store.write_bytes("x.bin", PAYLOAD)
        seen = store.validator("x.bin")
        body = store.open_from("x.bin", HALF, seen)
        assert body.start == (HALF if seen.usable else 0)
        body.close()
        body = store.open_from("x.bin", HALF, ObjectValidator(len(PAYLOAD) + 1, seen.etag))
        assert body.start == 0 and "changed" in body.why_restart and read_all(body) == PAYLOAD
