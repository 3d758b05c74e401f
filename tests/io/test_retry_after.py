"""``Retry-After`` on 429/503 is honoured, up to the outage limit (through the fault proxy)."""

from __future__ import annotations

import os
import time

import pytest

from feedline.io import StoreUnavailableError
from feedline.io.http.client import HttpRangeClient, parse_retry_after
from feedline.io.retry import RetryPolicy

PAYLOAD = os.urandom(100_000)


@pytest.fixture
def served(nginx_server) -> str:
    (nginx_server.root / "after.bin").write_bytes(PAYLOAD)
    return "after.bin"


@pytest.mark.parametrize("code", [429, 503])
def test_retry_after_is_waited_before_the_retry(fault_proxy, served: str, code: int) -> None:
    """The policy's own first pause is at most 0.05 s: waiting 1.5 s is the header's doing."""
    fault_proxy.add_fault("status", code=code, count=1, retry_after="2")
    client = HttpRangeClient(retry=RetryPolicy(outage_s=10))
    began = time.monotonic()
    try:
        assert client.get_range(f"{fault_proxy.url}/{served}", 10, 5000) == PAYLOAD[10:5000]
    finally:
        client.close()
    took = time.monotonic() - began
    assert 1.9 <= took < 5, took
    assert len([r for r in fault_proxy.requests if r[0] == "GET"]) == 2


def test_retry_after_past_the_outage_limit_is_cut_to_it(fault_proxy, served: str) -> None:
    """A server asking for an hour does not hold the reader for an hour: outage_s (2 s) bounds it."""
    fault_proxy.add_fault("status", code=503, count=100, retry_after="3600")
    client = HttpRangeClient(retry=RetryPolicy(outage_s=2))
    began = time.monotonic()
    try:
        with pytest.raises(StoreUnavailableError) as info:
            client.get_range(f"{fault_proxy.url}/{served}", 0, 100)
    finally:
        client.close()
    took = time.monotonic() - began
    assert 1.9 <= took < 4, took
    assert "503" in str(info.value) and "outage_s=2" in str(info.value)


def test_retry_after_forms() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: at once
