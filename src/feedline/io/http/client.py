"""feedline's own HTTP range client.

Why not fsspec's HTTP filesystem: it opens a session per loop, cannot bound connections per
process, retries nothing, and treats a server that ignores ``Range`` as an error or silently reads
the whole object. This client caps connections (ranged reads on a lean ``http.client`` pool,
HEAD and streaming GETs on urllib3, each at most ``max_connections``), asks for
``identity`` encoding (a gzip-encoded ranged answer has no usable length), checks every
``Content-Range``, and retries transient failures from the byte it was at.
"""

from __future__ import annotations

import base64
import email.utils
import http.client
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

import urllib3
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from feedline.io.errors import (
    AccessDeniedError,
    IoError,
    NotFoundError,
    ObjectChangedError,
    RangeError,
    StoreError,
    TransientError,
    object_change,
)
from feedline.io.http.connections import ConnectionPool
from feedline.io.http.headers import parse_content_range, strong_etag, unsatisfied_range_total
from feedline.io.redact import redact_text, redact_url
from feedline.io.retry import RetryPolicy, call_with_retries, deadline, default_retry, remaining
from feedline.validate import check_int

DEFAULT_MAX_CONNECTIONS = 16
#: The slowest average a transfer may keep once its first ``timeout_s`` are over. ``timeout_s``
#: alone bounds each socket read, so a server trickling a byte a second would never trip it.
DEFAULT_MIN_BYTES_PER_S = 4096.0


class Pace:
    """A minimum throughput for one request: after a grace of ``grace_s`` seconds, the bytes
    received must keep up with ``min_bytes_per_s`` on average, or :meth:`check` raises a
    :class:`TransientError` (retried like a dropped connection, on a fresh one).

    ``deadline`` (a ``time.monotonic()``, the retrying call's) also ends a request that keeps
    the pace but cannot finish in time: retries of one read share that deadline.
    """

    __slots__ = ("what", "grace_s", "min_bytes_per_s", "began", "deadline")

    def __init__(
        self, what: str, grace_s: float, min_bytes_per_s: float, deadline: float | None = None
    ) -> None:
        self.what = what
        self.grace_s = grace_s
        self.min_bytes_per_s = min_bytes_per_s
        self.began = time.monotonic()
        self.deadline = deadline

    def check(self, received: int) -> None:
        now = time.monotonic()
        elapsed = now - self.began
        if self.deadline is not None and now > self.deadline:
            raise TransientError(
                f"{self.what}: too slow: {received} bytes in {elapsed:.1f} s, and the read's "
                "retries are out of time"
            )
        if elapsed > self.grace_s and received < (elapsed - self.grace_s) * self.min_bytes_per_s:
            raise TransientError(
                f"{self.what}: too slow: {received} bytes in {elapsed:.1f} s "
                f"(below {self.min_bytes_per_s:g} bytes/s after {self.grace_s:g} s)"
            )


@dataclass(frozen=True)
class HttpHead:
    """What a HEAD tells about an object."""

    size: int
    etag: str | None
    last_modified: str | None
    accept_ranges: bool

    @property
    def strong_etag(self) -> str | None:
        """The ETag when it is strong: a weak one (``W/...``) is no fingerprint (see headers)."""
        return strong_etag(self.etag)


def status_error(
    url: str,
    status: int,
    reason: str = "",
    content_range: str | None = None,
    retry_after: str | None = None,
) -> StoreError:
    """The error for a non-success status: transient ones are retried, the rest fail at once.

    ``content_range`` is the answer's ``Content-Range``: a 416's states the object size, kept as
    :attr:`RangeError.total`. ``retry_after`` is its ``Retry-After`` (seconds or an HTTP date),
    kept as :attr:`TransientError.retry_after` for the retrying call to honour.
    """
    where = redact_url(url)
    text = f"{where}: HTTP {status}{(' ' + reason) if reason else ''}"
    if status == 404 or status == 410:
        return NotFoundError(f"{text}: no such object; check the URL")
    if status in (401, 403):
        return AccessDeniedError(f"{text}: access denied; check the credentials for this store")
    if status == 416:
        total = unsatisfied_range_total(content_range)
        size = "" if total is None else f" (object size {total})"
        return RangeError(f"{text}: requested range not satisfiable{size}", total)
    if status == 429 or status >= 500:
        error = TransientError(text)
        error.retry_after = parse_retry_after(retry_after)
        return error
    return StoreError(text)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds from now: delta-seconds or an HTTP date; ``None`` if unusable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class HttpRangeClient:
    """A bounded pool of keep-alive connections for HEAD, ranged GET and streaming GET.

    ``max_connections`` caps concurrent connections per host (requests beyond it wait for a free
    one); ``subranges`` splits one large range into that many concurrent sub-range requests.
    """

    def __init__(
        self,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        subranges: int = 1,
        timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        headers: dict[str, str] | None = None,
        min_subrange_bytes: int = 1 << 20,
        min_bytes_per_s: float = DEFAULT_MIN_BYTES_PER_S,
        origin_headers: tuple[str, dict[str, str]] | None = None,
    ) -> None:
        check_int("max_connections", max_connections, minimum=1, error=IoError)
        check_int("subranges", subranges, minimum=1, error=IoError)
        check_int("min_subrange_bytes", min_subrange_bytes, minimum=1, error=IoError)
        self.max_connections = max_connections
        self.subranges = subranges
        self.retry = retry or default_retry()  # None: the io default ($FEEDLINE_OUTAGE_S or 60 s)
        self.min_subrange_bytes = min_subrange_bytes
        self.timeout_s = timeout_s
        if not min_bytes_per_s >= 0:
            raise IoError(f"min_bytes_per_s must be >= 0, got {min_bytes_per_s!r}")
        self.min_bytes_per_s = float(min_bytes_per_s)
        self.extra_headers = dict(headers or {})
        self._headers = {"Accept-Encoding": "identity", **self.extra_headers}
        #: (an origin URL, headers sent to that origin only: scheme, host AND port compared on
        #: every request and every redirect hop). A Hub token goes to the Hub, not to its CDN.
        self.origin_headers = origin_headers
        self._origin = None if origin_headers is None else ConnectionPool.key(urlsplit(origin_headers[0]))
        self._conns = ConnectionPool(max_connections, timeout_s)
        self._pool = urllib3.PoolManager(
            num_pools=8,
            maxsize=max_connections,
            block=True,
            retries=False,
            timeout=urllib3.Timeout(connect=min(timeout_s, 10.0), read=timeout_s),
        )
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    def pace(self, url: str) -> Pace:
        """The minimum-throughput watch for one request to ``url`` (within the current call's
        deadline, if any)."""
        return Pace(redact_url(url), self.timeout_s, self.min_bytes_per_s, deadline())

    @staticmethod
    def store_name(url: str) -> str:
        """What the outage warnings name, and the key of the outage clock: scheme, host and port
        (connections and outages are per server), without credentials."""
        parts = urlsplit(url)
        return redact_url(f"{parts.scheme}://{parts.netloc}")

    # -- raw requests -------------------------------------------------------------------------
    def headers_for(self, parts: SplitResult) -> dict[str, str]:
        """The headers every request to ``parts`` carries: userinfo credentials, the client's
        own, and the origin headers when ``parts`` is that origin (same scheme, host and port)."""
        out = {**_credentials(parts), **self._headers}
        if self.origin_headers is not None and ConnectionPool.key(parts) == self._origin:
            out.update(self.origin_headers[1])
        return out

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        preload_content: bool = True,
        redirect: bool = True,
    ) -> urllib3.BaseHTTPResponse:
        """One request without retries or status checks; connection failures become TransientError.

        With origin headers a redirect is followed here, hop by hop, so whether a hop gets them
        is feedline's own check (:meth:`headers_for`), not urllib3's redirect rules."""
        read_s = remaining(self.timeout_s)  # within the retrying call's deadline
        if self.origin_headers is not None and redirect:
            for _hop in range(5):
                resp = self.request(method, url, headers=headers, preload_content=preload_content, redirect=False)
                location = resp.headers.get("Location")
                if resp.status not in (301, 302, 303, 307, 308) or not location:
                    return resp
                resp.drain_conn()
                resp.release_conn()
                url = urljoin(url, location)
            return self.request(method, url, headers=headers, preload_content=preload_content, redirect=False)
        try:
            return self._pool.request(
                method,
                url,
                headers={**self.headers_for(urlsplit(url)), **(headers or {})},
                preload_content=preload_content,
                redirect=redirect,
                timeout=urllib3.Timeout(connect=min(read_s, 10.0), read=read_s),
            )
        except Urllib3HTTPError as exc:
            raise TransientError(f"{redact_url(url)}: {type(exc).__name__}: {_short(exc)}") from None

    def head(self, url: str) -> HttpHead:
        """Size and validators; falls back to a one-byte GET when a server refuses HEAD."""

        def once() -> HttpHead:
            resp = self.request("HEAD", url)
            if resp.status in (405, 501):
                return self._head_by_get(url)
            if resp.status >= 300:
                raise status_error(url, resp.status, resp.reason or "", None, resp.headers.get("Retry-After"))
            length = resp.headers.get("Content-Length")
            if length is None:
                return self._head_by_get(url)
            return HttpHead(
                size=int(length),
                etag=resp.headers.get("ETag"),
                last_modified=resp.headers.get("Last-Modified"),
                accept_ranges=resp.headers.get("Accept-Ranges", "").lower() == "bytes",
            )

        return call_with_retries(
            once, policy=self.retry, what=f"HEAD {redact_url(url)}", store=self.store_name(url)
        )

    def _head_by_get(self, url: str) -> HttpHead:
        resp = self.request("GET", url, headers={"Range": "bytes=0-0"}, preload_content=False)
        try:
            if resp.status == 206:
                answered = parse_content_range(resp.headers.get("Content-Range"))
                if answered is None or answered.total is None:
                    raise StoreError(f"{redact_url(url)}: unusable Content-Range in reply")
                size, ranges = answered.total, True
            elif resp.status == 200 and resp.headers.get("Content-Length") is not None:
                size, ranges = int(resp.headers["Content-Length"]), False
            else:
                raise status_error(
                    url,
                    resp.status,
                    resp.reason or "",
                    resp.headers.get("Content-Range"),
                    resp.headers.get("Retry-After"),
                )
            return HttpHead(size, resp.headers.get("ETag"), resp.headers.get("Last-Modified"), ranges)
        finally:
            if resp.status != 206:
                resp.close()
            resp.release_conn()

    # -- ranged reads -------------------------------------------------------------------------
    def get_range(self, url: str, start: int, end: int, expect: Expected | None = None) -> bytearray:
        """Bytes ``[start, end)``, retried from where a broken transfer stopped."""
        return self.get_ranges(url, [(start, end)], expect)[0]

    def _pieces(self, start: int, end: int) -> list[tuple[int, int]]:
        """``[start, end)`` as the sub-ranges fetched concurrently (one piece when small)."""
        if self.subranges > 1 and end - start >= 2 * self.min_subrange_bytes:
            return _split(start, end, self.subranges)
        return [(start, end)] if end > start else []

    def _get_range_retrying(
        self, url: str, start: int, end: int, view: memoryview, expect: Expected | None = None
    ) -> None:
        """Fill ``view`` (``end - start`` bytes) with ``[start, end)``."""
        filled = [0]  # advanced as bytes arrive, so a retry continues where the link broke

        def once() -> None:
            try:
                self._get_range_into(url, start, end, view, filled, redirects=5, expect=expect)
            except _StaleConnection:
                # A kept-alive connection the server had closed (idle timeout, restart): not a
                # failure of the server, so at once and on a fresh one, outside the backoff.
                self._get_range_into(url, start, end, view, filled, redirects=5, expect=expect)

        call_with_retries(
            once, policy=self.retry, what=f"GET {redact_url(url)}", store=self.store_name(url)
        )

    def _get_range_into(
        self, url: str, start: int, end: int, view: memoryview, filled: list[int], redirects: int,
        expect: Expected | None = None,
    ) -> None:
        offset = start + filled[0]
        parts = urlsplit(url)
        key = self._conns.key(parts)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        headers = {**self.headers_for(parts), "Range": f"bytes={offset}-{end - 1}"}
        if expect is not None and expect.etag is not None:
            headers["If-Match"] = expect.etag  # the server itself refuses another object (412)
        conn = self._conns.acquire(key)
        reused = conn.sock is not None  # a fresh connection connects in request()
        reuse = False
        try:
            try:
                _set_timeout(conn, remaining(self.timeout_s))
                conn.request("GET", target, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                self._conns.drop_idle(key)
                error = _StaleConnection if reused else TransientError
                raise error(f"{redact_url(url)}: {type(exc).__name__}: {_short(exc)}") from None
            status = resp.status
            if status in (301, 302, 303, 307, 308) and resp.getheader("Location") and redirects > 0:
                resp.read()
                reuse = not resp.will_close
                location = urljoin(url, resp.getheader("Location", ""))
                self._conns.release(key, conn, reuse)
                conn = None  # type: ignore[assignment]
                self._get_range_into(location, start, end, view, filled, redirects - 1, expect)
                return
            if expect is not None:
                expect.check(url, resp)
            if status == 206:
                answered = parse_content_range(resp.getheader("Content-Range"))
                if answered is not None and answered.total is not None and answered.total < end:
                    raise RangeError(
                        f"{redact_url(url)}: range end {end} past object size {answered.total}", answered.total
                    )
                if answered is None or answered.first != offset or answered.end > end:
                    raise StoreError(
                        f"{redact_url(url)}: server answered range "
                        f"{resp.getheader('Content-Range')!r} to bytes={offset}-{end - 1}"
                    )
                skip = 0
            elif status == 200:
                # The server ignored Range: skip to our offset in the full body, then hang up.
                length = resp.getheader("Content-Length")
                if length is not None and int(length) < end:
                    raise RangeError(f"{redact_url(url)}: range end {end} past object size {length}", int(length))
                skip = offset
            else:
                resp.read()
                reuse = not resp.will_close
                raise status_error(
                    url, status, resp.reason or "", resp.getheader("Content-Range"), resp.getheader("Retry-After")
                )
            self._read_body(resp, url, skip, view, filled, end - start, self.pace(url))
            reuse = status == 206 and resp.isclosed() and not resp.will_close
        finally:
            if conn is not None:
                self._conns.release(key, conn, reuse)

    @staticmethod
    def _read_body(
        resp: http.client.HTTPResponse,
        url: str,
        skip: int,
        view: memoryview,
        filled: list[int],
        total: int,
        pace: Pace,
    ) -> None:
        # read1/readinto1 return after one socket read, so the pace is checked while a slow
        # server trickles (a plain readinto waits until its whole slice has arrived).
        received = 0
        try:
            while skip > 0:
                chunk = resp.read1(min(skip, 1 << 20))
                if not chunk:
                    raise TransientError(f"{redact_url(url)}: body ended while skipping to offset")
                skip -= len(chunk)
                received += len(chunk)
                pace.check(received)
            while filled[0] < total:
                n = resp.readinto1(view[filled[0] : min(total, filled[0] + (1 << 20))])
                if not n:
                    raise TransientError(f"{redact_url(url)}: body ended after {filled[0]} of {total} bytes")
                filled[0] += n
                received += n
                pace.check(received)
            if resp.length == 0:
                resp.read()  # marks the answer complete (read1 does not), so the connection is reused
        except (OSError, http.client.HTTPException) as exc:
            raise TransientError(f"{redact_url(url)}: {type(exc).__name__}: {_short(exc)}") from None

    def get_ranges(
        self, url: str, ranges: list[tuple[int, int]], expect: Expected | None = None
    ) -> list[bytearray]:
        """Many ranges of one object, at most ``max_connections`` in flight.

        Each range is read straight into the bytearray returned for it, its sub-ranges into
        their slices of it: a copy into ``bytes`` would cost a second buffer's page faults and
        a memcpy under the GIL, per MiB about the time the socket read itself takes.
        Sub-ranges of all ranges go through the thread pool in one flat batch: a range task
        waiting on its own sub-range tasks in the same bounded pool could deadlock it.
        ``expect``: the object the reads are pinned to; any other answers
        :class:`~feedline.io.errors.ObjectChangedError`, never its bytes.
        """
        out = [bytearray(end - start) for start, end in ranges]
        flat = [(s, e, memoryview(buffer)[s - start : e - start])
                for (start, end), buffer in zip(ranges, out, strict=True)
                for s, e in self._pieces(start, end)]
        self.map(lambda p: self._get_range_retrying(url, *p, expect), flat)
        return out

    def map(self, fn: Any, items: list[Any]) -> list[Any]:
        """Run ``fn`` over ``items`` on the client's bounded thread pool, keeping order."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.max_connections, thread_name_prefix="feedline-http"
                )
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        with self._executor_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None
        self._pool.clear()
        self._conns.clear()


@dataclass(frozen=True)
class Expected:
    """The object ranged reads are pinned to: its size and strong ETag (``None``: none known).

    Sent as ``If-Match`` (a server answers 412 for another object) and checked against every
    answer: a ``Content-Range`` total or a full body's length that is not ``size``, or an
    ``ETag`` that is not ``etag``, is another object even when a server ignored ``If-Match``.
    """

    size: int
    etag: str | None = None

    def check(self, url: str, resp: http.client.HTTPResponse) -> None:
        """Raise :class:`~feedline.io.errors.ObjectChangedError` when ``resp`` answers from
        another object (a 412, a 404, or a size or ETag that differs); the connection is then
        dropped by the caller."""
        status = resp.status
        if status == 412:
            what = f"its ETag is no longer {self.etag}"
        elif status == 404:
            what = "it is gone"
        elif status in (200, 206):
            if status == 206:
                answered = parse_content_range(resp.getheader("Content-Range"))
                size = None if answered is None else answered.total
            else:
                length = resp.getheader("Content-Length")
                size = None if length is None else int(length)
            answered_etag = strong_etag(resp.getheader("ETag"))
            found = object_change(self.size, self.etag and f"http:{self.etag}", size,
                                  answered_etag and f"http:{answered_etag}")
            if found is None:
                return
            what = found
        else:
            return
        resp.close()
        where = redact_url(url)
        raise ObjectChangedError(f"{where}: changed ({what})", what, where)


class _StaleConnection(TransientError):
    """A reused keep-alive connection failed before any answer: it may have been closed while
    idle, so the request is sent again once on a fresh connection before it counts as failed."""


def _credentials(parts: SplitResult) -> dict[str, str]:
    """Basic ``Authorization`` for a URL with ``user:password@``: urllib3 drops userinfo, and
    http.client never reads it, so each request path adds it here."""
    if parts.username is None:
        return {}
    token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return {"Authorization": "Basic " + base64.b64encode(token).decode()}


def _set_timeout(conn: http.client.HTTPConnection, timeout_s: float) -> None:
    """Each socket read waits at most ``timeout_s``: ``timeout_s``, or less near the deadline."""
    conn.timeout = timeout_s
    if conn.sock is not None:
        conn.sock.settimeout(timeout_s)


def _split(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    step = -(-(end - start) // parts)
    return [(s, min(s + step, end)) for s in range(start, end, step)]


def _short(exc: BaseException) -> str:
    text = redact_text(str(exc))
    return text if len(text) < 200 else text[:200] + "..."
