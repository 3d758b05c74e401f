"""A FAKE HTTP server for the few answers no real server gives on demand.

nginx always sends a correct ``Content-Range``, never a compressed ranged body, and does not show
the request headers a client sent. Tests that need one of those use this server and say so;
everything else runs against nginx, moto and the fault proxy (tests/servers.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Misbehaving:
    url: str
    answers: dict[str, Answer] = field(default_factory=dict)
    seen: list[dict[str, str]] = field(default_factory=list)


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: Misbehaving


class _Handler(BaseHTTPRequestHandler):
    """Records each request's headers, then sends the canned answer for its path (else 404)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY: no delayed-ACK wait between header and body
    server: _FakeServer

    def do_GET(self) -> None:  # noqa: N802
        self._answer(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        fake = self.server.fake
        fake.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        answer = fake.answers.get(self.path.split("?")[0], Answer(404, {}, b"no\n"))
        self.send_response(answer.status)
        for key, value in answer.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if send_body:
            self.wfile.write(answer.body)

    def log_message(self, *args: Any) -> None:
        return None


@contextlib.contextmanager
def run_misbehaving() -> Iterator[Misbehaving]:
    httpd = _FakeServer(("127.0.0.1", 0), _Handler)
    httpd.fake = Misbehaving(f"http://127.0.0.1:{httpd.server_address[1]}")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.fake
    finally:
        httpd.shutdown()
        httpd.server_close()
