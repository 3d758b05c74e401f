"""URL checks, once for every command: a malformed URL is one line naming it, before any request.

urllib, urllib3 and fsspec each reject bad URLs in their own way and at their own time (a
``ValueError`` for a port of 99999, a ``TypeError`` from a filesystem that wants a host, a
``LocationParseError`` retried as if the network had failed). :func:`check_url` looks at the
scheme, host, port, bucket or repository first, so :func:`feedline.io.open_store`,
:func:`feedline.io.split_object_url` and the commands that take URLs fail the same way: a
:class:`UrlError` whose message names the URL without its credentials.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from feedline.io.errors import UrlError
from feedline.io.redact import redact_text

#: Schemes feedline opens: its own HTTP client, local folders, and fsspec filesystems rooted at
#: a bucket or repository (``gs``/``az`` only when their fsspec package is installed).
SCHEMES = ("file", "http", "https", "s3", "hf", "memory", "gs", "gcs", "az", "abfs", "abfss")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
#: A registered name or IPv4 address (RFC 3986 reg-name, percent-escapes allowed).
_HOST = re.compile(r"[A-Za-z0-9\-._~%!$&'()*+,;=]+")
_BUCKET = re.compile(r"[A-Za-z0-9._\-*?\[\]]+")  # glob characters: s3:// patterns are checked too
_HF_KINDS = ("datasets", "spaces", "models")


def url_name(url: str) -> str:
    """How a message names ``url``: without credentials, quoted when blank or padded."""
    text = redact_text(url)
    return text if text and text == text.strip() and text.isprintable() else repr(text)


def check_url(url: str) -> str:
    """The scheme of ``url`` (``"file"`` for a local path), or a :class:`UrlError` saying what
    is wrong with it. Local paths are only checked for being non-empty: any name is a path."""
    if not isinstance(url, str):
        raise UrlError(f"{url!r}: expected a URL or path as text, got {type(url).__name__}")
    if not url.strip():
        raise UrlError(f"{url_name(url)}: empty URL or path")
    if not url.isprintable():
        raise UrlError(f"{url_name(url)}: contains a control character (a newline?)")
    if "://" not in url:
        return "file"
    scheme, rest = url.split("://", 1)
    if not _SCHEME.fullmatch(scheme):
        raise UrlError(f"{url_name(url)}: {scheme!r} is not a URL scheme")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise UrlError(
            f"{url_name(url)}: unsupported scheme {scheme}:// (feedline reads "
            + ", ".join(f"{s}://" for s in SCHEMES[:6])
            + " and local paths)"
        )
    if scheme in ("http", "https"):
        _check_http(url)
    elif scheme == "hf":
        _check_hf(url, rest)
    elif scheme not in ("file", "memory"):
        bucket = rest.split("/", 1)[0]
        if not bucket:
            raise UrlError(f"{url_name(url)}: names no bucket ({scheme}://BUCKET/KEY)")
        if not _BUCKET.fullmatch(bucket):
            raise UrlError(f"{url_name(url)}: {bucket!r} is not a bucket name")
    return scheme


def _check_http(url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed bracket
        raise UrlError(f"{url_name(url)}: not a valid URL ({exc})") from None
    netloc = parts.netloc.rpartition("@")[2]
    if not netloc:
        raise UrlError(f"{url_name(url)}: names no host (http(s)://HOST[:PORT]/PATH)")
    if netloc.startswith("["):
        host, _, port = netloc[1:].partition("]")
        port = port.removeprefix(":")
        if not host or not re.fullmatch(r"[0-9A-Fa-f:.]+(%[\w.~-]+)?", host):
            raise UrlError(f"{url_name(url)}: [{host}] is not an IPv6 address")
    else:
        host, _, port = netloc.partition(":")
        if not host or not _HOST.fullmatch(host):
            raise UrlError(f"{url_name(url)}: {host!r} is not a host name")
    if port and not (port.isdigit() and 0 < int(port) <= 65535):
        raise UrlError(f"{url_name(url)}: port {port!r} is not a number from 1 to 65535")


def _check_hf(url: str, rest: str) -> None:
    segments = [s for s in rest.split("/") if s]
    if segments and segments[0] in _HF_KINDS:
        segments = segments[1:]
    if not segments:
        raise UrlError(
            f"{url_name(url)}: names no repository "
            "(hf://datasets/OWNER/NAME[@REVISION]/PATH, models: hf://OWNER/NAME/PATH)"
        )
