"""Content-Range / ETag parsing, and what nginx's real answers parse to."""

from __future__ import annotations

import os
import pickle

import pytest

from feedline.io import RangeError
from feedline.io.http.client import HttpRangeClient, status_error
from feedline.io.http.headers import (
    ContentRange,
    parse_content_range,
    strong_etag,
    unsatisfied_range_total,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes 0-99/1000", ContentRange(0, 99, 1000)),
        ("bytes 5-5/*", ContentRange(5, 5, None)),
        ("BYTES  7-9/10 ", ContentRange(7, 9, 10)),
        ("bytes 9-7/10", None),  # last before first: malformed
        ("bytes */1000", None),  # a 416's form, not a range
        ("items 0-1/2", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_content_range(value, expected) -> None:
    assert parse_content_range(value) == expected


def test_content_range_end_is_exclusive() -> None:
    assert ContentRange(10, 19, None).end == 20


@pytest.mark.parametrize(
    ("value", "total"), [("bytes */1234", 1234), ("bytes 0-1/2", None), ("", None), (None, None)]
)
def test_unsatisfied_range_total(value, total) -> None:
    assert unsatisfied_range_total(value) == total


def test_strong_etag() -> None:
    assert strong_etag('"abc"') == '"abc"'
    assert strong_etag('W/"abc"') is None
    assert strong_etag(None) is None and strong_etag("") is None


def test_416_status_error_keeps_the_size_and_survives_pickling() -> None:
    err = status_error("http://h/x", 416, "Range Not Satisfiable", "bytes */77")
    assert isinstance(err, RangeError) and err.total == 77 and "object size 77" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert again.total == 77 and str(again) == str(err)
    assert status_error("http://h/x", 416).total is None


def test_nginx_answers_parse(nginx_server) -> None:
    payload = os.urandom(5000)
    (nginx_server.root / "headers.bin").write_bytes(payload)
    url = f"{nginx_server.url}/headers.bin"
    client = HttpRangeClient()
    try:
        head = client.head(url)
        assert head.size == 5000 and head.strong_etag == head.etag and head.etag
        resp = client.request("GET", url, headers={"Range": "bytes=100-199"})
        assert parse_content_range(resp.headers["Content-Range"]) == ContentRange(100, 199, 5000)
        with pytest.raises(RangeError) as info:
            client.get_range(url, 6000, 6010)  # past the end: nginx answers 416 bytes */5000
        assert info.value.total == 5000
    finally:
        client.close()
