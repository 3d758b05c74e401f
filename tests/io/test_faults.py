"""Transient faults are retried to success; permanent ones fail at once (through a faulty proxy)."""

from __future__ import annotations

import os
import time

import pytest

from feedline.io import (
    AccessDeniedError,
    NotFoundError,
    StoreUnavailableError,
    open_store,
)
from feedline.io.http.client import HttpRangeClient, status_error

PAYLOAD = os.urandom(2_000_000)


@pytest.fixture
def served(nginx_server) -> str:
    (nginx_server.root / "faults.bin").write_bytes(PAYLOAD)
    return "faults.bin"


def test_drop_mid_body_is_retried(fault_proxy, served: str) -> None:
    fault_proxy.add_fault("drop", after_bytes=300_000, count=2)
    store = open_store(fault_proxy.url)
    assert store.read_range(served, 100, 1_900_000) == PAYLOAD[100:1_900_000]
    gets = [r for r in fault_proxy.requests if r[0] == "GET"]
    assert len(gets) == 3
    # The retry continues from the bytes already received rather than starting over.
    assert gets[1][2] != gets[0][2]


def test_503_twice_then_success(fault_proxy, served: str) -> None:
    fault_proxy.add_fault("status", code=503, count=2)
    store = open_store(fault_proxy.url)
    assert store.stat(served).size == len(PAYLOAD)
    fault_proxy.add_fault("status", code=503, count=2)
    assert store.read_range(served, 0, 1000) == PAYLOAD[:1000]


def test_429_is_transient(fault_proxy, served: str) -> None:
    fault_proxy.add_fault("status", code=429, count=1)
    assert open_store(fault_proxy.url).read_range(served, 5, 50) == PAYLOAD[5:50]


def test_404_fails_fast_with_url(fault_proxy) -> None:
    """A 404 is permanent: one request, no retry (counted at the proxy, not timed)."""
    store = open_store(fault_proxy.url)
    with pytest.raises(NotFoundError) as info:
        store.read_range("no/such.bin", 0, 10)
    assert f"{fault_proxy.url}/no/such.bin" in str(info.value) and "404" in str(info.value)
    assert [r for r in fault_proxy.requests if r[1] == "/no/such.bin"] == [("GET", "/no/such.bin", "bytes=0-9")]


def test_403_fails_fast_without_retry(fault_proxy, served: str) -> None:
    fault_proxy.add_fault("status", code=403, count=5)
    with pytest.raises(AccessDeniedError, match="403"):
        open_store(fault_proxy.url).read_range(served, 0, 10)
    assert len(fault_proxy.requests) == 1


def test_stall_then_timeout_is_retried(fault_proxy, served: str) -> None:
    fault_proxy.add_fault("stall", seconds=1.5, count=1)
    store = open_store(fault_proxy.url, timeout_s=0.5)
    assert store.read_range(served, 0, 100) == PAYLOAD[:100]


def test_status_errors_hide_credentials() -> None:
    err = status_error("https://alice:pw@host.invalid/a?X-Amz-Signature=s3cr3t", 403)
    assert "pw" not in str(err) and "s3cr3t" not in str(err) and "host.invalid/a" in str(err)


def test_subranges_and_connection_bound(nginx_server, served: str) -> None:
    client = HttpRangeClient(max_connections=3, subranges=4, min_subrange_bytes=100_000)
    url = f"{nginx_server.url}/{served}"
    assert client.get_range(url, 7, 1_999_990) == PAYLOAD[7:1_999_990]
    ranges = [(i * 10_000, i * 10_000 + 5000) for i in range(40)]
    assert client.get_ranges(url, ranges) == [PAYLOAD[s:e] for s, e in ranges]
    assert client._pool.connection_pool_kw["maxsize"] == 3
    client.close()


@pytest.mark.timeout(60)
def test_many_split_ranges_do_not_starve_a_small_pool(nginx_server, served: str) -> None:
    """Every range split into sub-ranges, more ranges than connections: no task waits on its own pool."""
    client = HttpRangeClient(max_connections=2, subranges=4, min_subrange_bytes=50_000)
    url = f"{nginx_server.url}/{served}"
    ranges = [(i * 200_000, (i + 1) * 200_000) for i in range(8)] + [(5, 5), (10, 20)]
    assert client.get_ranges(url, ranges) == [PAYLOAD[s:e] for s, e in ranges]
    client.close()


@pytest.mark.timeout(60)
def test_trickling_server_fails_in_bounded_time(fault_proxy, served: str) -> None:
    """A server sending 4 bytes/s never trips a per-read timeout; the pace check does."""
    fault_proxy.add_fault("trickle", bytes_per_s=4, count=100)
    store = open_store(fault_proxy.url, timeout_s=0.5, min_bytes_per_s=1000)
    store.set_outage_s(3)
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="too slow") as caught:
        store.read_range(served, 0, 4096)
    assert time.monotonic() - began < 3 + 1
    assert fault_proxy.url in str(caught.value) and "\n" not in str(caught.value)
    assert len([r for r in fault_proxy.requests if r[0] == "GET"]) > 1  # retried first


def test_retries_of_a_trickling_range_share_one_deadline(fault_proxy, served: str) -> None:
    """Each attempt gets ``timeout_s`` of grace, but no attempt outlives the read's deadline:
    two attempts of 1.5 s grace end at the 2 s deadline, not after 3 s (nor 6 x 1.5 s). The
    second ends on the pace check or on a socket read whose timeout the deadline shortened."""
    fault_proxy.add_fault("trickle", bytes_per_s=4, count=100)
    store = open_store(fault_proxy.url, timeout_s=1.5, min_bytes_per_s=1000)
    store.set_outage_s(2)
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="too slow|timed out"):
        store.read_range(served, 0, 4096)
    assert 1.5 <= time.monotonic() - began < 2 + 0.5
    # a second attempt fits before the deadline unless the machine stalls the first one past it
    assert 1 <= len([r for r in fault_proxy.requests if r[0] == "GET"]) <= 2


@pytest.mark.timeout(60)
def test_trickle_once_is_retried_to_success(fault_proxy, served: str) -> None:
    fault_proxy.add_fault("trickle", bytes_per_s=4, count=1)
    store = open_store(fault_proxy.url, timeout_s=0.5, min_bytes_per_s=1000)
    assert store.read_range(served, 10, 70_000) == PAYLOAD[10:70_000]


def test_redact_text_hides_userinfo_and_secret_query_values() -> None:
    from feedline.io.redact import redact_text

    text = redact_text(
        'GET /a.bin?token=T1&v=2 HTTP/1.1 from http://alice:PW@h:1/x?X-Amz-Signature=S&access_token=A'
    )
    assert "T1" not in text and "PW" not in text and "=S&" not in text and "=A" not in text
    assert "v=2" in text and "h:1/x" in text
