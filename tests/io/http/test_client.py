"""HttpRangeClient against real nginx and the fault proxy: Content-Range checks, servers that
ignore Range, retries (transient only, with backoff), credentials, the connection bound.

The fake server of misbehaving.py is used only where noted: for a wrong Content-Range and to see
the request headers a client sent, which nginx cannot show."""

from __future__ import annotations

import base64
import logging
import os
import threading

import pytest

from feedline.io import IoError, NotFoundError, RangeError, StoreError, TransientError
from feedline.io.http.client import HttpRangeClient, status_error
from feedline.io.http.headers import http_date_to_epoch
from feedline.io.redact import redact_url
from feedline.io.retry import RetryPolicy

from .access_log import requests_for
from .misbehaving import Answer, run_misbehaving

PAYLOAD = os.urandom(3_000_000)
NAME = "client.bin"
FAST = RetryPolicy(attempts=4, base_s=0.02, max_s=0.1)


@pytest.fixture(scope="module")
def url(nginx_server) -> str:
    (nginx_server.root / NAME).write_bytes(PAYLOAD)
    return f"{nginx_server.url}/{NAME}"


@pytest.fixture
def client():
    client = HttpRangeClient(retry=FAST)
    yield client
    client.close()


def serve(nginx_server, name: str) -> str:
    """``PAYLOAD`` under a name of the test's own, so its log lines are only its requests."""
    (nginx_server.root / name).write_bytes(PAYLOAD)
    return name


def test_ranged_reads_ask_for_exactly_the_range(nginx_server, client) -> None:
    name = serve(nginx_server, "client-exact.bin")
    url = f"{nginx_server.url}/{name}"
    assert client.get_range(url, 10, 20) == PAYLOAD[10:20]
    assert client.get_range(url, 0, len(PAYLOAD)) == PAYLOAD
    assert client.get_range(url, 5, 5) == b""
    assert requests_for(nginx_server, name, 2) == [
        ("GET", 206, "bytes=10-19"),
        ("GET", 206, f"bytes=0-{len(PAYLOAD) - 1}"),
    ]


def test_a_server_ignoring_range_is_skipped_to_the_offset_then_dropped(nginx_server, client) -> None:
    """nginx's /norange/ answers 200 with the whole object: the client reads up to the offset,
    keeps the range, and hangs up instead of reading (or reusing a connection after) the rest."""
    name = serve(nginx_server, "client-norange.bin")
    norange = f"{nginx_server.norange_url}/{name}"
    assert client.get_range(norange, 1_000_000, 1_000_100) == PAYLOAD[1_000_000:1_000_100]
    assert requests_for(nginx_server, name, 1) == [("GET", 200, "bytes=1000000-1000099")]
    assert not any(client._conns._idle.values()), "a connection with an unread body is never reused"
    with pytest.raises(RangeError) as info:  # the 200's Content-Length tells the size
        client.get_range(norange, len(PAYLOAD) - 10, len(PAYLOAD) + 10)
    assert info.value.total == len(PAYLOAD)


def test_a_wrong_content_range_is_refused_not_retried(client) -> None:
    """FAKE server: nginx always answers the range it was asked."""
    with run_misbehaving() as server:
        server.answers["/x.bin"] = Answer(206, {"Content-Range": "bytes 0-9/100"}, b"0123456789")
        with pytest.raises(StoreError, match=r"answered range 'bytes 0-9/100' to bytes=50-59") as info:
            client.get_range(f"{server.url}/x.bin", 50, 60)
        assert not isinstance(info.value, TransientError)
        assert len(server.seen) == 1


def test_transient_errors_are_retried_with_growing_backoff(fault_proxy, url, caplog) -> None:
    name = f"{fault_proxy.url}/{NAME}"
    policy = RetryPolicy(attempts=4, base_s=0.05, max_s=0.15)
    client = HttpRangeClient(retry=policy)
    caplog.set_level(logging.DEBUG, logger="feedline.io.retry")
    fault_proxy.add_fault("status", code=503, count=3)
    assert client.get_range(name, 0, 1000) == PAYLOAD[:1000]
    assert len(fault_proxy.requests) == 4
    pauses = [record.args[3] for record in caplog.records if record.levelno == logging.DEBUG]
    caps = [min(policy.max_s, policy.base_s * 2**k) for k in range(3)]  # 0.05, 0.1, 0.15: jitter in the upper half
    assert len(pauses) == 3 and all(cap / 2 <= p <= cap for p, cap in zip(pauses, caps, strict=True))
    fault_proxy.clear()
    fault_proxy.add_fault("status", code=502, count=10)
    with pytest.raises(TransientError, match="502"):
        client.get_range(name, 0, 10)
    assert len(fault_proxy.requests) == policy.attempts, "gives up after the policy's attempts"
    client.close()


def test_permanent_errors_fail_at_once(fault_proxy, url, client) -> None:
    with pytest.raises(NotFoundError, match="404"):
        client.head(f"{fault_proxy.url}/no-such-object.bin")
    fault_proxy.add_fault("status", code=400, count=5)
    with pytest.raises(StoreError, match="400"):
        client.get_range(f"{fault_proxy.url}/{NAME}", 0, 10)
    assert len(fault_proxy.requests) == 2, "one request each: neither is retried"


def test_connection_refused_is_transient(client) -> None:
    with pytest.raises(TransientError, match="127.0.0.1:9"):
        client.request("GET", "http://127.0.0.1:9/x")  # the discard port: nothing listens
    with pytest.raises(TransientError):
        client.get_range("http://127.0.0.1:9/x", 0, 10)


def test_head_falls_back_to_a_one_byte_get(fault_proxy, url, client) -> None:
    fault_proxy.add_fault("status", code=405, count=1)
    head = client.head(f"{fault_proxy.url}/{NAME}")
    assert (head.size, head.accept_ranges) == (len(PAYLOAD), True) and head.etag
    assert fault_proxy.requests == [("HEAD", f"/{NAME}", None), ("GET", f"/{NAME}", "bytes=0-0")]


def test_credentials_are_sent_but_never_shown(client) -> None:
    """FAKE server: to see the Authorization header every request path sends."""
    with run_misbehaving() as server:
        server.answers["/auth.bin"] = Answer(200, {"ETag": '"e"'}, b"0123456789")
        host = server.url.split("//", 1)[1]
        secret = f"http://alice:pw%21@{host}/auth.bin?X-Amz-Signature=s3cr3t"
        assert client.head(secret).size == 10
        assert client.get_range(secret, 2, 4) == b"23"
        client.request("GET", secret).release_conn()
        expected = "Basic " + base64.b64encode(b"alice:pw!").decode()
        assert [seen.get("authorization") for seen in server.seen] == [expected] * 3
        with pytest.raises(NotFoundError) as info:
            client.get_range(secret.replace("auth.bin", "missing.bin"), 0, 1)
    message = str(info.value)
    assert "pw" not in message and "s3cr3t" not in message and "alice" not in message
    assert f"http://{host}/missing.bin" in message
    assert redact_url(secret) == f"http://{host}/auth.bin"


def test_connections_stay_within_the_bound_and_are_reused(nginx_server, url) -> None:
    client = HttpRangeClient(max_connections=3)
    pool = client._conns
    acquire, release = pool.acquire, pool.release
    lock = threading.Lock()
    in_flight, peak, used = [0], [0], set()

    def counting_acquire(key):  # observes the real pool; every request goes through it
        conn = acquire(key)
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            used.add(id(conn))
        return conn

    def counting_release(key, conn, reuse):
        with lock:
            in_flight[0] -= 1
        release(key, conn, reuse)

    pool.acquire, pool.release = counting_acquire, counting_release
    ranges = [(i * 50_000, i * 50_000 + 40_000) for i in range(40)]
    assert client.get_ranges(url, ranges) == [PAYLOAD[s:e] for s, e in ranges]
    assert 2 <= peak[0] <= 3
    assert len(used) <= 3, "finished connections are kept alive and reused"
    used.clear()
    for start in range(0, 100_000, 10_000):
        client.get_range(url, start, start + 10)
    assert len(used) == 1, "sequential reads share one keep-alive connection"
    client.close()


def test_subranges_split_one_large_read(nginx_server) -> None:
    client = HttpRangeClient(subranges=4, min_subrange_bytes=100_000)
    name = serve(nginx_server, "client-subranges.bin")
    url = f"{nginx_server.url}/{name}"
    assert client.get_range(url, 0, 2_000_000) == PAYLOAD[:2_000_000]
    assert sorted(r[2] for r in requests_for(nginx_server, name, 4)) == sorted(
        f"bytes={s}-{s + 499_999}" for s in range(0, 2_000_000, 500_000)
    )
    assert client.get_range(url, 0, 150_000) == PAYLOAD[:150_000]  # below 2 x the minimum: one piece
    assert requests_for(nginx_server, name, 5)[4] == ("GET", 206, "bytes=0-149999")
    client.close()


def test_settings_are_checked() -> None:
    with pytest.raises(IoError, match=r"^max_connections must be an integer >= 1, got 0$"):
        HttpRangeClient(max_connections=0)
    with pytest.raises(IoError, match=r"^subranges must be an integer >= 1, got True$"):
        HttpRangeClient(subranges=True)


@pytest.mark.parametrize(
    ("status", "kind"),
    [(404, NotFoundError), (410, NotFoundError), (416, RangeError), (429, TransientError),
     (500, TransientError), (503, TransientError), (400, StoreError)],
)
def test_status_errors(status, kind) -> None:
    error = status_error("http://h/x", status)
    assert type(error) is kind and f"HTTP {status}" in str(error)


def test_http_dates() -> None:
    assert http_date_to_epoch("Wed, 21 Oct 2015 07:28:00 GMT") == 1445412480.0
    assert http_date_to_epoch(None) is None and http_date_to_epoch("yesterday") is None
