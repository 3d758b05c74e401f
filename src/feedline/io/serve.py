"""A small static HTTP server with Range and ETag, for local datasets.

Lets a user (and ``feedline demo``) exercise the remote path — HEAD, ranged GETs, strong ETags,
``If-Range`` — on a folder without installing nginx. It binds to 127.0.0.1 by default; it is a
test and demo aid, not a production file server.
"""

from __future__ import annotations

import email.utils
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def _etag(st: os.stat_result) -> str:
    return f'"{st.st_mtime_ns:x}-{st.st_size:x}"'


def _handler(root: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "feedline-serve"
        #: TCP_NODELAY on every accepted connection: the headers and a small body go out as two
        #: writes, and with Nagle's algorithm the second waits for the client's delayed ACK
        #: (~40 ms on Linux loopback) before it is sent, per request.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return None

        def _resolve(self) -> Path | None:
            rel = unquote(urlsplit(self.path).path).lstrip("/")
            full = (root / rel).resolve()
            if root != full and root not in full.parents:
                return None
            return full if full.is_file() else None

        def _error(self, code: int) -> None:
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _serve(self, with_body: bool) -> None:
            full = self._resolve()
            if full is None:
                self._error(404)
                return
            st = full.stat()
            size, etag = st.st_size, _etag(st)
            start, end, status = 0, size, 200
            spec = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if spec and (if_range is None or if_range == etag):
                match = _RANGE.match(spec.strip())
                if not match or (not match.group(1) and not match.group(2)):
                    self._error(416)
                    return
                if match.group(1):
                    start = int(match.group(1))
                    end = min(size, int(match.group(2)) + 1) if match.group(2) else size
                else:
                    start, end = max(0, size - int(match.group(2))), size
                if start >= size or end <= start:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - start))
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            if not with_body:
                return
            with open(full, "rb") as handle:
                handle.seek(start)
                left = end - start
                while left > 0:
                    chunk = handle.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)

        def do_GET(self) -> None:  # noqa: N802
            self._serve(True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._serve(False)

    return Handler


class StaticServer:
    """Serve ``root`` on ``host:port`` (port 0 picks a free one) in a background thread."""

    def __init__(self, root: str | os.PathLike[str], host: str = "127.0.0.1", port: int = 0) -> None:
        self.root = Path(root).resolve()
        self._server = ThreadingHTTPServer((host, port), _handler(self.root))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StaticServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="feedline-serve", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> StaticServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
