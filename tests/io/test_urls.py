"""check_url: the URLs feedline opens pass as they are; malformed ones are tested through the CLI
(tests/test_cli.py), where users meet them."""

from __future__ import annotations

import pytest

from feedline.io.errors import UrlError
from feedline.io.urls import check_url, url_name


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("http://127.0.0.1:8080/x", "http"),
        ("HTTPS://Example.org/a b/c?sig=x", "https"),
        ("http://[::1]:8080/x", "http"),
        ("http://user:pw@host/x", "http"),
        ("http://host:/x", "http"),
        ("s3://bucket/prefix/*.zst", "s3"),
        ("s3://bucket", "s3"),
        ("hf://datasets/allenai/c4@main/en/*.json.gz", "hf"),
        ("hf://gpt2", "hf"),
        ("memory://", "memory"),
        ("file:///tmp/x", "file"),
        ("relative/path with spaces.jsonl", "file"),
        ("gs://bucket/key", "gs"),
    ],
)
def test_urls_feedline_opens_pass(url: str, scheme: str) -> None:
    assert check_url(url) == scheme


def test_the_error_names_the_url_without_credentials() -> None:
    with pytest.raises(UrlError, match=r"^http://\*\*\*@h:99999/x\?token=\*\*\*: port '99999'"):
        check_url("http://u:pw@h:99999/x?token=abc")
    assert url_name("") == "''" and url_name(" x ") == "' x '"
