"""feedline's static server (``feedline demo``'s): ranges, ETags, and no Nagle delay.

A small ranged answer is written as two sends (headers, then body). With Nagle's algorithm on,
the second waits for the client's delayed ACK, about 40 ms per request on Linux loopback; every
server feedline starts, and every server of the test suite, sets TCP_NODELAY instead.
"""

from __future__ import annotations

import http.client
import socket
import statistics
import time
from pathlib import Path

import pytest

from feedline.io import open_store
from feedline.io.serve import StaticServer
from tests.io.http.misbehaving import _Handler as MisbehavingHandler
from tests.servers import _nginx_conf, _proxy_handler


@pytest.fixture
def served(tmp_path: Path):
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 64)
    with StaticServer(tmp_path) as server:
        yield server


def test_ranges_and_validators(served: StaticServer) -> None:
    store = open_store(served.url)
    info = store.stat("blob.bin")
    assert info.size == 256 * 64 and info.fingerprint is not None
    assert bytes(store.read_range("blob.bin", 3, 9)) == bytes(range(3, 9))


def test_small_ranges_answer_at_once(served: StaticServer) -> None:
    """Round trips of a 100-byte range on one kept-alive connection: about 1 ms, not ~40 ms."""
    host, port = served.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    times = []
    try:
        for i in range(30):
            t0 = time.perf_counter()
            conn.request("GET", "/blob.bin", headers={"Range": f"bytes={i}-{i + 99}"})
            resp = conn.getresponse()
            assert resp.status == 206 and len(resp.read()) == 100
            times.append(time.perf_counter() - t0)
    finally:
        conn.close()
    assert statistics.median(times) < 0.02, [round(t * 1000, 1) for t in times]


def test_accepted_connections_have_tcp_nodelay(served: StaticServer) -> None:
    """The option itself, read from the socket the server accepted."""
    seen: list[int] = []
    handler = served._server.RequestHandlerClass
    original = handler.setup

    def setup(self) -> None:  # noqa: ANN001
        original(self)
        seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    handler.setup = setup  # type: ignore[method-assign]
    try:
        store = open_store(served.url)
        store.read_range("blob.bin", 0, 10)
        store.close()
    finally:
        handler.setup = original  # type: ignore[method-assign]
    assert seen and all(seen), seen


def test_every_test_server_disables_nagle(tmp_path: Path) -> None:
    """The fault proxy, the fake server and moto's handler set TCP_NODELAY; nginx's conf says so."""
    assert _proxy_handler([]).disable_nagle_algorithm
    assert MisbehavingHandler.disable_nagle_algorithm
    assert "tcp_nodelay on;" in _nginx_conf(tmp_path, tmp_path, 8080)
    from moto.server import MotoRequestHandler

    from tests.servers import run_moto

    with run_moto():
        assert MotoRequestHandler.disable_nagle_algorithm
