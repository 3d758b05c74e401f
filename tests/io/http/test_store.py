"""io.http.store: HttpStore.open_from against real nginx — Range + If-Range, honest restarts."""

from __future__ import annotations

import os
import time

import pytest

from feedline.io import (
    NotFoundError,
    ObjectValidator,
    RangeError,
    StoreError,
    TransientError,
    open_store,
)
from tests.io.bodies import read_all
from tests.io.http.access_log import requests_for
from tests.io.http.misbehaving import Answer, run_misbehaving

PAYLOAD = os.urandom(1_000_000)
HALF = len(PAYLOAD) // 2


@pytest.fixture
def served(nginx_server, request) -> str:
    """PAYLOAD under a name of the test's own: its access-log lines are only its requests."""
    name = f"store-{request.node.name}.bin"
    (nginx_server.root / name).write_bytes(PAYLOAD)
    return name


def test_unchanged_object_resumes_with_if_range(nginx_server, served) -> None:
    with open_store(nginx_server.url) as store:
        seen = store.validator(served)
        assert seen.size == len(PAYLOAD) and seen.strong_etag and seen.last_modified
        body = store.open_from(served)
        assert (body.start, body.total, body.why_restart) == (0, len(PAYLOAD), "")
        assert body.validator == seen and read_all(body) == PAYLOAD
        body = store.open_from(served, HALF, seen)
        assert (body.start, body.total, body.etag) == (HALF, len(PAYLOAD), seen.etag)
        assert read_all(body) == PAYLOAD[HALF:]
    assert requests_for(nginx_server, served, 3) == [
        ("HEAD", 200, "-"), ("GET", 200, "-"), ("GET", 206, f"bytes={HALF}-")
    ]


def test_a_changed_file_is_sent_whole_and_says_why(nginx_server, served) -> None:
    """nginx compares If-Range itself: the new file comes from byte 0 with a 200."""
    with open_store(nginx_server.url) as store:
        old = store.validator(served)
        new = PAYLOAD[::-1]
        (nginx_server.root / served).write_bytes(new)
        later = time.time() + 5
        os.utime(nginx_server.root / served, (later, later))
        body = store.open_from(served, HALF, old)
        assert body.start == 0 and "200" in body.why_restart and body.etag != old.etag
        assert read_all(body) == new


def test_a_weak_validator_sends_no_range(nginx_server, served) -> None:
    with open_store(nginx_server.url) as store:
        body = store.open_from(served, HALF, ObjectValidator(len(PAYLOAD), 'W/"weak"'))
        assert body.start == 0 and read_all(body) == PAYLOAD
    assert requests_for(nginx_server, served, 1) == [("GET", 200, "-")]


def test_a_server_ignoring_range_restarts(nginx_server, served) -> None:
    with open_store(nginx_server.norange_url) as store:
        body = store.open_from(served, HALF, store.validator(served))
        assert body.start == 0 and "ignores Range" in body.why_restart
        assert read_all(body) == PAYLOAD


def test_an_offset_past_the_end_is_a_range_error_with_the_size(nginx_server, served) -> None:
    with open_store(nginx_server.url) as store, pytest.raises(RangeError) as info:
        store.open_from(served, len(PAYLOAD) + 5, store.validator(served))
    assert info.value.total == len(PAYLOAD)


def test_errors(nginx_server, fault_proxy, served) -> None:
    with open_store(nginx_server.url) as store:
        with pytest.raises(NotFoundError, match="404"):
            store.open_from("absent.bin")
        with pytest.raises(NotFoundError, match="404"):
            store.validator("absent.bin")
    with open_store(fault_proxy.url) as store:
        fault_proxy.add_fault("status", code=503, count=1)
        with pytest.raises(TransientError, match="503"):
            store.open_from(served)
        fault_proxy.add_fault("drop", after_bytes=1000, count=1)
        body = store.open_from(served)
        # a cut body just ends: the caller compares what it got with ``total`` and resumes
        assert body.total == len(PAYLOAD) and read_all(body) == PAYLOAD[:1000]


def test_a_recompressed_body_is_refused() -> None:
    """FAKE server: nginx honours Accept-Encoding: identity; only a misconfigured proxy does this."""
    with run_misbehaving() as server, open_store(server.url) as store:
        server.answers["/z.bin"] = Answer(200, {"Content-Encoding": "gzip"}, b"\x1f\x8b not really")
        with pytest.raises(StoreError, match="Content-Encoding 'gzip'"):
            store.open_from("z.bin")
        assert server.seen[0]["accept-encoding"] == "identity"


def test_the_url_of_an_object_hides_credentials_and_query(nginx_server, served) -> None:
    host = nginx_server.url.split("//", 1)[1]
    with open_store(f"http://user:pw@{host}") as store:
        assert store.url(f"{served}?token=t0k") == f"http://{host}/{served}"
        assert read_all(store.open_from(f"{served}?token=t0k")) == PAYLOAD
