"""io.fsspec_store: FsspecStore.open_from against moto's S3 server and fsspec's memory store."""

from __future__ import annotations

import os
import time

import pytest

from feedline.io import (
    AccessDeniedError,
    NotFoundError,
    ObjectValidator,
    RangeError,
    StoreUnavailableError,
    open_store,
)
from tests.io.bodies import read_all
from tests.servers import free_port, run_fault_proxy

PAYLOAD = os.urandom(1_000_000)
HALF = len(PAYLOAD) // 2


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


def test_an_unreachable_s3_endpoint_fails_within_outage_s_naming_the_bucket() -> None:
    """s3fs (5 tries) and botocore (5 attempts each) retry a refused connection themselves, which
    took 4.4 s per call here; feedline leaves them one try each, so its outage_s is the bound."""
    store = open_store(
        "s3://no-bucket/x", endpoint_url=f"http://127.0.0.1:{free_port()}", key="k", secret="s",
        skip_instance_cache=True,
    )
    store.set_outage_s(1.5)
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=r"store s3://no-bucket unavailable: EndpointConnectionError"):
        store.stat("a.bin")
    # the last try may start just before the deadline and a loaded machine slows each try; the
    # libraries' own retries alone took 4.4 s per call
    assert 1.5 <= time.monotonic() - began < 1.5 + 2.5


def _s3_error(code: str, message: str) -> bytes:
    return f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()


@pytest.mark.parametrize(
    ("status", "body"),
    [(503, _s3_error("SlowDown", "Please reduce your request rate.")), (429, None),
     (500, _s3_error("InternalError", "We encountered an internal error."))],
    ids=["503-SlowDown", "429", "500-InternalError"],
)
def test_s3_throttling_and_5xx_are_retried_to_the_exact_bytes(s3_server, status, body) -> None:
    """The fault proxy (in front of moto, which will not throttle on demand) answers a GET
    with the error S3 sends; s3fs and botocore are left one try, so feedline's loop retries."""
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="throttle/obj.bin", Body=PAYLOAD)
    with run_fault_proxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.url, "skip_instance_cache": True}
        store = open_store(f"s3://{s3_server.bucket}/throttle", **options)
        store.set_outage_s(10)
        assert store.stat("obj.bin").size == len(PAYLOAD)
        proxy.add_fault("status", code=status, count=3, body=body)
        assert store.read_range("obj.bin", 10, 5000) == PAYLOAD[10:5000]
        assert len([r for r in proxy.requests if r[0] == "GET"]) == 4


def test_s3_access_denied_is_not_retried(s3_server) -> None:
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="denied/obj.bin", Body=PAYLOAD)
    with run_fault_proxy(s3_server.endpoint_url) as proxy:
        options = {**s3_server.storage_options, "endpoint_url": proxy.url, "skip_instance_cache": True}
        store = open_store(f"s3://{s3_server.bucket}/denied", **options)
        store.stat("obj.bin")
        proxy.add_fault("status", code=403, count=100, body=_s3_error("AccessDenied", "Access Denied"))
        began = time.monotonic()
        with pytest.raises(AccessDeniedError):
            store.read_range("obj.bin", 0, 100)
        assert time.monotonic() - began < 1.0
        assert len([r for r in proxy.requests if r[0] == "GET"]) == 1
